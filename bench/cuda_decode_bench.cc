// bench/cuda_decode_bench — paged-KV decode attention on the GPU over the
// anchor grid (the shapes of the baseline scripts, which are not part of
// this repository), as a fraction of the memory
// floor measured in the same run. The anchors' own table
// (paged_decode_anchors.py: vLLM's Triton kernel, gather + SDPA, contiguous
// SDPA) joins this one on (model, case): same models, cases and names, same
// floor definition (KV bytes / max(copy, read) bandwidth), same timing
// method (L2 flushed before every rep, events around each rep).
//
// Columns per case:
//   sum_L       total tokens (ragged cases draw lengths from mt19937(7); the
//               anchors draw theirs from torch, so compare fractions of floor)
//   floor       2 * sum_L * Hkv * D * 2 bytes / bandwidth
//   tailor      RunDecode, the path it picks (TMA on sm_90a), mean us
//   graph       the same RunDecode captured in a CUDA graph, replayed
//   cp.async    RunDecode forced onto the cp.async kernel
//   clean-L2    RunDecode after a flush that leaves L2 clean (L2Flush): the
//               other columns, like the anchors' do_bench, start with L2
//               full of dirty lines whose write-back the timed run pays for
//   read, bulk, bulk-ef  the same number of KV bytes streamed from one
//               contiguous buffer by a read-only kernel (ReadKernel: loads,
//               TMA bulk copies, the same with an L2 evict-first policy),
//               same dirty flush: what the protocol leaves a kernel that
//               only reads; /tlr = the fastest read / tailor
//   empty       a launch of the loads kernel that reads nothing, same flush
//   plan        host us of PlanDecode (plan + async copy of the work list)
//   items/split the plan: work items, split (sequence, KV head) pairs
// The last block repeats Llama with pages of 64 tokens (one TMA box per
// 64-token tile instead of four): the most that merging physically
// contiguous pages into larger loads could buy. Then, per model, the decode
// kernel variants it compiled (SpecKeys of op attention.decode), and JSON lines
// in $OUT/cuda_decode_bench.json (keys as in the anchors' JSON: model, case, B,
// sum_L, floor_ms, tailor_ms, ...). Data: caches filled with one bf16 value, so
// every output must equal it (checked: a cheap guard against a broken kernel in
// the timed runs).
//
// Needs an NVIDIA GPU; prints "skipped" and exits 0 without one.
// Usage: cuda_decode_bench [--reps=N] (default 50) [--model=NAME]
//                          [--case=NAME] (one model / case, e.g. for ncu:
//                          --model=llama3-8b "--case=B=1 L=4096")
//                          [--pages=ordered] (each sequence's pages
//                          consecutive, as a fresh allocator leaves them)
//                          [--layout=hnd] (caches [pages, Hkv, page, D])
//                          [--read-sweep] (only the TMA read's rate by bytes
//                          in flight an SM: ReadSweep)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "api/internals.h"
#include "backends/cuda/attention/decode_kernels.h"
#include "backends/cuda/cuda_test_util.h"
#include "kernels/test_op_kinds.h"
#include "tailor/ops/attention.h"
#include "tailor/status.h"

