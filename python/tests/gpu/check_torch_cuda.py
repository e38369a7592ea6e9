"""GPU check of torch.ops.tailor.fused_experts on CUDA tensors (the lead
runs it on the GPU machine; CI has no GPU). Exits nonzero on any failure.

  1. eager numerics against plain torch (f32 math), bf16, ragged T
  2. torch.compile(fullgraph=True) of a residual MoE layer, dynamic T
  3. CUDA graph: reserve, capture once, replay with new data in the same
     buffers (including steps whose routing differs completely)
  4. timings: eager call, graph replay, the plain-torch reference
  5. paged decode (torch.ops.tailor.paged_decode, Llama-3-8B heads, page
     16): numerics, and a CUDA graph replayed after new plans

Run from the repository root after scripts/gpu-bundle (which puts
libtailor_c.so.3 and its shared libraries in build-gpu/lib):
  LD_LIBRARY_PATH=$PWD/build-gpu/lib TAILOR_LIBRARY=$PWD/build-gpu/lib/libtailor_c.so.3 \
    PYTHONPATH=$PWD/python python3 python/tests/gpu/check_torch_cuda.py
"""

import sys
import time

import torch

import tailor
import tailor.torch_ops as ops

# Qwen3-30B-A3B's MoE: E=128, k=8, H=2048, I=768.
E, K, H, I = 128, 8, 2048, 768
TOL = 2e-2
failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}")
    if not ok:
        failures.append(name)


def rel_err(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm()).item()


def routing(T, g, device):
    scores = torch.randn(T, E, generator=g, device=device).softmax(-1)
    tw, ids = torch.topk(scores, K)
    return tw / tw.sum(-1, keepdim=True), ids.to(torch.int32)


def timed(fn, n=50):
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(n):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / n * 1e6


def check_paged_decode(dev, g):
    HQ, HKV, D, PAGE, PAGES, B = 32, 8, 128, 16, 4096, 16
    k = torch.randn(PAGES, PAGE, HKV, D, generator=g, device=dev).bfloat16()
    v = torch.randn(PAGES, PAGE, HKV, D, generator=g, device=dev).bfloat16()
    q = torch.randn(B, HQ, D, generator=g, device=dev).bfloat16()
    table = torch.randperm(PAGES, generator=g, device=dev)[:B * 256]
    table = table.reshape(B, 256).to(torch.int32)
    shape = dict(num_qo_heads=HQ, num_kv_heads=HKV, head_dim=D,
                 page_size=PAGE, dtype=torch.bfloat16, device=dev)

    def lengths(seed):
        gen = torch.Generator().manual_seed(seed)
        lens = torch.randint(0, 300, (B,), generator=gen, dtype=torch.int32)
        lens[0] = 4000  # one long sequence among short ones
        return lens

    lens = lengths(1)
    ops.plan_paged_decode(lens, max_batch=B, **shape)
    dev_lens = lens.to(dev)
    out = torch.ops.tailor.paged_decode(q, k, v, table, dev_lens)
    err = rel_err(out, ops.paged_decode_reference(q, k, v, table, dev_lens))
    check("paged_decode eager", err < TOL, f"rel err {err:.2e}")
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out_static = torch.ops.tailor.paged_decode(q, k, v, table, dev_lens)
    for step in range(3):
        lens = lengths(10 + step)
        ops.plan_paged_decode(lens, **shape)  # outside the graph
        dev_lens.copy_(lens.to(dev))
        q.copy_(torch.randn(B, HQ, D, generator=g, device=dev).bfloat16())
        graph.replay()
        torch.cuda.synchronize()
        err = rel_err(out_static, ops.paged_decode_reference(
            q, k, v, table, dev_lens))
        check(f"paged_decode graph replay {step}", err < TOL,
              f"rel err {err:.2e}")


def main():
    if not torch.cuda.is_available():
        print("no CUDA device")
        return 1
    dev = torch.device("cuda:0")
    g = torch.Generator(device=dev).manual_seed(0)
    w1 = (torch.randn(E, 2 * I, H, generator=g, device=dev) * 0.02).bfloat16()
    w2 = (torch.randn(E, H, I, generator=g, device=dev) * 0.02).bfloat16()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(dev)}, "
          f"tailor {tailor.__version__} ({tailor.library_path})")

    # 1. eager numerics, ragged T
    for T in (1, 7, 64, 257):
        x = torch.randn(T, H, generator=g, device=dev).bfloat16()
        tw, ids = routing(T, g, dev)
        y = torch.ops.tailor.fused_experts(x, w1, w2, tw, ids)
        ref = ops.fused_experts_reference(x, w1, w2, tw, ids)
        err = rel_err(y, ref)
        check(f"eager T={T}", err < TOL, f"rel err {err:.2e}")

    # 2. torch.compile(fullgraph=True), dynamic T
    def layer(h, tw, ids):
        return h + torch.ops.tailor.fused_experts(h, w1, w2, tw, ids)

    compiled = torch.compile(layer, fullgraph=True, dynamic=True)
    for T in (5, 33, 130):
        x = torch.randn(T, H, generator=g, device=dev).bfloat16()
        tw, ids = routing(T, g, dev)
        err = rel_err(compiled(x, tw, ids), layer(x, tw, ids))
        check(f"compile T={T}", err < 1e-6, f"rel err {err:.2e}")

    # 3. CUDA graph: capture once, replay with new routing and data
    T = 64
    ops.reserve(dev, max_tokens=256, topk=K, num_experts=E, hidden=H,
                intermediate=I, dtype=torch.bfloat16)
    x_static = torch.randn(T, H, generator=g, device=dev).bfloat16()
    tw_static, ids_static = routing(T, g, dev)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up: kernels compiled, buffers made
        torch.ops.tailor.fused_experts(x_static, w1, w2, tw_static,
                                       ids_static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y_static = torch.ops.tailor.fused_experts(x_static, w1, w2,
                                                  tw_static, ids_static)
    for step in range(4):
        x = torch.randn(T, H, generator=g, device=dev).bfloat16()
        tw, ids = routing(T, g, dev)
        if step == 3:
            ids = torch.zeros_like(ids) + torch.arange(K, device=dev,
                                                       dtype=torch.int32)
        x_static.copy_(x)
        tw_static.copy_(tw)
        ids_static.copy_(ids)
        graph.replay()
        torch.cuda.synchronize()
        err = rel_err(y_static, ops.fused_experts_reference(x, w1, w2, tw,
                                                            ids))
        check(f"graph replay {step}", err < TOL, f"rel err {err:.2e}")

    # 4. timings
    eager = timed(lambda: torch.ops.tailor.fused_experts(
        x_static, w1, w2, tw_static, ids_static))
    replay = timed(graph.replay)
    print(f"T={T}: eager op {eager:.1f} us/call, graph replay "
          f"{replay:.1f} us/step")
    print("stats:", {k: v for k, v in tailor.stats()["cuda:0"].items()
                     if k in ("launches", "compiles", "disk_hits",
                              "memory_hits", "launches_per_op")})
    check_paged_decode(dev, g)
    print(f"{'FAILED: ' + ', '.join(failures) if failures else 'all ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
