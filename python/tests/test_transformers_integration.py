"""tailor.integrations.transformers: "tailor" as a transformers experts
implementation, on tiny MoE models with random weights (no download):
tailor against transformers' eager experts, and the fallback for what
tailor does not compute. Skipped when torch or transformers (5.x) is not
installed (run_python_tests.sh installs both when TAILOR_TEST_TORCH=1)."""

import pytest

torch = pytest.importorskip("torch", reason="torch not installed")
transformers = pytest.importorskip(
    "transformers", reason="transformers not installed (run_python_tests.sh "
    "installs it with torch, TAILOR_TEST_TORCH=1)")
if not hasattr(transformers.PreTrainedModel, "set_experts_implementation"):
    pytest.skip(f"transformers {transformers.__version__} has no experts "
                f"interface (5.x has)", allow_module_level=True)

import moe_routing  # noqa: E402
import tailor  # noqa: E402
import tailor.integrations.transformers as hf_tailor  # noqa: E402


def tiny_config(kind):
    common = dict(vocab_size=97, hidden_size=64, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2,
                  num_experts_per_tok=2, max_position_embeddings=64)
    if kind == "mixtral":
        return transformers.MixtralConfig(intermediate_size=32,
                                          num_local_experts=8, **common)
    return transformers.Qwen3MoeConfig(
        intermediate_size=96, moe_intermediate_size=32, num_experts=8,
        head_dim=16, norm_topk_prob=True, **common)


def tiny_model(kind, dtype):
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(tiny_config(kind))
    return model.to(dtype).eval()


def launches():
    return tailor.runtime_for("cpu").stats()["launches"]


def logits(model, implementation, tokens):
    model.set_experts_implementation(implementation)
    with torch.no_grad():
        return model(tokens).logits.float()


def rel_err(a, b):
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("kind", ["mixtral", "qwen3_moe"])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-4),
                                       (torch.bfloat16, 1e-2)])
def test_tailor_experts_match_eager(kind, dtype, tol):
    model = tiny_model(kind, dtype)
    tokens = torch.randint(0, 97, (3, 17))  # 51 tokens, ragged over experts
    eager = logits(model, "eager", tokens)
    before = launches()
    mine = logits(model, "tailor", tokens)
    assert launches() > before  # tailor's kernels ran, not a fallback
    assert not torch.isnan(mine).any()
    assert rel_err(mine, eager) < tol


@pytest.mark.parametrize("kind", ["mixtral", "qwen3_moe"])
def test_bf16_logits_against_float32_taking_the_same_experts(kind):
    # The bf16 runs' own routing, pinned in a float32 copy: what is left is
    # arithmetic, where tailor's fused experts (one rounding of the
    # activation) are no worse than transformers' eager loop.
    model = tiny_model(kind, torch.bfloat16)
    reference = moe_routing.float32_copy(model)
    tokens = torch.randint(0, 97, (3, 17))
    errors = {}
    for implementation in ("eager", "tailor"):
        model.set_experts_implementation(implementation)
        out, routing = moe_routing.run_recorded(model, input_ids=tokens)
        assert len(routing) == 2 and not torch.isnan(out).any()
        errors[implementation] = rel_err(out, moe_routing.pinned_reference(
            reference, routing, input_ids=tokens))
    assert errors["tailor"] < 1e-2
    assert errors["tailor"] <= 1.25 * errors["eager"], errors


def test_pinned_routing_takes_the_given_experts():
    model = tiny_model("mixtral", torch.float32)
    tokens = torch.randint(0, 97, (2, 9))
    out, routing = moe_routing.run_recorded(model, input_ids=tokens)
    same = moe_routing.pinned_reference(model, routing, input_ids=tokens)
    assert rel_err(same, out) < 1e-6  # its own routing: the same logits
    moved = [ids.clone() for ids in routing]
    moved[1][5] = (moved[1][5] + 1) % 8  # token 5 of layer 1: other experts
    assert moe_routing.flips(moved, routing) == 1
    other = moe_routing.pinned_reference(model, moved, input_ids=tokens)
    assert rel_err(other[:, 5:], out[:, 5:]) > 1e-3  # that token changed
    assert rel_err(other[:, :5], out[:, :5]) < 1e-6  # causal: earlier not


def test_experts_implementation_at_construction():
    config = tiny_config("mixtral")
    model = transformers.AutoModelForCausalLM.from_config(
        config, experts_implementation="tailor")
    assert model.config._experts_implementation == "tailor"
    before = launches()
    with torch.no_grad():
        model(torch.randint(0, 97, (1, 5)))
    assert launches() > before


def test_autograd_falls_back_to_transformers_with_a_warning(caplog):
    model = tiny_model("mixtral", torch.float32)
    tokens = torch.randint(0, 97, (2, 9))
    eager = logits(model, "eager", tokens)
    model.set_experts_implementation("tailor")
    hf_tailor._warned.clear()
    before = launches()
    out = model(tokens).logits  # grad enabled: tailor cannot serve it
    out.float().sum().backward()
    assert launches() == before
    assert rel_err(out.detach().float(), eager) < 1e-4
    assert model.model.layers[0].mlp.experts.gate_up_proj.grad is not None
    assert any("autograd" in r.getMessage() and "batched_mm" in r.getMessage()
               for r in caplog.records)


def test_unknown_implementation_is_still_refused_by_transformers():
    model = tiny_model("mixtral", torch.float32)
    with pytest.raises(ValueError, match="tailor"):  # listed as valid
        model.set_experts_implementation("no_such_experts")