namespace tailor::attention {
namespace {

using cuda::CudaDecodeKernels;
using cuda::DriverApi;
using cuda::testing::CudaTestRuntime;
using cuda::testing::DeviceBuffer;
using cuda::testing::TestStream;

constexpr int64_t kHeadDim = 128;
constexpr uint8_t kFillByte = 0x3c;  // bf16 0x3c3c ~ 0.0115 everywhere
constexpr uint16_t kFillValue = 0x3c3c;

void Die(const absl::Status& status, const char* what) {
  std::fprintf(stderr, "cuda_decode_bench: %s: %s\n", what,
               std::string(status.message()).c_str());
  std::exit(1);
}
void Check(CUresult result, const char* what) {
  if (result != CUDA_SUCCESS) Die(cuda::CudaResultToStatus(result, what), what);
}

struct Model {
  const char* name;
  int64_t qo_heads, kv_heads;
  int64_t page = 16;
};

struct Case {
  std::string name;
  std::vector<int32_t> lens;
};

struct BenchOptions {
  int reps = 50;
  bool ordered_pages = false;    // --pages=ordered
  bool hnd = false;              // --layout=hnd: caches [pages, Hkv, page, D]
  bool read_sweep = false;       // --read-sweep: the ReadSweep table only
  std::string model, case_name;  // --model= / --case=; empty: all
};

std::vector<Case> Grid() {
  std::vector<Case> cases;
  for (auto [b, l] : std::vector<std::pair<int, int>>{{1, 4096},
                                                      {1, 32768},
                                                      {8, 32768},
                                                      {32, 1024},
                                                      {32, 8192},
                                                      {128, 1024},
                                                      {128, 4096},
                                                      {256, 2048}}) {
    cases.push_back(
        {absl::StrCat("B=", b, " L=", l), std::vector<int32_t>(b, l)});
  }
  std::mt19937 rng(7);
  std::vector<int32_t> ragged(64);
  for (int32_t& n : ragged) n = 1 + static_cast<int32_t>(rng() % 8192);
  cases.push_back({"B=64 ragged 1..8192", ragged});
  std::vector<int32_t> long_short(128);
  long_short[0] = 16384;
  for (size_t i = 1; i < long_short.size(); ++i) {
    long_short[i] = 1 + static_cast<int32_t>(rng() % 256);
  }
  cases.push_back({"B=128 one long 16k + short", long_short});
  return cases;
}

// Streaming-read kernels over device memory (no writes but one word when a
// checksum is impossible): the read-bandwidth probe, the clean L2 flush, and
// the bench's `read` columns.
//   kLoads  eight independent 16-byte loads in flight per thread, 8 CTAs of
//           256 threads an SM (256 KB in flight an SM)
//   kBulk   one thread a CTA keeps `stages` cp.async.bulk copies of `chunk`
//           bytes into shared memory in flight, `ctas_per_sm` CTAs an SM
//           (default 6 x 32 KB, one CTA: 192 KB an SM): the way the TMA
//           decode kernel reads, minus pages, tables and math
struct BulkRead {
  int ctas_per_sm = 1, stages = 6, chunk = 32768;
  bool evict_first = false;  // an L2 evict-first policy on the copies
  bool shuffled = false;     // chunks in a scattered order (ReadSweep only)
};

class ReadKernel {
 public:
  enum class Kind { kLoads, kBulk };
  explicit ReadKernel(CudaTestRuntime& env) : env_(env) {
    loads_ = Build(R"(
struct ReadParams { const uint4* data; long long bytes; unsigned* sink; };
extern "C" __global__ void __launch_bounds__(256)
bench_read(const __grid_constant__ ReadParams p) {
  constexpr int kLoads = 8;
  const long long n = p.bytes / 16, stride = 256ll * gridDim.x;
  unsigned x = 0;
  for (long long base = blockIdx.x * 256ll + threadIdx.x; base < n;
       base += kLoads * stride) {
    uint4 v[kLoads];
#pragma unroll
    for (int k = 0; k < kLoads; ++k) {
      const long long i = base + k * stride;
      v[k] = i < n ? __ldcs(p.data + i) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < kLoads; ++k) x ^= v[k].x ^ v[k].y ^ v[k].z ^ v[k].w;
  }
  if (x == 0x9e3779b9u) *p.sink = x;
}
)",
                   "bench_read");
    bulk_ = Build(R"(
struct ReadParams {
  const char* data; long long bytes; unsigned* sink; int stages, chunk;
  int evict_first;
  int shuffled;  // chunks in a scattered order (their count a power of two)
};
constexpr int kMaxStages = 32;
__device__ unsigned Addr(const void* p) {
  return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
extern "C" __global__ void __launch_bounds__(32)
bench_bulk_read(const __grid_constant__ ReadParams p) {
  extern __shared__ __align__(128) char ring[];
  __shared__ __align__(8) unsigned long long full[kMaxStages];
  if (threadIdx.x != 0) return;
  const int kStages = p.stages, kChunk = p.chunk;
  const long long chunks = (p.bytes + kChunk - 1) / kChunk;
  for (int s = 0; s < kStages; ++s) {
    asm volatile("mbarrier.init.shared.b64 [%0], 1;" ::"r"(Addr(&full[s])));
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  unsigned long long policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;"
               : "=l"(policy));
  auto issue = [&](long long c, int s) {
    // An odd multiplier permutes a power-of-two count: pages at random
    // places, as a paged cache holds them.
    if (p.shuffled) c = (c * 0x9E3779B1ll) & (chunks - 1);
    const unsigned n = static_cast<unsigned>(
        p.bytes - c * kChunk < kChunk ? p.bytes - c * kChunk : kChunk);
    asm volatile(
        "mbarrier.arrive.expect_tx.shared.b64 _, [%0], %1;"
        ::"r"(Addr(&full[s])), "r"(n) : "memory");
    if (p.evict_first) {
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
          ".L2::cache_hint [%0], [%1], %2, [%3], %4;"
          ::"r"(Addr(ring + s * kChunk)), "l"(p.data + c * kChunk), "r"(n),
          "r"(Addr(&full[s])), "l"(policy) : "memory");
    } else {
      asm volatile(
          "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes"
          " [%0], [%1], %2, [%3];"
          ::"r"(Addr(ring + s * kChunk)), "l"(p.data + c * kChunk), "r"(n),
          "r"(Addr(&full[s])) : "memory");
    }
  };
  for (int s = 0; s < kStages; ++s) {
    const long long c = blockIdx.x + s * (long long)gridDim.x;
    if (c < chunks) issue(c, s);
  }
  for (long long k = 0;; ++k) {
    const long long c = blockIdx.x + k * gridDim.x;
    if (c >= chunks) break;
    const int s = static_cast<int>(k % kStages);
    const unsigned parity = static_cast<unsigned>((k / kStages) & 1);
    asm volatile(
        "{ .reg .pred done;\n"
        "wait: mbarrier.try_wait.parity.shared.b64 done, [%0], %1;\n"
        "@!done bra wait; }"
        ::"r"(Addr(&full[s])), "r"(parity) : "memory");
    const long long next = c + kStages * (long long)gridDim.x;
    if (next < chunks) issue(next, s);
  }
  if (ring[0] == 0x7f && ring[1] == 0x11) *p.sink = 1;
}
)",
                  "bench_bulk_read");
    Check(env.api().cuDeviceGetAttribute(
              &sms_, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT,
              env.backend().device_context().device()),
          "cuDeviceGetAttribute");
  }
  void Launch(const DeviceBuffer& data, CUstream stream) const {
    Launch(data, data.bytes(), stream);
  }
  // Reads the first `bytes` of `data` (a multiple of 16; 0: an empty launch
  // of the same grid).
  void Launch(const DeviceBuffer& data, size_t bytes, CUstream stream,
              Kind kind = Kind::kLoads, BulkRead bulk = {}) const {
    struct ReadParams {
      const void* data;
      long long bytes;
      void* sink;
      int stages, chunk, evict_first, shuffled;
    } params = {data.data(),           static_cast<long long>(bytes),
                sink_.data(),          bulk.stages,
                bulk.chunk,            bulk.evict_first ? 1 : 0,
                bulk.shuffled ? 1 : 0};
    internal::LaunchConfig config;
    config.stream = stream;
    if (kind == Kind::kLoads) {
      config.grid.x = static_cast<uint32_t>(sms_ * 8);
      config.block.x = 256;
    } else {
      config.grid.x = static_cast<uint32_t>(sms_ * bulk.ctas_per_sm);
      config.block.x = 32;
      config.shared_bytes = bulk.stages * bulk.chunk;
    }
    if (absl::Status s = env_.backend().Launch(
            kind == Kind::kLoads ? *loads_ : *bulk_, config, &params,
            sizeof(params));
        !s.ok()) {
      Die(s, "read kernel");
    }
  }

