// The device half of a paged-decode step (ops/attention/decode_launch.h).
#include "ops/attention/decode_launch.h"

#include "tailor/status.h"

namespace tailor::internal {
namespace {

// Enqueues the copy of `host` to `device`; nothing for an empty span.
template <typename T>
absl::Status UploadSpan(DecodeKernels& kernels, Engine& engine,
                        absl::Span<const T> host, void* device, void* stream) {
  if (host.empty()) return absl::OkStatus();
  return kernels.UploadPlan(engine, host.data(), device,
                            host.size() * sizeof(T), stream);
}

}  // namespace

int32_t DecodeLaunchFlagsOf(const DecodePlanConfig& config,
                            const plan::DecodePlan& plan) {
  return config.launch_flags |
         (plan.params().head_group > 1 ? config.head_group_flags : 0) |
         (plan.cluster_merges() ? config.cluster_flags : 0);
}

absl::Status UploadDecodeWork(DecodeKernels& kernels, Engine& engine,
                              const DecodeUpload& upload,
                              const DecodeDeviceBuffers& d, void* stream) {
  TAILOR_RETURN_IF_ERROR(
      UploadSpan(kernels, engine, upload.items, d.at(d.items), stream));
  TAILOR_RETURN_IF_ERROR(UploadSpan(kernels, engine, upload.first_items,
                                    d.at(d.first_items), stream));
  char* begin = static_cast<char*>(d.at(d.worker_begin));
  TAILOR_RETURN_IF_ERROR(
      UploadSpan(kernels, engine, upload.worker_begin, begin, stream));
  return UploadSpan(
      kernels, engine, absl::MakeConstSpan(upload.launch_flags, 1),
      begin + upload.worker_begin.size() * sizeof(int32_t), stream);
}

DecodeWorkRef DeviceDecodeWork(const DecodeDeviceBuffers& d,
                               const plan::DecodePlanParams& params) {
  DecodeWorkRef work;
  work.items = static_cast<const plan::DecodeWorkItem*>(d.at(d.items));
  work.worker_begin = static_cast<const int32_t*>(d.at(d.worker_begin));
  work.first_items =
      static_cast<const plan::DecodeWorkItem*>(d.at(d.first_items));
  work.partial_out = static_cast<float*>(d.at(d.partial_out));
  work.partial_lse = static_cast<float*>(d.at(d.partial_lse));
  work.scratch = d.at(d.scratch);
  work.max_partials = d.capacity.partials;
  work.num_workers = params.num_workers;
  work.cluster_workers = params.cluster_workers;
  return work;
}

}  // namespace tailor::internal
