"""Why a bf16 MoE model's logits disagree between experts implementations:
top-k routing flips, not arithmetic.

For several seeds of a small Mixtral (top-2 of 8, renormalized) or
Qwen3-MoE (top-8 of 32) with random weights, runs transformers' "eager",
"grouped_mm" and tailor's experts in bf16 and prints per run: the prefill
logits' rel err against eager, the tokens routed to other experts than
eager's (router calls x tokens), and the rel err against a float32 copy
of the model that takes the run's own experts (python/tests/
moe_routing.py), i.e. the arithmetic error alone.

  PYTHONPATH=python TAILOR_LIBRARY=build/src/capi/libtailor_c.so.3 \\
    python3 bench/moe_routing_flips.py --model mixtral --seeds 6
Options: --hidden, --intermediate, --tokens, --device (cpu | cuda).
"""

import argparse
import os
import sys

import torch
import transformers

import tailor.integrations.transformers  # noqa: F401  registers "tailor"

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python",
                                "tests"))
import moe_routing  # noqa: E402

IMPLEMENTATIONS = ("eager", "grouped_mm", "tailor")


def config(model, hidden, intermediate):
    common = dict(vocab_size=512, hidden_size=hidden, num_attention_heads=8,
                  num_key_value_heads=2, num_hidden_layers=2)
    if model == "mixtral":
        return transformers.MixtralConfig(
            intermediate_size=intermediate, num_local_experts=8,
            num_experts_per_tok=2, **common)
    return transformers.Qwen3MoeConfig(
        intermediate_size=intermediate, moe_intermediate_size=intermediate // 4,
        num_experts=32, num_experts_per_tok=8, head_dim=hidden // 8,
        norm_topk_prob=True, **common)


def rel(a, b):
    return ((a - b).norm() / b.norm()).item()


def one_seed(args, seed, device):
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(
        config(args.model, args.hidden, args.intermediate))
    model = model.to(device=device, dtype=torch.bfloat16).eval()
    reference = moe_routing.float32_copy(model)
    ids = torch.randint(0, 512, (2, args.tokens // 2), device=device)
    runs = {}
    for impl in IMPLEMENTATIONS:
        model.set_experts_implementation(impl)
        runs[impl] = moe_routing.run_recorded(model, input_ids=ids)
    eager_logits, eager_routing = runs["eager"]
    for impl, (logits, routing) in runs.items():
        pinned = moe_routing.pinned_reference(reference, routing,
                                              input_ids=ids)
        print(f"{args.model:8} {seed:4d} {impl:11} "
              f"{rel(logits, eager_logits):8.1e} "
              f"{moe_routing.flips(routing, eager_routing):5d} "
              f"{rel(logits, pinned):8.1e}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=("mixtral", "qwen3"),
                        default="mixtral")
    parser.add_argument("--seeds", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=512)
    parser.add_argument("--intermediate", type=int, default=1792)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    print(f"{'model':8} {'seed':>4} {'experts':11} {'vs eager':>8} "
          f"{'flips':>5} {'vs fp32':>8}")
    for seed in range(args.seeds):
        one_seed(args, seed, torch.device(args.device))


if __name__ == "__main__":
    main()