 private:
  std::shared_ptr<internal::Kernel> Build(const char* code,
                                          const char* entry) {
    internal::SpecKey key = env_.engine().MakeKey(internal::kTestEmptyOp);
    const internal::KernelSource source = {.code = code, .entry = entry};
    absl::StatusOr<std::string> cubin = env_.backend().Compile(key, source);
    if (!cubin.ok()) Die(cubin.status(), "compile read kernel");
    absl::StatusOr<std::shared_ptr<internal::Kernel>> kernel =
        env_.backend().Load(key, source, *cubin);
    if (!kernel.ok()) Die(kernel.status(), "load read kernel");
    return *std::move(kernel);
  }

  CudaTestRuntime& env_;
  std::shared_ptr<internal::Kernel> loads_, bulk_;
  int sms_ = 0;
  DeviceBuffer sink_{env_.api(), 8};
};

// How each rep starts. kDirty: a 256 MiB fill, as triton.testing.do_bench
// does (the anchors' protocol): L2 is then full of dirty lines, so the timed
// run also pays for writing back as many bytes as it brings into L2 (up to
// the L2's size, 50 MiB on an H100). kClean: the same fill, then a 256 MiB
// streaming read: the data still comes from DRAM, but L2 holds clean lines
// and the timed run pays for its own traffic only.
enum class L2Flush { kDirty, kClean };

// Events around `reps` runs of `run`, each after an L2 flush. Returns mean
// and median us.
struct Timing {
  double mean_us = 0, median_us = 0;
};

class Timer {
 public:
  // `reader` is needed for L2Flush::kClean only.
  Timer(const DriverApi& api, CUstream stream, int reps,
        const ReadKernel* reader = nullptr)
      : api_(api),
        stream_(stream),
        reps_(reps),
        reader_(reader),
        flush_(api, 256 << 20),
        clean_(api, reader != nullptr ? 256 << 20 : 16) {
    events_.resize(2 * reps);
    for (CUevent& e : events_)
      Check(api_.cuEventCreate(&e, 0), "cuEventCreate");
  }
  ~Timer() {
    for (CUevent e : events_) api_.cuEventDestroy(e);
  }
  template <typename Run>
  Timing Time(Run run, L2Flush flush = L2Flush::kDirty) {
    if (flush == L2Flush::kClean && reader_ == nullptr) {
      Die(absl::InternalError("a clean flush needs a ReadKernel"), "Timer");
    }
    for (int i = 0; i < 3; ++i) run();  // warm-up
    for (int r = 0; r < reps_; ++r) {
      Check(
          api_.cuMemsetD8Async(flush_.ptr(), r & 0xff, flush_.bytes(), stream_),
          "flush L2");
      if (flush == L2Flush::kClean) reader_->Launch(clean_, stream_);
      Check(api_.cuEventRecord(events_[2 * r], stream_), "cuEventRecord");
      run();
      Check(api_.cuEventRecord(events_[2 * r + 1], stream_), "cuEventRecord");
    }
    Check(api_.cuStreamSynchronize(stream_), "cuStreamSynchronize");
    std::vector<double> us(reps_);
    for (int r = 0; r < reps_; ++r) {
      float ms = 0;
      Check(api_.cuEventElapsedTime(&ms, events_[2 * r], events_[2 * r + 1]),
            "cuEventElapsedTime");
      us[r] = ms * 1e3;
    }
    Timing t;
    t.mean_us = std::accumulate(us.begin(), us.end(), 0.0) / reps_;
    std::nth_element(us.begin(), us.begin() + reps_ / 2, us.end());
    t.median_us = us[reps_ / 2];
    return t;
  }

