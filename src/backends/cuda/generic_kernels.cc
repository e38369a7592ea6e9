#include "backends/cuda/generic_kernels.h"

#include <chrono>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/generic_image.h"
#include "core/logging.h"
#include "core/spec_fields.h"
#include "tailor/status.h"

namespace tailor::cuda {
namespace {

using tailor::internal::Engine;
using tailor::internal::Kernel;
using tailor::internal::KernelGeneratorFn;
using tailor::internal::KernelSource;
using tailor::internal::KeyTarget;
using tailor::internal::OpKind;
using tailor::internal::SpecKey;

OpKind OpOf(GenericKernelId id) { return GenericKernelInfoOf(id).op; }

const GenericImage* FindImage(const char* target) {
  for (int i = 0; i < kNumGenericImages; ++i) {
    if (std::string(kGenericImages[i].target) == target) {
      return &kGenericImages[i];
    }
  }
  return nullptr;
}

}  // namespace

const GenericImage* GenericImageFor(int compute_capability) {
  const int major = compute_capability / 10;
  if (major < 8) return nullptr;
  if (major == 8) return FindImage("sm_80");
  if (major == 9) return FindImage("sm_90");
  return FindImage("compute_80");
}

SpecKey GenericKernelKey(const KeyTarget& target, GenericKernelId id) {
  SpecKey key = target.MakeKey(OpOf(id));
  key.variant = kGenericKeyVariant | static_cast<uint32_t>(id);
  return key;
}

absl::StatusOr<GenericKernelId> GenericKernelIdOf(const SpecKey& key) {
  const uint32_t index = key.variant & ~kGenericKeyVariant;
  if ((key.variant & kGenericKeyVariant) == 0 ||
      index >= static_cast<uint32_t>(kNumGenericKernels) ||
      OpOf(static_cast<GenericKernelId>(index)) != key.op) {
    return absl::InvalidArgumentError(absl::StrCat(
        "variant: not a generic kernel of ",
        std::string(GetOpInfo(key.op).name), ", got ", key.variant));
  }
  TAILOR_RETURN_IF_ERROR(
      tailor::internal::ExpectUnusedSpecFieldsZero(key, {.variant = true}));
  return static_cast<GenericKernelId>(index);
}

absl::StatusOr<KernelSource> GenerateGenericKernel(const SpecKey& key) {
  TAILOR_ASSIGN_OR_RETURN(const GenericKernelId id, GenericKernelIdOf(key));
  return KernelSource{.code = GenericKernelSource(id),
                      .entry = GenericKernelInfoOf(id).entry};
}

void CudaGenericKernels::Prepare(Engine& engine) {
  LoadImage();
  if (image_loaded_.load()) return;
  for (int i = 0; i < kNumGenericKernels; ++i) {
    engine.TryGetKernel(
        GenericKernelKey(engine.target(), static_cast<GenericKernelId>(i)),
        &GenerateGenericKernel);
  }
}

void CudaGenericKernels::LoadImage() {
  absl::call_once(image_once_, [this] {
    if (GenericImageFor(backend_.compute_capability()) == nullptr) return;
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status s = LoadImageOnce(); !s.ok()) {
      tailor::internal::Logger().warn(
          "generic CUDA kernels: the built-in image does not load ({}); "
          "compiling them with NVRTC instead",
          s.message());
      return;
    }
    image_loaded_.store(true);
    tailor::internal::Logger().debug(
        "generic CUDA kernels: built-in {} image loaded in {:.1f} ms",
        GenericImageFor(backend_.compute_capability())->target,
        std::chrono::duration<double, std::milli>(
            std::chrono::steady_clock::now() - start)
            .count());
  });
}

absl::Status CudaGenericKernels::LoadImageOnce() {
  const GenericImage& image = *GenericImageFor(backend_.compute_capability());
  const DeviceContext& context = backend_.device_context();
  TAILOR_RETURN_IF_ERROR(context.MakeCurrent());
  const DriverApi& api = context.api();
  CUmodule raw = nullptr;
  TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
      api.cuModuleLoadData(&raw, image.data),
      absl::StrCat("cuModuleLoadData(generic ", image.target, " image)")));
  auto module =
      std::make_shared<const CudaModule>(backend_.shared_device_context(), raw);
  for (int i = 0; i < kNumGenericKernels; ++i) {
    const char* entry =
        GenericKernelInfoOf(static_cast<GenericKernelId>(i)).entry;
    CUfunction function = nullptr;
    TAILOR_RETURN_IF_ERROR(CudaResultToStatus(
        api.cuModuleGetFunction(&function, raw, entry),
        absl::StrCat("cuModuleGetFunction(\"", entry, "\")")));
    image_kernels_[i] = std::make_shared<CudaKernel>(
        backend_.shared_device_context(), module, function);
  }
  return absl::OkStatus();
}

bool CudaGenericKernels::image_loaded() {
  LoadImage();
  return image_loaded_.load();
}

std::shared_ptr<Kernel> CudaGenericKernels::Get(Engine& engine,
                                                GenericKernelId id) {
  if (image_loaded()) return image_kernels_[static_cast<int>(id)];
  return engine.TryGetKernel(GenericKernelKey(engine.target(), id),
                             &GenerateGenericKernel);
}

absl::StatusOr<SelectedKernel> CudaGenericKernels::Select(
    Engine& engine, const SpecKey& key, KernelGeneratorFn generate,
    GenericKernelId id) {
  if (engine.background_jit()) {
    if (std::shared_ptr<Kernel> ready = engine.TryGetKernel(key, generate)) {
      return SelectedKernel{.kernel = std::move(ready)};
    }
    if (std::shared_ptr<Kernel> generic = Get(engine, id)) {
      return SelectedKernel{.kernel = std::move(generic), .generic = true};
    }
  }
  TAILOR_ASSIGN_OR_RETURN(std::shared_ptr<Kernel> kernel,
                          engine.GetKernel(key, generate));
  return SelectedKernel{.kernel = std::move(kernel)};
}

}  // namespace tailor::cuda
