// backends/cuda/tma/tensor_map_driver_encoder.h — TensorMapSpec -> driver.
//
// The bridge from the pure TMA code (TensorMapSpec, DescriptorPool) to the
// driver's cuTensorMapEncodeTiled. Needs cuda.h (for the types) and a loaded
// DriverApi; the rest of tma/ needs neither. The .cc static_asserts that
// tailor's TensorMap* enums carry the driver's CUtensorMap* values.
//
// Example:
//   TAILOR_ASSIGN_OR_RETURN(const DriverApi* api, LoadDriverApi());
//   DescriptorPool pool(/*sm_arch=*/90, DriverTensorMapEncoder(api));
#ifndef TAILOR_BACKENDS_CUDA_TMA_TENSOR_MAP_DRIVER_ENCODER_H_
#define TAILOR_BACKENDS_CUDA_TMA_TENSOR_MAP_DRIVER_ENCODER_H_

#include <cuda.h>

#include "backends/cuda/driver_api.h"
#include "backends/cuda/tma/descriptor_pool.h"
#include "backends/cuda/tma/tensor_map_spec.h"

namespace tailor::cuda {

// Calls api.cuTensorMapEncodeTiled with the fields of `spec` and copies the
// encoded map into `out`; returns the driver's result unconverted (the
// differential test compares raw results). Does not run CheckTensorMap. The
// arrays handed to the driver hold 8 entries (unused ones zero), so a probe
// with a rank up to 8 never makes the driver read past them; a larger rank
// returns CUDA_ERROR_INVALID_VALUE without calling the driver.
CUresult EncodeTensorMapTiled(const DriverApi& api, const TensorMapSpec& spec,
                              TensorMapBytes* out);

// A DescriptorPool encoder backed by the driver; failures are converted by
// CudaResultToStatus ("cuTensorMapEncodeTiled: CUDA_ERROR_INVALID_VALUE ..."
// with the spec appended). `api` must outlive the encoder.
TensorMapEncoder DriverTensorMapEncoder(const DriverApi* api);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_TMA_TENSOR_MAP_DRIVER_ENCODER_H_