 private:
  const DriverApi& api_;
  CUstream stream_;
  int reps_;
  const ReadKernel* reader_;
  DeviceBuffer flush_, clean_;
  std::vector<CUevent> events_;
};

// Copy bandwidth (read + write bytes / time) and read bandwidth (the fastest
// of ReadKernel's reads), bytes per second; the floor uses the larger.
double MeasureBandwidth(CudaTestRuntime& env, Timer& timer, CUstream stream,
                        double* copy_out, double* read_out) {
  const DriverApi& api = env.api();
  constexpr size_t kBytes = size_t{1} << 30;
  DeviceBuffer a(api, kBytes), b(api, kBytes);
  if (!a.ok() || !b.ok()) Die(absl::ResourceExhaustedError("2 GiB"), "alloc");
  Check(api.cuMemsetD8(a.ptr(), 1, kBytes), "fill");
  const Timing copy = timer.Time([&] {
    Check(api.cuMemcpyDtoDAsync(b.ptr(), a.ptr(), kBytes, stream),
          "cuMemcpyDtoDAsync");
  });
  *copy_out = 2.0 * kBytes / (copy.mean_us * 1e-6);
  const ReadKernel reader(env);
  const Timing loads = timer.Time([&] { reader.Launch(a, stream); });
  const Timing bulk = timer.Time([&] {
    reader.Launch(a, kBytes, stream, ReadKernel::Kind::kBulk);
  });
  const Timing bulk_evict_first = timer.Time([&] {
    reader.Launch(a, kBytes, stream, ReadKernel::Kind::kBulk,
                  {.evict_first = true});
  });
  *read_out =
      kBytes /
      (std::min({loads.mean_us, bulk.mean_us, bulk_evict_first.mean_us}) *
       1e-6);
  return std::max(*copy_out, *read_out);
}

// --read-sweep: how the TMA read's rate depends on the bytes each SM keeps
// in flight and on the copy size (the decode kernel keeps 2 CTAs x 2 stages
// x 32 KB = 128 KB an SM in flight at most, less while consumers hold a
// stage), at 1 GiB and at 256 MiB (the size of Qwen3 B=128 L=1024's KV).
void ReadSweep(CudaTestRuntime& env, int reps) {
  constexpr size_t kBytes = size_t{1} << 30;
  const DeviceBuffer data(env.api(), kBytes);
  if (!data.ok()) Die(absl::ResourceExhaustedError("1 GiB"), "alloc");
  TestStream stream(env.api());
  Timer timer(env.api(), stream.get(), reps);
  const ReadKernel reader(env);
  std::printf("%-10s %7s %7s %9s %-9s | %9s %7s | %9s %7s\n", "ctas/SM",
              "stages", "chunk", "KB/SM", "order", "1GiB us", "TB/s",
              "256MiB us", "TB/s");
  for (const BulkRead b : std::initializer_list<BulkRead>{
           {1, 2, 32768}, {1, 3, 32768}, {1, 4, 32768}, {1, 5, 32768},
           {1, 6, 32768}, {2, 2, 32768}, {2, 3, 32768}, {1, 16, 4096},
           {1, 32, 4096}, {2, 8, 4096}, {1, 8, 16384}, {2, 4, 16384},
           // Scattered: a page of one KV head (4 KB, Qwen3 / Llama at page
           // 16, HND) against a page of all of them (16 / 32 KB, NHD).
           {2, 8, 4096, false, true}, {2, 16, 4096, false, true},
           {2, 4, 16384, false, true}, {2, 2, 32768, false, true}}) {
    auto time = [&](size_t bytes) {
      return timer
          .Time([&] {
            reader.Launch(data, bytes, stream.get(), ReadKernel::Kind::kBulk,
                          b);
          })
          .mean_us;
    };
    const double big = time(kBytes), small = time(kBytes / 4);
    std::printf("%-10d %7d %7d %9d %-9s | %9.1f %7.2f | %9.1f %7.2f\n",
                b.ctas_per_sm, b.stages, b.chunk,
                b.ctas_per_sm * b.stages * b.chunk / 1024,
                b.shuffled ? "scattered" : "in order", big,
                kBytes / big / 1e6, small, kBytes / 4 / small / 1e6);
  }
}

