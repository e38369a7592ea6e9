// bench/fp8/nvrtc_cubin.cc — compiles one CUDA source to a cubin with NVRTC
// and the runtime's flags (-std=c++20 -default-device, the templates'
// convention), so the GPU harness's kernels are built here, ahead of time,
// from the same templates the library JIT-compiles.
//
//   nvrtc_cubin SOURCE OUTPUT ARCH [NVRTC options...]
//   e.g. nvrtc_cubin bench/fp8/moe_fp8_kernels.cu out.cubin sm_90a -I. -Xptxas=-v
#include <nvrtc.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  if (argc < 4) {
    std::fprintf(stderr, "usage: %s SOURCE OUTPUT ARCH [options...]\n", argv[0]);
    return 2;
  }
  std::ifstream in(argv[1]);
  std::stringstream source;
  source << in.rdbuf();
  const std::string code = source.str();
  std::vector<std::string> flags = {"-std=c++20", "-default-device",
                                    std::string("-arch=") + argv[3]};
  for (int i = 4; i < argc; ++i) flags.push_back(argv[i]);
  std::vector<const char*> options;
  for (const std::string& f : flags) options.push_back(f.c_str());
  nvrtcProgram program;
  if (nvrtcCreateProgram(&program, code.c_str(), argv[1], 0, nullptr,
                         nullptr) != NVRTC_SUCCESS) {
    return 1;
  }
  const nvrtcResult compiled = nvrtcCompileProgram(
      program, static_cast<int>(options.size()), options.data());
  size_t log_size = 0;
  nvrtcGetProgramLogSize(program, &log_size);
  std::string log(log_size, '\0');
  nvrtcGetProgramLog(program, log.data());
  if (log_size > 1) std::fprintf(stderr, "%s\n", log.c_str());
  if (compiled != NVRTC_SUCCESS) return 1;
  size_t size = 0;
  nvrtcGetCUBINSize(program, &size);
  std::string cubin(size, '\0');
  nvrtcGetCUBIN(program, cubin.data());
  std::ofstream(argv[2], std::ios::binary).write(cubin.data(), size);
  nvrtcDestroyProgram(&program);
  return 0;
}
