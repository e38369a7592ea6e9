// Registers the test kernel templates (tests/kernels/templates/, embedded by
// tests/kernels/CMakeLists.txt under the paths "templates/cpu/..." and
// "templates/cuda/...") with the library's table at static initialization,
// before any test creates a Runtime.
#include "core/embedded_files.h"

namespace tailor::internal {

extern const EmbeddedFile kTestEmbeddedFiles[];
extern const int kNumTestEmbeddedFiles;

namespace {

const bool kRegistered = [] {
  RegisterEmbeddedFiles(
      {kTestEmbeddedFiles, static_cast<size_t>(kNumTestEmbeddedFiles)});
  return true;
}();

}  // namespace
}  // namespace tailor::internal