// One case's device buffers (bf16 caches, NHD or HND, one page list per
// sequence).
struct CaseData {
  CaseData(const DriverApi& api, const Model& m, const Case& c, int64_t rows,
           bool ordered_pages, bool hnd)
      : hnd(hnd), pages(0) {
    std::vector<int64_t> per_seq(c.lens.size());
    for (size_t b = 0; b < c.lens.size(); ++b) {
      per_seq[b] = (c.lens[b] + m.page - 1) / m.page;
      pages += per_seq[b];
      max_pages = std::max(max_pages, per_seq[b]);
    }
    pages += 8;
    const int64_t page_elems = m.page * m.kv_heads * kHeadDim;
    k = std::make_unique<DeviceBuffer>(api, pages * page_elems * 2);
    v = std::make_unique<DeviceBuffer>(api, pages * page_elems * 2);
    q = std::make_unique<DeviceBuffer>(api, rows * m.qo_heads * kHeadDim * 2);
    out = std::make_unique<DeviceBuffer>(api, rows * m.qo_heads * kHeadDim * 2);
    table_dev = std::make_unique<DeviceBuffer>(api, rows * max_pages * 4);
    lens_dev = std::make_unique<DeviceBuffer>(api, rows * 4);
    if (!k->ok() || !v->ok()) Die(absl::ResourceExhaustedError("kv"), "alloc");
    Check(api.cuMemsetD8(k->ptr(), kFillByte, k->bytes()), "fill k");
    Check(api.cuMemsetD8(v->ptr(), kFillByte, v->bytes()), "fill v");
    Check(api.cuMemsetD8(q->ptr(), kFillByte, q->bytes()), "fill q");
    // Pages at random places (as a long-running allocator leaves them), or
    // in order (a fresh one).
    std::vector<int32_t> order(pages);
    std::iota(order.begin(), order.end(), 0);
    if (!ordered_pages) {
      std::shuffle(order.begin(), order.end(), std::mt19937(11));
    }
    table.assign(rows * max_pages, 0);
    int64_t next = 0;
    for (size_t b = 0; b < c.lens.size(); ++b) {
      for (int64_t j = 0; j < per_seq[b]; ++j) {
        table[b * max_pages + j] = order[next++];
      }
    }
    lens = c.lens;
    lens.resize(rows, 0);
    if (absl::Status s = table_dev->Upload(table); !s.ok()) Die(s, "upload");
    if (absl::Status s = lens_dev->Upload(lens); !s.ok()) Die(s, "upload");
  }
  RunDecodeArgs Args(const Model& m, int64_t rows, Device device,
                     CUstream stream) const {
    RunDecodeArgs args;
    args.q = TensorRef::Contiguous(q->data(), DType::kBF16,
                                   {rows, m.qo_heads, kHeadDim}, device);
    args.k_cache = Cache(*k, m, device);
    args.v_cache = Cache(*v, m, device);
    args.block_table = TensorRef::Contiguous(table_dev->data(), DType::kI32,
                                             {rows, max_pages}, device);
    args.seq_lens =
        TensorRef::Contiguous(lens_dev->data(), DType::kI32, {rows}, device);
    args.out = TensorRef::Contiguous(out->data(), DType::kBF16,
                                     {rows, m.qo_heads, kHeadDim}, device);
    args.stream = stream;
    return args;
  }
  // A [pages, page, Hkv, D] view: contiguous (NHD) or HND's strides.
  TensorRef Cache(const DeviceBuffer& cache, const Model& m,
                  Device device) const {
    TensorRef t = TensorRef::Contiguous(
        cache.data(), DType::kBF16, {pages, m.page, m.kv_heads, kHeadDim},
        device);
    if (hnd) {
      t.strides[1] = kHeadDim;
      t.strides[2] = m.page * kHeadDim;
    }
    return t;
  }
  bool hnd = false;
  int64_t pages = 0, max_pages = 1;
  std::vector<int32_t> table, lens;
  std::unique_ptr<DeviceBuffer> k, v, q, out, table_dev, lens_dev;
};

// Every output element of the batch's rows equals the fill value.
bool OutputsAreTheFill(const CaseData& d, const Model& m, int64_t batch) {
  absl::StatusOr<std::vector<uint8_t>> bytes = d.out->Download();
  if (!bytes.ok()) return false;
  const uint16_t* out = reinterpret_cast<const uint16_t*>(bytes->data());
  for (int64_t i = 0; i < batch * m.qo_heads * kHeadDim; ++i) {
    const int64_t b = i / (m.qo_heads * kHeadDim);
    const uint16_t want = d.lens[b] == 0 ? 0 : kFillValue;
    if (out[i] != want) return false;
  }
  return true;
}

struct Row {
  std::string model, name;
  int64_t batch = 0, sum_len = 0;
  double floor_us = 0;
  Timing tailor, graph, cp_async;
  Timing tailor_clean;  // RunDecode after a clean flush (L2Flush::kClean)
  // The case's KV bytes read from one contiguous buffer (ReadKernel's two
  // kinds), and an empty launch of the loads kernel's grid.
  Timing read, bulk_read, bulk_read_evict_first, empty;
  double best_read_us() const {
    return std::min(
        {read.mean_us, bulk_read.mean_us, bulk_read_evict_first.mean_us});
  }
  std::string path;
  double plan_us = 0;
  DecodePlanSummary plan;
  bool ok = true;
};

DecodeLimits LimitsOf(const Model& m, int64_t max_batch = 256) {
  return {.max_batch = max_batch,
          .num_qo_heads = m.qo_heads,
          .num_kv_heads = m.kv_heads,
          .head_dim = kHeadDim,
          .page_size = m.page,
          .dtype = DType::kBF16};
}

