// backends/cuda/generic_image.h — the generic CUDA kernels compiled when
// libtailor was built (generic_image_builder.cc, run by the build when the
// CUDA toolkit and NVRTC are found at configure time; see
// cmake/CudaGenericImage.cmake).
//
// Images: an sm_80 cubin, an sm_90 cubin and compute_80 PTX, each holding
// every kernel of generic_kernel_table.h. A library built without them
// (no toolkit, or -DTAILOR_CUDA_GENERIC_IMAGE=OFF) has kNumGenericImages 0
// and compiles the generic kernels with NVRTC at run time instead.
#ifndef TAILOR_BACKENDS_CUDA_GENERIC_IMAGE_H_
#define TAILOR_BACKENDS_CUDA_GENERIC_IMAGE_H_

namespace tailor::cuda {

struct GenericImage {
  const char* target;  // "sm_80", "sm_90" or "compute_80"
  const char* data;    // for cuModuleLoadData
  unsigned long size;  // bytes (PTX: with its NUL)
  bool ptx;
};

// Defined by the generated generic_image_data.cc, or generic_image_none.cc.
extern const GenericImage kGenericImages[];
extern const int kNumGenericImages;
// The NVRTC identity that built them ("" when there are none).
extern const char kGenericImageCompiler[];

// The image a device of compute capability `cc` (86 for 8.6) loads: the
// cubin of its major version (cubins run on later minors of it), else the
// PTX (major 10 and later; the driver compiles it once and caches it);
// null for majors below 8 or when the library has no images.
const GenericImage* GenericImageFor(int compute_capability);

}  // namespace tailor::cuda

#endif  // TAILOR_BACKENDS_CUDA_GENERIC_IMAGE_H_
