#include "backends/cpu/clang_compiler.h"

#include <time.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "clang/Basic/Diagnostic.h"
#include "clang/Basic/DiagnosticOptions.h"
#include "clang/Basic/Version.h"
#include "clang/CodeGen/CodeGenAction.h"
#include "clang/Frontend/CompilerInstance.h"
#include "clang/Frontend/CompilerInvocation.h"
#include "clang/Frontend/TextDiagnosticPrinter.h"
#include "core/embedded_files.h"
#include "core/hash.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Analysis/TargetLibraryInfo.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/Host.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/VirtualFileSystem.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/Target/TargetOptions.h"

namespace tailor::internal::cpu {
namespace {

constexpr char kRoot[] = "/tailor/";
constexpr char kMainFile[] = "/tailor/kernel.cc";
// Code generation at -O1, after the -O2 IR pipeline. -O2 and up add the
// post-RA list scheduler, which costs compile time and buys no run time on
// the out-of-order x86 cores tailor targets
// (bench/results/compile_time.txt, "CPU codegen level"). Part of
// ClangCompilerIdentity, hence of every cache key.
constexpr llvm::CodeGenOpt::Level kCodegenLevel = llvm::CodeGenOpt::Less;

llvm::IntrusiveRefCntPtr<llvm::vfs::InMemoryFileSystem> MakeFileSystem(
    absl::string_view code) {
  llvm::IntrusiveRefCntPtr<llvm::vfs::InMemoryFileSystem> fs(
      new llvm::vfs::InMemoryFileSystem);
  fs->addFile(kMainFile, 0,
              llvm::MemoryBuffer::getMemBufferCopy(
                  llvm::StringRef(code.data(), code.size())));
  for (const EmbeddedFile& file : EmbeddedFiles()) {
    std::string path = absl::StrCat(kRoot, file.path);
    fs->addFile(path, 0,
                llvm::MemoryBuffer::getMemBuffer(
                    llvm::StringRef(file.data, file.size), path,
                    /*RequiresNullTerminator=*/false));
  }
  return fs;
}

std::vector<std::string> FrontendArgs(const HostTarget& target) {
  std::vector<std::string> args = {
      "-triple",
      target.triple,
      "-target-cpu",
      target.cpu,
      "-O3",
      // The frontend emits optimizable IR (attributes, TBAA, lifetimes) but
      // runs no LLVM pass: Optimize() below runs the pipeline (-O2), timed
      // on its own.
      "-disable-llvm-passes",
      "-std=c++20",
      "-ffp-contract=on",
      "-mrelocation-model",
      "pic",
      "-pic-level",
      "2",
      "-mcmodel=large",  // see clang_compiler.h
      "-fno-rtti",
      "-nostdsysteminc",
      "-nobuiltininc",
      "-I",
      kRoot,
      "-Wall",
      "-Werror",
      "-Wno-unused-parameter",
      "-Wno-unused-function",
  };
  for (llvm::StringRef feature : llvm::split(target.features, ',')) {
    if (feature.empty()) continue;
    args.push_back("-target-feature");
    args.push_back(feature.str());
  }
  args.push_back(kMainFile);
  return args;
}

// Source -> LLVM IR, unoptimized.
absl::StatusOr<std::unique_ptr<llvm::Module>> EmitModule(
    absl::string_view code, const HostTarget& target,
    llvm::LLVMContext& context) {
  std::string log;
  llvm::raw_string_ostream log_stream(log);
  llvm::IntrusiveRefCntPtr<clang::DiagnosticOptions> diag_options(
      new clang::DiagnosticOptions);
  auto* printer =
      new clang::TextDiagnosticPrinter(log_stream, diag_options.get());
  llvm::IntrusiveRefCntPtr<clang::DiagnosticsEngine> diags(
      new clang::DiagnosticsEngine(new clang::DiagnosticIDs, diag_options,
                                   printer, /*ShouldOwnClient=*/true));

  std::vector<std::string> arg_storage = FrontendArgs(target);
  std::vector<const char*> args;
  for (const std::string& a : arg_storage) args.push_back(a.c_str());
  auto invocation = std::make_shared<clang::CompilerInvocation>();
  if (!clang::CompilerInvocation::CreateFromArgs(*invocation, args, *diags)) {
    return absl::InternalError(
        absl::StrCat("clang rejected its arguments:\n", log));
  }

  clang::CompilerInstance compiler;
  compiler.setInvocation(invocation);
  compiler.createDiagnostics(
      new clang::TextDiagnosticPrinter(log_stream, diag_options.get()),
      /*ShouldOwnClient=*/true);
  compiler.createFileManager(MakeFileSystem(code));
  clang::EmitLLVMOnlyAction action(&context);
  bool ok = compiler.ExecuteAction(action);
  log_stream.flush();
  if (!ok)
    return absl::InternalError(
        absl::StrCat("kernel failed to compile:\n", log));
  std::unique_ptr<llvm::Module> module = action.takeModule();
  if (module == nullptr)
    return absl::InternalError(
        absl::StrCat("clang produced no module:\n", log));
  return module;
}

// Clang's -O2 IR pipeline (clang -O2 -funroll-loops -fvectorize
// -fslp-vectorize builds the same one) over `module`, with the target's cost
// model. -O3 differs mainly in higher unrolling thresholds; with the
// templates saying which loops to unroll (runtime/cpu/tailor_cpu.h) it makes
// the same kernels no faster and compiles longer
// (bench/results/compile_time.txt, "CPU IR pipeline").
void Optimize(llvm::Module& module, llvm::TargetMachine& machine) {
  llvm::PipelineTuningOptions tuning;
  tuning.LoopUnrolling = true;
  tuning.LoopInterleaving = true;
  tuning.LoopVectorization = true;
  tuning.SLPVectorization = true;
  llvm::PassBuilder builder(&machine, tuning);
  llvm::LoopAnalysisManager loops;
  llvm::FunctionAnalysisManager functions;
  llvm::CGSCCAnalysisManager sccs;
  llvm::ModuleAnalysisManager modules;
  llvm::TargetLibraryInfoImpl library_info(
      llvm::Triple(module.getTargetTriple()));
  functions.registerPass(
      [&] { return llvm::TargetLibraryAnalysis(library_info); });
  builder.registerModuleAnalyses(modules);
  builder.registerCGSCCAnalyses(sccs);
  builder.registerFunctionAnalyses(functions);
  builder.registerLoopAnalyses(loops);
  builder.crossRegisterProxies(loops, functions, sccs, modules);
  llvm::ModulePassManager passes =
      builder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O2);
  passes.run(module, modules);
}

// Optimized IR -> ELF object.
absl::StatusOr<std::string> EmitObject(llvm::Module& module,
                                       llvm::TargetMachine& machine) {
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream object_stream(object);
  llvm::legacy::PassManager passes;
  if (machine.addPassesToEmitFile(passes, object_stream, nullptr,
                                  llvm::CGFT_ObjectFile)) {
    return absl::InternalError(
        "LLVM cannot emit an object file for the host target");
  }
  passes.run(module);
  return std::string(object.data(), object.size());
}

// CPU time of the calling thread, in milliseconds.
double ThreadCpuMs() {
  timespec now;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return now.tv_sec * 1e3 + now.tv_nsec * 1e-6;
}

}  // namespace