// ReserveDecodeWorkspace, or BindDecodeWorkspace on bench memory while the
// CUDA backend has no AllocateDevice.
std::unique_ptr<DeviceBuffer> Reserve(CudaTestRuntime& env, const Model& m,
                                      DecodeWorkspace& ws, CUstream stream,
                                      int64_t max_batch = 256) {
  absl::Status reserved =
      ReserveDecodeWorkspace(env.runtime(), LimitsOf(m, max_batch), ws);
  if (reserved.ok()) return nullptr;
  if (reserved.code() != absl::StatusCode::kUnimplemented) {
    Die(reserved, "ReserveDecodeWorkspace");
  }
  absl::StatusOr<int64_t> bytes =
      DecodeWorkspaceBytes(env.runtime(), LimitsOf(m, max_batch));
  if (!bytes.ok()) Die(bytes.status(), "DecodeWorkspaceBytes");
  auto memory = std::make_unique<DeviceBuffer>(env.api(), *bytes);
  if (absl::Status s = BindDecodeWorkspace(env.runtime(),
                                           LimitsOf(m, max_batch),
                                           memory->data(), *bytes, ws, stream);
      !s.ok()) {
    Die(s, "BindDecodeWorkspace");
  }
  return memory;
}

PlanDecodeArgs PlanArgs(const Model& m, const CaseData& d, int64_t batch,
                        CUstream stream) {
  return {
      .seq_lens = TensorRef::Contiguous(d.lens.data(), DType::kI32, {batch}),
      .page_size = m.page,
      .num_qo_heads = m.qo_heads,
      .num_kv_heads = m.kv_heads,
      .head_dim = kHeadDim,
      .dtype = DType::kBF16,
      .stream = stream};
}

// Host us per PlanDecode call (median of 21, the stream drained between).
double TimePlan(Runtime& runtime, const PlanDecodeArgs& args,
                DecodeWorkspace& ws, const TestStream& stream) {
  std::vector<double> us;
  for (int i = 0; i < 21; ++i) {
    const auto start = std::chrono::steady_clock::now();
    if (absl::Status s = PlanDecode(runtime, args, ws); !s.ok()) {
      Die(s, "PlanDecode");
    }
    us.push_back(std::chrono::duration<double, std::micro>(
                     std::chrono::steady_clock::now() - start)
                     .count());
    if (absl::Status s = stream.Synchronize(); !s.ok()) Die(s, "sync");
  }
  std::nth_element(us.begin(), us.begin() + us.size() / 2, us.end());
  return us[us.size() / 2];
}

// What the protocol costs a kernel that does nothing but read: the case's
// KV bytes streamed from one contiguous buffer (no pages, no compute), and a
// launch that reads nothing, both after the same dirty flush as RunDecode.
void TimeRead(CudaTestRuntime& env, const ReadKernel& reader,
              const DeviceBuffer& contiguous, size_t bytes,
              const BenchOptions& opt, Row& row) {
  TestStream stream(env.api());
  Timer timer(env.api(), stream.get(), opt.reps);
  row.read =
      timer.Time([&] { reader.Launch(contiguous, bytes, stream.get()); });
  row.bulk_read = timer.Time([&] {
    reader.Launch(contiguous, bytes, stream.get(), ReadKernel::Kind::kBulk);
  });
  row.bulk_read_evict_first = timer.Time([&] {
    reader.Launch(contiguous, bytes, stream.get(), ReadKernel::Kind::kBulk,
                  {.evict_first = true});
  });
  row.empty = timer.Time([&] { reader.Launch(contiguous, 0, stream.get()); });
}

