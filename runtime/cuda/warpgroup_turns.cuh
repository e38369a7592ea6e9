// runtime/cuda/warpgroup_turns.cuh — two warpgroups that take turns at one
// stage of their work (the ordered math barriers of a ping-pong kernel:
// one warpgroup's wgmma mainloop runs while the other's epilogue does).
//
// Contract: device-only code for NVRTC. Header-only, no standard headers.
// WarpgroupTurns<kFirstBarrier> uses named barriers kFirstBarrier and
// kFirstBarrier + 1 (none of them 0, __syncthreads'); the kernel keeps them
// for this use only. Warpgroup g (0 or 1, all 128 threads) calls:
//   Wait(g)       blocks until the other warpgroup passed g the turn
//   Pass(1 - g)   gives the other warpgroup its turn (bar.arrive: no wait)
// Rules, so that each barrier instance pairs one Wait with one Pass:
//   - every Wait(g) is matched by exactly one Pass(g), and every Pass by a
//     Wait: a turn passed to a warpgroup that never waits again would leave
//     the barrier half-arrived at exit;
//   - a warpgroup passes the turn to the other at most once before the
//     other waits for it (strict alternation gives this: to pass again, a
//     warpgroup must first wait for the turn the other passes back).
// The first turn is given by a Pass(0) from warpgroup 1 before its own
// first Wait(1).
//
// Example (warpgroup g of a ping-pong kernel, tiles alternating g = 0, 1):
//   if (g == 1 && have_tiles) Turns::Pass(0);
//   for each tile of g:
//     Turns::Wait(g);   issue the mainloop's MMAs
//     if (the other has a tile after this one) Turns::Pass(1 - g);
//     wait for the MMAs; epilogue
#ifndef TAILOR_RUNTIME_CUDA_WARPGROUP_TURNS_CUH_
#define TAILOR_RUNTIME_CUDA_WARPGROUP_TURNS_CUH_

#include "runtime/cuda/arch.cuh"

namespace tailor::cuda {

template <int kFirstBarrier>
struct WarpgroupTurns {
  static_assert(kFirstBarrier >= 1 && kFirstBarrier + 1 <= 15,
                "named barriers 1..15 (0 is __syncthreads')");
  // A turn's barrier counts the waiting warpgroup and the passing one.
  static constexpr int kThreads = 2 * 128;

  static TAILOR_DEVICE void Wait(int group) {
    NamedBarrierSync<kThreads>(kFirstBarrier + group);
  }

  static TAILOR_DEVICE void Pass(int to_group) {
    asm volatile("bar.arrive %0, %1;" ::"r"(kFirstBarrier + to_group),
                 "n"(kThreads)
                 : "memory");
  }
};

}  // namespace tailor::cuda

#endif  // TAILOR_RUNTIME_CUDA_WARPGROUP_TURNS_CUH_
