"""GPU check of tailor.integrations.transformers: a transformers MoE model
with random weights at real layer dims (a few layers), "tailor" against
transformers' "eager" (the reference) and "grouped_mm" experts. Exits
nonzero on any failure; prints a short table last.

  1. prefill of a ragged batch (padded prompts of different lengths)
  2. decode steps (one token per sequence, KV cache), eager calls
  3. per implementation: prefill logits against a float32 copy of the
     model that takes the same experts the run took (rel err < 2e-2; see
     python/tests/moe_routing.py: a bf16 run that flips one near-tie in
     top-k routing is far from eager without being inexact), the
     agreement with eager and the tokens routed differently from eager
     (reported), the MoE layers' time (one experts module timed alone,
     per call) and decode tokens/s
  4. per implementation, decode under CUDA graphs: the same ragged prefill
     into a transformers StaticCache, then one decode forward at that batch
     captured in a torch.cuda.CUDAGraph (input ids, the cache's device-side
     length and the next token live in static buffers the graph updates)
     and replayed: the first 3 replays against the same steps run eagerly
     (rel err < 2e-2), then --steps replays timed: "graph decode tok/s"
     beside the eager column. tailor's step must capture (a failure fails
     the check and prints its traceback); a stock one that cannot is
     "n/a (reason)" (eager experts: host syncs in the expert loop, found
     with torch.cuda.set_sync_debug_mode before any capture is tried).
     Written against transformers 5.24's StaticCache (`cache=` argument,
     device-side cumulative_length); on CPU the path runs with eager calls
     in place of replays and the column reads "n/a (cpu)".

Needs torch with CUDA and transformers 5.x importable (e.g. PYTHONPATH to a
`pip install --target DIR "transformers>=5,<6"` folder). Run from the
repository root after scripts/gpu-bundle:
  LD_LIBRARY_PATH=$PWD/build-gpu/lib TAILOR_LIBRARY=$PWD/build-gpu/lib/libtailor_c.so.3 \\
    PYTHONPATH=$PWD/python:$TRANSFORMERS_DIR python3 python/tests/gpu/check_transformers_cuda.py
Options: --device cpu --small (a CPU smoke run of the script itself; no
CUDA graphs).
"""

import argparse
import inspect
import os
import sys
import time
import traceback

import torch
import transformers

import tailor
import tailor.integrations.transformers  # noqa: F401  registers "tailor"

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import moe_routing  # noqa: E402  (python/tests/moe_routing.py)

IMPLEMENTATIONS = ("eager", "grouped_mm", "tailor")
failures = []


