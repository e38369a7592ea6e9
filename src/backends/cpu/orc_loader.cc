#include "backends/cpu/orc_loader.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "backends/cpu/clang_compiler.h"
#include "core/logging.h"
#include "llvm/ExecutionEngine/Orc/ExecutionUtils.h"
#include "llvm/ExecutionEngine/Orc/LLJIT.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

namespace tailor::internal::cpu {
namespace {

// The one place an llvm::Error becomes an absl::Status.
absl::Status LlvmErrorToStatus(llvm::Error error, absl::string_view what) {
  if (!error) return absl::OkStatus();
  return absl::InternalError(
      absl::StrCat(what, ": ", llvm::toString(std::move(error))));
}

}  // namespace

LoadedObject::LoadedObject(std::shared_ptr<llvm::orc::LLJIT> jit,
                           llvm::orc::JITDylib* dylib, CpuEntry entry)
    : jit_(std::move(jit)), dylib_(dylib), entry_(entry) {}

LoadedObject::~LoadedObject() {
  if (llvm::Error error = jit_->getExecutionSession().removeJITDylib(*dylib_)) {
    Logger().warn("could not unload a CPU kernel: {}",
                  llvm::toString(std::move(error)));
  }
}

absl::StatusOr<std::unique_ptr<OrcLoader>> OrcLoader::Create() {
  GetHostTarget();  // initializes the native target
  llvm::Expected<std::unique_ptr<llvm::orc::LLJIT>> jit =
      llvm::orc::LLJITBuilder().create();
  if (!jit)
    return LlvmErrorToStatus(jit.takeError(), "cannot create the ORC LLJIT");
  return std::unique_ptr<OrcLoader>(
      new OrcLoader(std::shared_ptr<llvm::orc::LLJIT>(std::move(*jit))));
}

absl::StatusOr<std::unique_ptr<LoadedObject>> OrcLoader::Load(
    absl::string_view object, absl::string_view entry_symbol) {
  uint64_t id;
  {
    absl::MutexLock lock(&mu_);
    id = next_id_++;
  }
  llvm::Expected<llvm::orc::JITDylib&> dylib =
      jit_->createJITDylib(absl::StrCat("tailor_kernel_", id));
  if (!dylib)
    return LlvmErrorToStatus(dylib.takeError(), "cannot create a JITDylib");
  auto process_symbols =
      llvm::orc::DynamicLibrarySearchGenerator::GetForCurrentProcess(
          jit_->getDataLayout().getGlobalPrefix());
  if (!process_symbols) {
    return LlvmErrorToStatus(process_symbols.takeError(),
                             "cannot expose process symbols");
  }
  dylib->addGenerator(std::move(*process_symbols));

  auto remove = [&] {
    llvm::consumeError(jit_->getExecutionSession().removeJITDylib(*dylib));
  };
  auto buffer = llvm::MemoryBuffer::getMemBufferCopy(
      llvm::StringRef(object.data(), object.size()), "tailor_kernel.o");
  if (llvm::Error error = jit_->addObjectFile(*dylib, std::move(buffer))) {
    remove();
    return LlvmErrorToStatus(std::move(error), "cannot add the kernel object");
  }
  llvm::Expected<llvm::JITEvaluatedSymbol> symbol = jit_->lookup(
      *dylib, llvm::StringRef(entry_symbol.data(), entry_symbol.size()));
  if (!symbol) {
    absl::Status status = LlvmErrorToStatus(
        symbol.takeError(),
        absl::StrCat("cannot resolve kernel entry '", entry_symbol, "'"));
    remove();
    return status;
  }
  auto entry =
      reinterpret_cast<CpuEntry>(static_cast<uintptr_t>(symbol->getAddress()));
  return std::make_unique<LoadedObject>(jit_, &*dylib, entry);
}

}  // namespace tailor::internal::cpu
