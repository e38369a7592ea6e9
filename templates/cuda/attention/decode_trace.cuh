// templates/cuda/attention/decode_trace.cuh — a per-CTA timeline of the TMA decode
// kernel, for finding where a launch's microseconds go. Off unless the
// kernel is compiled with -DTAILOR_DECODE_TRACE (TAILOR_NVRTC_FLAGS, a
// developer knob that also keeps such kernels out of the normal cache
// entries); then TAILOR_DECODE_MARK(m) records clock64 at mark m, and at
// its end every CTA prints one line
//   TRACE cta sm items globaltimer_start d1 .. d10 globaltimer_end
// with d_m the clock64 cycles from the CTA's start to mark m (-1: never
// reached). bench/decode_trace.py summarizes the lines of a launch, e.g.
//   TAILOR_NVRTC_FLAGS=-DTAILOR_DECODE_TRACE cuda_decode_bench --reps=3 \
//     --model=llama3-8b "--case=B=1 L=4096" > t.txt
//   python3 bench/decode_trace.py t.txt
// Without the macro the marks compile to nothing. Trust it for short
// launches only: the printf machinery slows long ones down.
#ifndef TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_TRACE_CUH_
#define TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_TRACE_CUH_

#ifdef TAILOR_DECODE_TRACE
#include "runtime/cuda/arch.cuh"

extern "C" int vprintf(const char*, const char*);

namespace tailor::cuda {

// Marks, in the order a CTA normally reaches them.
enum DecodeTraceMark {
  kTraceStart = 0,      // kernel entry (thread 0)
  kTraceTable = 1,      // producer: first block-table window in registers
  kTraceFirstTma = 2,   // producer: first tile's copies issued
  kTraceFirstFull = 3,  // consumers: first tile landed
  kTraceLastFull = 4,   // consumers: last tile landed
  kTraceFinish = 5,     // consumers: last item's tiles computed
  kTraceCombined = 6,   // the last item's warps combined
  kTraceArrived = 7,    // a piece: partial written, merge counter bumped
                        // (in a cluster: a sender's stores issued, the
                        // receiver's wait for every slot over)
  kTraceMerged = 8,     // the merging piece: pair merged
  kTraceEnd = 9,        // consumers done
  kTraceDump = 10,      // the line is printed
  kTraceMarks = 11,
};

TAILOR_DEVICE unsigned long long* DecodeTraceSlots() {
  __shared__ unsigned long long slots[kTraceMarks];
  return slots;
}

TAILOR_DEVICE unsigned long long DecodeTraceClock() {
  unsigned long long c;
  asm volatile("mov.u64 %0, %%clock64;" : "=l"(c));
  return c;
}

TAILOR_DEVICE void DecodeMark(int mark) {
  DecodeTraceSlots()[mark] = DecodeTraceClock();
}

// Thread 0, first thing in the kernel. Returns the start's globaltimer.
TAILOR_DEVICE unsigned long long DecodeTraceStart() {
  unsigned long long* slots = DecodeTraceSlots();
  for (int m = 0; m < kTraceMarks; ++m) slots[m] = 0;
  slots[kTraceStart] = DecodeTraceClock();
  return GlobalTimerNs();
}

// Thread 0, after a CTA barrier at the end of the kernel.
TAILOR_DEVICE void DecodeTraceDump(unsigned long long start_ns, int items) {
  unsigned long long* slots = DecodeTraceSlots();
  slots[kTraceDump] = DecodeTraceClock();
  unsigned sm;
  asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
  struct {  // vprintf's argument buffer: each field at its own alignment
    int cta, sm, items, pad;
    unsigned long long start_ns;
    long long cycles[kTraceMarks - 1];
    unsigned long long end_ns;
  } line;
  line.cta = blockIdx.x;
  line.sm = static_cast<int>(sm);
  line.items = items;
  line.pad = 0;
  line.start_ns = start_ns;
  for (int m = 1; m < kTraceMarks; ++m) {
    line.cycles[m - 1] =
        slots[m] != 0 ? static_cast<long long>(slots[m] - slots[0]) : -1;
  }
  line.end_ns = GlobalTimerNs();
  vprintf(
      "TRACE %d %d %d %llu %lld %lld %lld %lld %lld %lld %lld %lld %lld "
      "%lld %llu\n",
      reinterpret_cast<const char*>(&line));
}

}  // namespace tailor::cuda

#define TAILOR_DECODE_MARK(mark) ::tailor::cuda::DecodeMark(mark)
#else
#define TAILOR_DECODE_MARK(mark) ((void)0)
#endif  // TAILOR_DECODE_TRACE

#endif  // TAILOR_TEMPLATES_CUDA_ATTENTION_DECODE_TRACE_CUH_
