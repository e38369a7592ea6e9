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

Needs torch with CUDA and transformers 5.x importable (e.g. PYTHONPATH to a
`pip install --target DIR "transformers>=5,<6"` folder). Run from the
repository root after scripts/gpu-bundle:
  LD_LIBRARY_PATH=$PWD/build-gpu/lib TAILOR_LIBRARY=$PWD/build-gpu/lib/libtailor_c.so.3 \\
    PYTHONPATH=$PWD/python:$TRANSFORMERS_DIR python3 python/tests/gpu/check_transformers_cuda.py
Options: --device cpu --small (a CPU smoke run of the script itself).
"""

import argparse
import os
import sys
import time

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
    return table_rows(name, model, ids, mask, runs, rel)


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
          "own experts (the check)")
    print(f"{'model':16} {'experts':11} {'vs eager':>8} {'flips':>5} "
          f"{'vs fp32':>8} {'decode tok/s':>13} "
          f"{'MoE us (decode T)':>18} {'MoE us (prefill T)':>19}")
    for name, impl, err, flipped, pinned, tps, small_s, large_s in rows:
        print(f"{name:16} {impl:11} {err:8.1e} {flipped:5d} {pinned:8.1e} "
              f"{tps:13.1f} {small_s * 1e6:18.1f} {large_s * 1e6:19.1f}")
    print(f"\n{len(failures)} failed" if failures else "\nall passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