def check(name, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {name} {detail}", flush=True)
    if not ok:
        failures.append(name)


def configs(small):
    """(name, config): Qwen3-30B-A3B's and Mixtral-8x7B's MoE layers."""
    if small:
        dims = dict(hidden_size=128, num_attention_heads=4,
                    num_key_value_heads=2, head_dim=32, num_hidden_layers=2)
        return [("qwen3-moe-small", transformers.Qwen3MoeConfig(
                    vocab_size=512, intermediate_size=256,
                    moe_intermediate_size=64, num_experts=16,
                    num_experts_per_tok=4, **dims))]
    return [
        ("qwen3-30b-a3b", transformers.Qwen3MoeConfig(
            vocab_size=151936, hidden_size=2048, intermediate_size=6144,
            moe_intermediate_size=768, num_experts=128, num_experts_per_tok=8,
            num_attention_heads=32, num_key_value_heads=4, head_dim=128,
            num_hidden_layers=4, norm_topk_prob=True)),
        ("mixtral-8x7b", transformers.MixtralConfig(
            vocab_size=32000, hidden_size=4096, intermediate_size=14336,
            num_local_experts=8, num_experts_per_tok=2,
            num_attention_heads=32, num_key_value_heads=8,
            num_hidden_layers=2)),
    ]


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def timed(device, fn, reps):
    fn()
    sync(device)
    start = time.perf_counter()
    for _ in range(reps):
        fn()
    sync(device)
    return (time.perf_counter() - start) / reps


def ragged_batch(vocab, lengths, device):
    """Left-padded prompts of `lengths` tokens: ids and attention mask."""
    width = max(lengths)
    ids = torch.randint(0, vocab, (len(lengths), width), device=device)
    mask = torch.zeros_like(ids)
    for row, n in enumerate(lengths):
        mask[row, width - n:] = 1
    return ids, mask


def run(model, ids, mask, steps):
    """Prefill logits, then `steps` greedy decode steps; (logits, seconds
    of the decode steps)."""
    with torch.no_grad():
        with moe_routing.recorded_routing(model) as routing:
            out = model(input_ids=ids, attention_mask=mask, use_cache=True)
        prefill = out.logits.float()
        cache, token = out.past_key_values, out.logits[:, -1].argmax(-1)
        sync(ids.device)
        start = time.perf_counter()
        for _ in range(steps):
            mask = torch.cat([mask, torch.ones_like(mask[:, :1])], 1)
            out = model(input_ids=token[:, None], attention_mask=mask,
                        past_key_values=cache, use_cache=True)
            cache, token = out.past_key_values, out.logits[:, -1].argmax(-1)
        sync(ids.device)
    return prefill, routing, time.perf_counter() - start


GRAPH_CHECK_STEPS = 3  # graph replays compared with the same eager steps


class CaptureFailed(RuntimeError):
    """torch.cuda.graph() raised while capturing the decode step."""


def graph_decode(model, ids, mask, steps, capture, label=""):
    """Prefill of the ragged batch into a transformers StaticCache, then
    decode steps of one CUDA graph: one decode forward at this batch
    (input ids, the cache's device-side length, the next token written back
    into the static input), captured once and replayed. The first
    GRAPH_CHECK_STEPS replays are compared with the same steps run eagerly
    (host syncs in them are caught first with torch's sync debug mode), the
    next `steps` are timed. capture=False (CPU) runs the same path with
    eager calls in place of replays and times nothing. Returns (tokens/s,
    detail), or (None, why not) for a step that cannot be captured; raises
    CaptureFailed when the capture itself fails."""
    if "cache" not in inspect.signature(model.forward).parameters:
        return None, (f"transformers {transformers.__version__}: forward "
                      f"has no `cache` argument (5.24 API)")
    device = ids.device
    batch, width = ids.shape
    length = width + GRAPH_CHECK_STEPS + steps + 1
    cache = transformers.StaticCache(config=model.config,
                                     max_cache_len=length)
    # positions past the prompt are unmasked here; the causal mask (from
    # the cache's length) hides those not written yet
    static_mask = torch.ones(batch, length, dtype=mask.dtype, device=device)
    static_mask[:, :width] = mask
    with torch.no_grad():
        out = model(input_ids=ids, attention_mask=static_mask, cache=cache,
                    use_cache=True, logits_to_keep=1)
        first = out.logits[:, -1].argmax(-1, keepdim=True)
        static_ids = first.clone()
        del out

        def step():
            logits = model(input_ids=static_ids, attention_mask=static_mask,
                           cache=cache, use_cache=True,
                           logits_to_keep=1).logits[:, -1]
            static_ids.copy_(logits.argmax(-1, keepdim=True))
            return logits

        def rewind():
            for layer in cache.layers:
                layer.cumulative_length.fill_(width)
            static_ids.copy_(first)

        def rel(a, b):
            return ((a.float() - b).norm() / b.norm()).item()

        if not capture:
            reference = [step().float() for _ in range(GRAPH_CHECK_STEPS)]
            rewind()
            err = max(rel(step(), r) for r in reference)
            check(f"{label} graph decode path on cpu (eager steps after "
                  f"the rewind repeat)", err == 0.0, f"rel err {err:.1e}")
            return None, "cpu"

        # eager reference steps on a side stream (warm-up before capture);
        # all but the first under sync debug mode: a host sync cannot be
        # captured, and a failed capture can leave the stream unusable
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        reference, synced = [], None
        with torch.cuda.stream(side):
            reference.append(step().float())
            torch.cuda.set_sync_debug_mode("error")
            try:
                for _ in range(GRAPH_CHECK_STEPS - 1):
                    reference.append(step().float())
            except RuntimeError as error:
                if "synchroniz" not in str(error):
                    raise
                synced = error
            finally:
                torch.cuda.set_sync_debug_mode(0)
        torch.cuda.current_stream(device).wait_stream(side)
        sync(device)
        if synced is not None:
            return None, f"host sync at {_where(synced)}"
        rewind()
        sync(device)
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                static_logits = step()
        except Exception as error:  # noqa: BLE001  reported by the caller
            try:
                sync(device)
            except Exception:  # noqa: BLE001
                pass
            root = error  # capture_end's error hides the first one
            while root.__context__ is not None:
                root = root.__context__
            raise CaptureFailed(
                f"{type(root).__name__}: {root}"[:300]) from error
        errs = []
        for r in reference:
            graph.replay()
            errs.append(rel(static_logits, r))
        sync(device)
        err = max(errs)
        if not err < 2e-2:
            return None, f"replay != eager steps (rel err {err:.1e})"
        start = time.perf_counter()
        for _ in range(steps):
            graph.replay()
        sync(device)
        seconds = time.perf_counter() - start
    del graph, static_logits, cache
    torch.cuda.empty_cache()
    return batch * steps / seconds, f"replays vs eager steps rel err {err:.1e}"


def _where(error):
    """file:line of the innermost frame outside torch's own files."""
    frames = traceback.extract_tb(error.__traceback__)
    outside = [f for f in frames if f"{os.sep}torch{os.sep}" not in f.filename]
    frame = (outside or frames)[-1]
    return f"{os.path.basename(frame.filename)}:{frame.lineno} ({frame.name})"


def graph_decode_cells(name, model, ids, mask, steps, impls):
    """The "graph decode tok/s" cell of each implementation: tailor's first
    (it must capture: a failure there fails the check, with its traceback),
    then the stock ones ("n/a (reason)" when they cannot be captured; eager
    last, the one expected not to)."""
    cells = {}
    order = ("tailor", "grouped_mm", "eager")
    for impl in sorted(impls, key=lambda i: order.index(i) if i in order
                       else len(order)):
        model.set_experts_implementation(impl)
        if ids.device.type != "cuda":
            graph_decode(model, ids, mask, 2, capture=False,
                         label=f"{name} {impl}")
            cells[impl] = "n/a (cpu)"
            continue
        try:
            tps, reason = graph_decode(model, ids, mask, steps, capture=True)
            short = ("host sync" if reason.startswith("host sync") else
                     "replay != eager" if reason.startswith("replay !=")
                     else "transformers API")
        except Exception as error:  # noqa: BLE001  reported here
            if impl == "tailor" or not isinstance(error, CaptureFailed):
                print(f"{name} {impl}: the CUDA graph decode step failed:",
                      flush=True)
                traceback.print_exception(error)
            tps, reason = None, f"{type(error).__name__}: {error}"[:300]
            short = ("capture failed" if isinstance(error, CaptureFailed)
                     else "error")
        if impl == "tailor":
            check(f"{name} tailor graph decode (capture; replays = eager "
                  f"steps)", tps is not None, reason)
        else:
            print(f"     {name} {impl} graph decode: "
                  f"{'ok' if tps is not None else 'n/a'}, {reason}",
                  flush=True)
        cells[impl] = f"{tps:.1f}" if tps is not None else f"n/a ({short})"
    return cells


def experts_call_seconds(model, device, tokens, reps):
    """One experts module alone on `tokens` routed tokens."""
    experts = next(m for m in model.modules()
                   if type(m).__name__.endswith("Experts"))
    hidden = torch.randn(tokens, experts.gate_up_proj.shape[-1],
                         device=device, dtype=experts.gate_up_proj.dtype)
    k = model.config.num_experts_per_tok
    weights, ids = torch.randn(tokens, experts.num_experts,
                               device=device).softmax(-1).topk(k)
    weights = weights.to(hidden.dtype)
    with torch.no_grad():
        return timed(device, lambda: experts(hidden, ids, weights), reps)


def check_model(name, config, device, steps, reps):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model = model.to(device=device, dtype=torch.bfloat16).eval()
    lengths = [1, 17, 130, 577, 64, 3] if device.type == "cuda" else [1, 5, 9]
    ids, mask = ragged_batch(config.vocab_size, lengths, device)
    valid = mask.bool().cpu()  # logits are compared on the host

    def rel(a, b):
        return ((a - b)[valid].norm() / b[valid].norm()).item()

    runs = {}
    for impl in IMPLEMENTATIONS:
        if impl == "grouped_mm" and not hasattr(torch, "_grouped_mm"):
            continue
        model.set_experts_implementation(impl)
        run(model, ids, mask, 2)  # compiles (JIT, autotuning) stay out
        logits, routing, decode_s = run(model, ids, mask, steps)
        check(f"{name} {impl} no NaN", not torch.isnan(logits).any().item())
        per_call = {t: experts_call_seconds(model, device, t, reps)
                    for t in (len(lengths), int(sum(lengths)))}
        runs[impl] = (logits.cpu(), routing, len(lengths) * steps / decode_s,
                      per_call[len(lengths)], per_call[int(sum(lengths))])
    rows = table_rows(name, model, ids, mask, runs, rel)
    cells = graph_decode_cells(name, model, ids, mask, steps, list(runs))
    return [row + (cells[row[1]],) for row in rows]


def table_rows(name, model, ids, mask, runs, rel):
    """Each run against eager and against the float32 model that takes the
    run's own experts (the check)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    reference = moe_routing.float32_copy(model)
    eager_logits, eager_routing = runs["eager"][0], runs["eager"][1]
    rows = []
    for impl, (logits, routing, tps, small_s, large_s) in runs.items():
        pinned = moe_routing.pinned_reference(
            reference, routing, input_ids=ids, attention_mask=mask).cpu()
        err = rel(logits, pinned)
        check(f"{name} {impl} prefill logits vs float32 (same experts)",
              err < 2e-2, f"rel err {err:.1e}")
        rows.append((name, impl, rel(logits, eager_logits),
                     moe_routing.flips(routing, eager_routing), err, tps,
                     small_s, large_s))
    del reference
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--small", action="store_true")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--reps", type=int, default=20)
    args = parser.parse_args()
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, transformers "
          f"{transformers.__version__}, tailor {tailor.__version__}, "
          f"{torch.cuda.get_device_name(device) if device.type == 'cuda' else 'cpu'}")
    rows = []
    for name, config in configs(args.small):
        rows += check_model(name, config, device, args.steps, args.reps)
    print("\nvs eager: prefill logits rel err against transformers' eager "
          "experts; flips: router calls x tokens whose experts differ from "
          "eager's; vs fp32: against the float32 model taking the run's "
          "own experts (the check); decode tok/s: eager calls on a "
          "DynamicCache; graph decode tok/s: one CUDA graph of the decode "
          "step on a StaticCache, replayed (n/a: not capturable, why above)")
    print(f"{'model':16} {'experts':11} {'vs eager':>8} {'flips':>5} "
          f"{'vs fp32':>8} {'decode tok/s':>13} {'graph decode tok/s':>22} "
          f"{'MoE us (decode T)':>18} {'MoE us (prefill T)':>19}")
    for (name, impl, err, flipped, pinned, tps, small_s, large_s,
         graph) in rows:
        print(f"{name:16} {impl:11} {err:8.1e} {flipped:5d} {pinned:8.1e} "
              f"{tps:13.1f} {graph:>22} "
              f"{small_s * 1e6:18.1f} {large_s * 1e6:19.1f}")
    print(f"\n{len(failures)} failed" if failures else "\nall passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