const HostTarget& GetHostTarget() {
  static const HostTarget* target = [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
    llvm::InitializeNativeTargetAsmParser();
    auto* t = new HostTarget;
    t->triple = llvm::sys::getProcessTriple();
    t->cpu = llvm::sys::getHostCPUName().str();
    llvm::StringMap<bool> features;
    std::vector<std::string> enabled;
    if (llvm::sys::getHostCPUFeatures(features)) {
      for (const auto& f : features)
        enabled.push_back(absl::StrCat(f.second ? "+" : "-", f.first().str()));
    }
    std::sort(enabled.begin(), enabled.end());
    t->features = absl::StrJoin(enabled, ",");
    return t;
  }();
  return *target;
}

std::string ClangCompilerIdentity(const HostTarget& target) {
  return absl::StrCat(
      "clang-", CLANG_VERSION_STRING, " -O2 codegen-O1 -mcmodel=large ",
      target.triple, " ", target.cpu,
      " features:", HashBytes(target.features).Hex().substr(0, 16));
}

absl::StatusOr<std::string> CompileToObject(absl::string_view code,
                                            const HostTarget& target,
                                            CompilePhaseTimes* times) {
  CompilePhaseTimes local;
  if (times == nullptr) times = &local;
  *times = {};
  double start = ThreadCpuMs();
  llvm::LLVMContext context;
  absl::StatusOr<std::unique_ptr<llvm::Module>> module =
      EmitModule(code, target, context);
  times->frontend_ms = ThreadCpuMs() - start;
  if (!module.ok()) return module.status();

  std::string error;
  const llvm::Target* llvm_target =
      llvm::TargetRegistry::lookupTarget(target.triple, error);
  if (llvm_target == nullptr) {
    return absl::InternalError(
        absl::StrCat("no LLVM target for ", target.triple, ": ", error));
  }
  std::unique_ptr<llvm::TargetMachine> machine(llvm_target->createTargetMachine(
      target.triple, target.cpu, target.features, llvm::TargetOptions(),
      llvm::Reloc::PIC_, llvm::CodeModel::Large, kCodegenLevel));
  (*module)->setDataLayout(machine->createDataLayout());
  (*module)->setTargetTriple(target.triple);
  start = ThreadCpuMs();
  Optimize(**module, *machine);
  times->optimize_ms = ThreadCpuMs() - start;
  start = ThreadCpuMs();
  absl::StatusOr<std::string> object = EmitObject(**module, *machine);
  times->codegen_ms = ThreadCpuMs() - start;
  return object;
}

}  // namespace tailor::internal::cpu
