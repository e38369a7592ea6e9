// CPU kernels must keep working however the process's address space is laid
// out around the JIT's memory. Servers map model weights (hundreds of GB),
// and CUDA reserves terabytes of virtual address space, at any time — also
// between two kernel loads. Found by moe_api_fuzz, whose 16 TiB PROT_NONE
// reservation for "virtual" tensors sent the next kernel's data sections
// 16 TiB away from its code: 32-bit PC-relative references in the loaded
// object wrapped around, and the kernel faulted (or would have read the
// wrong memory).
#include <sys/mman.h>

#include <cstdio>
#include <fstream>

#include "reliability/reliability_util.h"

namespace tailor::reliability {
namespace {

// Lays out the address space the way the fuzzer found it: a reservation of
// terabytes (PROT_NONE, never backed) right below every existing mapping,
// every gap above it filled, except for one single page. A loader's next
// one-page section lands in that page; its next section, wherever it asks
// for it, only fits below the reservation, terabytes away. Returns an
// error message, or "".
std::string FragmentAddressSpace() {
  const uintptr_t page = sysconf(_SC_PAGESIZE);
  size_t bytes = size_t{16} << 40;
  void* reserved = MAP_FAILED;
  for (; reserved == MAP_FAILED && bytes >= (size_t{1} << 34); bytes /= 2) {
    reserved = mmap(nullptr, bytes, PROT_NONE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  }
  if (reserved == MAP_FAILED) return "could not reserve address space";
  // Fill every gap above the reservation (below the 47-bit user limit).
  std::ifstream maps("/proc/self/maps");
  std::vector<std::pair<uintptr_t, uintptr_t>> ranges;
  for (std::string line; std::getline(maps, line);) {
    uintptr_t begin = 0, end = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &begin, &end) == 2)
      ranges.emplace_back(begin, end);
  }
  const uintptr_t floor = reinterpret_cast<uintptr_t>(reserved);
  uintptr_t hole = 0;
  for (size_t i = 0; i + 1 < ranges.size(); ++i) {
    const uintptr_t gap_begin = ranges[i].second, gap_end = ranges[i + 1].first;
    if (gap_begin < floor || gap_end <= gap_begin ||
        gap_end > (uintptr_t{1} << 47))
      continue;
    void* filled =
        mmap(reinterpret_cast<void*>(gap_begin), gap_end - gap_begin, PROT_NONE,
             MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE,
             -1, 0);
    if (filled == MAP_FAILED) continue;    // e.g. the stack's guard gap
    if (hole == 0) hole = gap_end - page;  // in the mmap area, not by the stack
  }
  if (hole == 0) return "no gap above the reservation to leave a hole in";
  munmap(reinterpret_cast<void*>(hole), page);
  return "";
}

TEST(JitAddressSpaceTest, KernelsLoadedAroundHugeMappingsRun) {
  ChildOutcome outcome = RunInChild(
      []() -> std::string {
        auto runtime = CpuRuntime({});
        if (!runtime.ok()) return runtime.status().ToString();
        moe::Workspace ws;
        ExpertsProblem f32(DType::kF32, 37, 1), bf16(DType::kBF16, 37, 2);
        // Kernels loaded before any mapping...
        if (std::string e = f32.RunAndCheck(**runtime, ws); !e.empty())
          return "before: " + e;
        // ... then, round by round, a mapping of terabytes below everything
        // (as a CUDA context or a model file makes), little room elsewhere,
        // and new kernels (another tile: other variants) loaded around it.
        for (int32_t tile : {8, 4, 2, 1}) {
          if (std::string e = FragmentAddressSpace(); !e.empty()) return e;
          for (ExpertsProblem* problem : {&f32, &bf16}) {
            std::string e =
                problem->RunAndCheck(**runtime, ws, {.tile_rows = tile});
            if (!e.empty()) return absl::StrCat("tile ", tile, ": ", e);
          }
        }
        if (std::string e = f32.RunAndCheck(**runtime, ws); !e.empty())
          return "first kernels, after: " + e;
        return "";
      },
      std::chrono::seconds(300));
  EXPECT_TRUE(outcome.ok()) << outcome.Describe();
}

}  // namespace
}  // namespace tailor::reliability
