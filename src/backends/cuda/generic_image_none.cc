// The library was built without the generic CUDA image (generic_image.h):
// the generic kernels are compiled with NVRTC at run time.
#include "backends/cuda/generic_image.h"

namespace tailor::cuda {

const GenericImage kGenericImages[] = {{"", nullptr, 0, false}};
const int kNumGenericImages = 0;
const char kGenericImageCompiler[] = "";

}  // namespace tailor::cuda