// RunDecode eagerly and from a CUDA graph captured once (auto path).
void TimeAuto(CudaTestRuntime& env, const ReadKernel& reader, const Model& m,
              const Case& c, const BenchOptions& opt, DecodeWorkspace& ws,
              Row& row) {
  const DriverApi& api = env.api();
  TestStream stream(api);
  Timer timer(api, stream.get(), opt.reps, &reader);
  const int64_t batch = static_cast<int64_t>(c.lens.size());
  CaseData d(api, m, c, batch, opt.ordered_pages, opt.hnd);
  const PlanDecodeArgs plan = PlanArgs(m, d, batch, stream.get());
  row.plan_us = TimePlan(env.runtime(), plan, ws, stream);
  row.plan = ws.plan();
  const RunDecodeArgs args =
      d.Args(m, batch, env.runtime().device(), stream.get());
  auto run = [&] {
    if (absl::Status s = RunDecode(env.runtime(), args, ws); !s.ok()) {
      Die(s, "RunDecode");
    }
  };
  row.tailor = timer.Time(run);
  row.tailor_clean = timer.Time(run, L2Flush::kClean);
  auto* kernels = dynamic_cast<CudaDecodeKernels*>(
      tailor::internal::EngineOf(env.runtime()).backend().decode_kernels());
  row.path = kernels->last_path() == CudaDecodeKernels::Path::kTma ? "tma"
                                                                   : "cp.async";
  row.ok = OutputsAreTheFill(d, m, batch) &&
           ws.TakeErrors(env.runtime(), stream.get()).ok();
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  Check(api.cuStreamBeginCapture(stream.get(),
                                 CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
        "cuStreamBeginCapture");
  run();
  Check(api.cuStreamEndCapture(stream.get(), &graph), "cuStreamEndCapture");
  Check(api.cuGraphInstantiateWithFlags(&exec, graph, 0),
        "cuGraphInstantiateWithFlags");
  row.graph = timer.Time(
      [&] { Check(api.cuGraphLaunch(exec, stream.get()), "cuGraphLaunch"); });
  api.cuGraphExecDestroy(exec);
  api.cuGraphDestroy(graph);
}

void TimeCpAsync(CudaTestRuntime& env, const Model& m, const Case& c,
                 const BenchOptions& opt, DecodeWorkspace& ws, Row& row) {
  TestStream stream(env.api());
  Timer timer(env.api(), stream.get(), opt.reps);
  const int64_t batch = static_cast<int64_t>(c.lens.size());
  CaseData d(env.api(), m, c, batch, opt.ordered_pages, opt.hnd);
  if (absl::Status s =
          PlanDecode(env.runtime(), PlanArgs(m, d, batch, stream.get()), ws);
      !s.ok()) {
    Die(s, "PlanDecode");
  }
  auto* kernels = dynamic_cast<CudaDecodeKernels*>(
      tailor::internal::EngineOf(env.runtime()).backend().decode_kernels());
  kernels->ForcePathForTesting(CudaDecodeKernels::Path::kCpAsync);
  const RunDecodeArgs args =
      d.Args(m, batch, env.runtime().device(), stream.get());
  row.cp_async = timer.Time([&] {
    if (absl::Status s = RunDecode(env.runtime(), args, ws); !s.ok()) {
      Die(s, "RunDecode (cp.async)");
    }
  });
  row.ok = row.ok && OutputsAreTheFill(d, m, batch);
  kernels->ForcePathForTesting(CudaDecodeKernels::Path::kAuto);
}

std::string Json(const Row& r) {
  return absl::StrCat(
      "{\"model\": \"", r.model, "\", \"case\": \"", r.name,
      "\", \"B\": ", r.batch, ", \"sum_L\": ", r.sum_len,
      ", \"floor_ms\": ", r.floor_us / 1e3,
      ", \"tailor_ms\": ", r.tailor.mean_us / 1e3, ", \"tailor_path\": \"",
      r.path, "\", \"tailor_graph_ms\": ", r.graph.mean_us / 1e3,
      ", \"tailor_cp_async_ms\": ", r.cp_async.mean_us / 1e3,
      ", \"tailor_clean_l2_ms\": ", r.tailor_clean.mean_us / 1e3,
      ", \"read_ms\": ", r.read.mean_us / 1e3,
      ", \"bulk_read_ms\": ", r.bulk_read.mean_us / 1e3,
      ", \"bulk_read_evict_first_ms\": ",
      r.bulk_read_evict_first.mean_us / 1e3,
      ", \"empty_launch_ms\": ", r.empty.mean_us / 1e3,
      ", \"plan_us\": ", r.plan_us, ", \"items\": ", r.plan.items,
      ", \"split_pairs\": ", r.plan.split_pairs,
      ", \"ok\": ", r.ok ? "true" : "false", "}");
}

void PrintRow(const Row& r) {
  auto frac = [&](const Timing& t) { return r.floor_us / t.mean_us; };
  std::printf(
      "%-10s %-28s %8lld %8.1f | %8.1f %4.0f%% %-8s | %8.1f %4.0f%% | %8.1f "
      "%4.0f%% | %8.1f %4.0f%% | %7.1f %7.1f %7.1f %5.3f %5.1f | %7.1f %6d %5d "
      "%s\n",
      r.model.c_str(), r.name.c_str(), static_cast<long long>(r.sum_len),
      r.floor_us, r.tailor.mean_us, 100 * frac(r.tailor), r.path.c_str(),
      r.graph.mean_us, 100 * frac(r.graph), r.cp_async.mean_us,
      100 * frac(r.cp_async), r.tailor_clean.mean_us,
      100 * frac(r.tailor_clean), r.read.mean_us, r.bulk_read.mean_us,
      r.bulk_read_evict_first.mean_us,
      r.best_read_us() / r.tailor.mean_us, r.empty.mean_us, r.plan_us,
      r.plan.items, r.plan.split_pairs,
      r.ok ? "ok" : "WRONG OUTPUT");
}

int Main(int argc, char** argv) {
  BenchOptions opt;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--reps="))
      opt.reps = std::atoi(std::string(arg).c_str());
    if (absl::ConsumePrefix(&arg, "--model=")) opt.model = std::string(arg);
    if (absl::ConsumePrefix(&arg, "--case=")) opt.case_name = std::string(arg);
    if (arg == "--pages=ordered") opt.ordered_pages = true;
    if (arg == "--layout=hnd") opt.hnd = true;
    if (arg == "--read-sweep") opt.read_sweep = true;
  }
  absl::StatusOr<std::unique_ptr<CudaTestRuntime>> probe =
      CudaTestRuntime::Create();
  if (!probe.ok()) {
    std::printf("cuda_decode_bench: skipped: %s\n",
                std::string(probe.status().message()).c_str());
    return probe.status().code() == absl::StatusCode::kUnavailable ? 0 : 1;
  }
  char device_name[128] = {};
  (*probe)->api().cuDeviceGetName(
      device_name, sizeof(device_name),
      (*probe)->backend().device_context().device());
  if (opt.read_sweep) {
    ReadSweep(**probe, opt.reps);
    return 0;
  }
  double copy = 0, read = 0, bandwidth = 0;
  {
    TestStream stream((*probe)->api());
    Timer timer((*probe)->api(), stream.get(), 20);
    bandwidth = MeasureBandwidth(**probe, timer, stream.get(), &copy, &read);
  }
  probe->reset();
  std::printf(
      "device %s (%s); copy %.2f TB/s (read+write), read %.2f TB/s; "
      "floor uses %.2f; %d reps, L2 flushed per rep; mean us\n",
      device_name,
      absl::StrCat("bf16, head_dim 128, ", opt.hnd ? "HND" : "NHD",
                   opt.ordered_pages ? ", pages in order"
                                     : ", pages at random places")
          .c_str(),
      copy / 1e12, read / 1e12, bandwidth / 1e12, opt.reps);
  // The anchors' two models at page 16, then Llama at page 64: what whole
  // 64-token boxes (one TMA load per tile instead of four) would buy, the
  // upper bound of merging physically contiguous pages into larger loads.
  const Model models[] = {{"llama3-8b", 32, 8, 16},
                          {"qwen3-30b", 32, 4, 16},
                          {"llama3-8b/page64", 32, 8, 64}};
  std::vector<Row> rows;
  std::vector<std::string> variant_lines;
  std::vector<Case> cases;
  for (const Case& c : Grid()) {
    if (opt.case_name.empty() || c.name == opt.case_name) cases.push_back(c);
  }
  for (const Model& m : models) {
    if (!opt.model.empty() && m.name != opt.model) continue;
    // A fresh runtime per model: its stats count the model's variants.
    absl::StatusOr<std::unique_ptr<CudaTestRuntime>> env =
        CudaTestRuntime::Create();
    if (!env.ok()) Die(env.status(), "CudaTestRuntime");
    // B = 1 runs on a workspace for one sequence, as a server that
    // captures a graph per batch size would reserve (its launch may then
    // use clusters); every other batch on one for 256.
    DecodeWorkspace ws, ws1;
    TestStream setup((*env)->api());
    std::unique_ptr<DeviceBuffer> bound = Reserve(**env, m, ws, setup.get());
    std::unique_ptr<DeviceBuffer> bound1 =
        Reserve(**env, m, ws1, setup.get(), 1);
    const ReadKernel reader(**env);
    auto kv_bytes = [&](const Case& c) {
      int64_t sum_len = 0;
      for (int32_t n : c.lens) sum_len += n;
      return static_cast<size_t>(2 * sum_len * m.kv_heads * kHeadDim * 2);
    };
    size_t most_bytes = 16;
    for (const Case& c : cases) most_bytes = std::max(most_bytes, kv_bytes(c));
    const DeviceBuffer contiguous((*env)->api(), most_bytes);
    if (!contiguous.ok()) Die(absl::ResourceExhaustedError("kv"), "alloc");
    const size_t first = rows.size();
    for (const Case& c : cases) {
      Row row;
      row.model = m.name;
      row.name = c.name;
      row.batch = static_cast<int64_t>(c.lens.size());
      for (int32_t n : c.lens) row.sum_len += n;
      row.floor_us =
          2.0 * row.sum_len * m.kv_heads * kHeadDim * 2 / bandwidth * 1e6;
      TimeAuto(**env, reader, m, c, opt, c.lens.size() == 1 ? ws1 : ws, row);
      TimeRead(**env, reader, contiguous, kv_bytes(c), opt, row);
      rows.push_back(row);
    }
    const StatsSnapshot stats = (*env)->runtime().stats();
    const auto it = stats.specializations_per_op.find("attention.decode");
    variant_lines.push_back(absl::StrCat(
        m.name, ": ", it == stats.specializations_per_op.end() ? 0 : it->second,
        " decode kernel variant(s) for the whole grid (auto path)"));
    for (size_t i = first; i < rows.size(); ++i) {
      TimeCpAsync(**env, m, cases[i - first], opt,
                  cases[i - first].lens.size() == 1 ? ws1 : ws, rows[i]);
    }
  }
  std::printf(
      "%-10s %-28s %8s %8s | %8s %5s %-8s | %8s %5s | %8s %5s | %8s %5s | "
      "%7s %7s %7s %5s %5s | %7s %6s %5s\n",
      "model", "case", "sum_L", "floor_us", "tailor", "floor", "path", "graph",
      "floor", "cp.async", "floor", "clean-L2", "floor", "read", "bulk",
      "bulk-ef", "/tlr",
      "empty", "plan_us", "items", "split");
  for (const Row& r : rows) PrintRow(r);
  for (const std::string& line : variant_lines)
    std::printf("%s\n", line.c_str());
  if (const char* out = std::getenv("OUT"); out != nullptr) {
    const std::string path = absl::StrCat(out, "/cuda_decode_bench.json");
    if (FILE* f = std::fopen(path.c_str(), "w"); f != nullptr) {
      for (const Row& r : rows) std::fprintf(f, "%s\n", Json(r).c_str());
      std::fclose(f);
    }
  }
  bool all_ok = true;
  for (const Row& r : rows) all_ok = all_ok && r.ok;
  return all_ok ? 0 : 1;
}

}  // namespace
}  // namespace tailor::attention

int main(int argc, char** argv) { return tailor::attention::Main(argc, argv); }
