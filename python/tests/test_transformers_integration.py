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


# ---- "tailor_paged": transformers' continuous batching ----------------------


def packed_step(q_lens, kv_lens, heads=4, heads_kv=2, dim=64, seed=3):
    """Continuous batching's packed form: query [1, H, Σq, D], key / value
    [1, Hkv, Σk, D] (each sequence's KV, new tokens last), cu_seq_lens."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, heads, sum(q_lens), dim, generator=g).bfloat16()
    k = torch.randn(1, heads_kv, sum(kv_lens), dim, generator=g).bfloat16()
    v = torch.randn(1, heads_kv, sum(kv_lens), dim, generator=g).bfloat16()

    def cu(lens):
        return torch.tensor([0] + list(torch.tensor(lens).cumsum(0)),
                            dtype=torch.int32)
    return q, k, v, cu(q_lens), cu(kv_lens)


def packed_reference(q, k, v, cu_q, cu_k, scale, window=None, softcap=0.0):
    """Per sequence, SDPA-style math in float64 with bottom-right causal
    alignment: [Σq, H, D]."""
    group = q.shape[1] // k.shape[1]
    out = torch.zeros(q.shape[2], q.shape[1], q.shape[3], dtype=torch.float64)
    for b in range(len(cu_q) - 1):
        q0, q1, k0, k1 = int(cu_q[b]), int(cu_q[b + 1]), int(cu_k[b]), \
            int(cu_k[b + 1])
        if q1 == q0:
            continue
        qq = q[0, :, q0:q1].double()
        kk = k[0, :, k0:k1].double().repeat_interleave(group, 0)
        vv = v[0, :, k0:k1].double().repeat_interleave(group, 0)
        s = qq @ kk.transpose(1, 2) * scale
        if softcap:
            s = softcap * torch.tanh(s / softcap)
        pos = torch.arange(k1 - k0 - (q1 - q0), k1 - k0)[:, None]
        key = torch.arange(k1 - k0)[None, :]
        keep = key <= pos
        if window:
            keep &= key > pos - window
        s = s.masked_fill(~keep, float("-inf"))
        out[q0:q1] = (s.softmax(-1) @ vv).transpose(0, 1)
    return out


@pytest.mark.parametrize("window,softcap", [(None, None), (7, 20.0)])
def test_tailor_paged_matches_reference_on_packed_sequences(window, softcap):
    # prefill, decode at a page's last / first token, an empty query, a
    # chunk over a prefix, a long prompt
    q_lens, kv_lens = [37, 1, 1, 0, 5, 577], [37, 16, 17, 4, 40, 577]
    q, k, v, cu_q, cu_k = packed_step(q_lens, kv_lens)
    module = torch.nn.Module()
    out, weights = hf_tailor.tailor_paged_attention_forward(
        module, q, k, v, None, scaling=0.125, sliding_window=window,
        softcap=softcap, cu_seq_lens_q=cu_q, cu_seq_lens_k=cu_k,
        max_length_q=577, max_length_k=577)
    assert weights is None and out.shape == (1, sum(q_lens), 4, 64)
    ref = packed_reference(q, k, v, cu_q, cu_k, 0.125, window, softcap or 0)
    assert not torch.isnan(out).any()
    assert rel_err(out[0].float(), ref.float()) < 1e-2


def test_tailor_paged_refuses_what_it_cannot_serve():
    q, k, v, cu_q, cu_k = packed_step([3], [3])
    module = torch.nn.Module()
    with pytest.raises(NotImplementedError, match="continuous batching"):
        hf_tailor.tailor_paged_attention_forward(module, q, k, v, None)
    with pytest.raises(NotImplementedError, match="attention sinks"):
        hf_tailor.tailor_paged_attention_forward(
            module, q, k, v, None, s_aux=torch.zeros(4), cu_seq_lens_q=cu_q,
            cu_seq_lens_k=cu_k)


def greedy_choices_are_best_in_float32(model32, prompt, tokens, margin):
    """Each generated token's float32 logit (teacher-forced along the
    generated sequence) is within `margin` of that step's best: greedy bf16
    choices may break a near tie either way, never pick a worse token."""
    sequence = torch.tensor([prompt + tokens])
    with torch.no_grad():
        logits = model32(sequence).logits[0, len(prompt) - 1:-1].float()
    chosen = logits.gather(1, torch.tensor(tokens)[:, None])[:, 0]
    return bool((logits.max(-1).values - chosen <= margin).all())


def test_generate_batch_with_tailor_paged_and_tailor_experts():
    # A Qwen3-MoE with head_dim 64: continuous batching end to end, tailor's
    # attention and experts, and transformers' paged eager for comparison.
    config = transformers.Qwen3MoeConfig(
        vocab_size=97, hidden_size=128, intermediate_size=96,
        moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        head_dim=64, max_position_embeddings=256)
    torch.manual_seed(0)
    model = transformers.AutoModelForCausalLM.from_config(config)
    model = model.to(torch.bfloat16).eval()
    model32 = moe_routing.float32_copy(model)
    model32.set_attn_implementation("eager")
    generation = transformers.GenerationConfig(
        max_new_tokens=4, do_sample=False, eos_token_id=-1, pad_token_id=0)
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8] * 4, [9], list(range(10, 47))]
    for attention, experts in (("paged|eager", "eager"),
                               ("tailor_paged", "tailor")):
        model.set_attn_implementation(attention)
        model.set_experts_implementation(experts)
        before = launches()
        out = model.generate_batch(
            prompts, generation_config=generation, progress_bar=False,
            continuous_batching_config=transformers.ContinuousBatchingConfig(
                num_blocks=16, max_batch_tokens=64))
        assert (launches() > before) == (attention == "tailor_paged")
        assert model.config._attn_implementation == attention
        for prompt, request in zip(prompts, sorted(out)):
            tokens = out[request].generated_tokens
            assert len(tokens) == 4, (attention, out[request])
            assert greedy_choices_are_best_in_float32(model32, prompt,
                                                      tokens, 1e-2)


# ---- FP8 experts --------------------------------------------------------------


def fp8_experts_module(activation_scheme="dynamic", block=(128, 128)):
    """transformers' FP8Experts as replace_with_fp8_linear builds it, with
    bf16 weights quantized in 128 x 128 blocks (scale = amax / 448)."""
    fp8 = pytest.importorskip("transformers.integrations.finegrained_fp8")
    from transformers.integrations import moe as hf_moe
    config = transformers.MixtralConfig(hidden_size=256, intermediate_size=128,
                                        num_local_experts=4,
                                        num_experts_per_tok=2)
    config._experts_implementation = "tailor"
    cls = hf_moe.use_experts_implementation(
        experts_class=fp8.FP8Experts,
        experts_interface=fp8.ALL_FP8_EXPERTS_FUNCTIONS)
    module = cls(config=config, block_size=block,
                 activation_scheme=activation_scheme)
    g = torch.Generator().manual_seed(8)
    for name, (n, k) in (("gate_up_proj", (256, 256)),
                         ("down_proj", (256, 128))):
        w = torch.randn(4, n, k, generator=g) * 0.1
        blocks = w.reshape(4, n // 128, 128, k // 128, 128)
        scale = blocks.abs().amax((2, 4)) / 448
        q = (blocks / scale[:, :, None, :, None]).to(torch.float8_e4m3fn)
        getattr(module, name).data = q.reshape(4, n, k)
        getattr(module, name + "_scale_inv").data = scale
    return module


def fp8_reference(module, x, ids, weights):
    """float64 experts on the dequantized weights, activations quantized
    per token in 1 x 128 groups as tailor (and DeepSeek's recipe) does."""
    def dequantize(q, scale):
        e, n, k = q.shape
        return (q.double().reshape(e, n // 128, 128, k // 128, 128) *
                scale.double()[:, :, None, :, None]).reshape(e, n, k)

    def quantize(a):
        g = a.reshape(a.shape[0], -1, 128)
        s = g.abs().amax(-1, keepdim=True).clamp_min(1e-10) / 448
        return ((g / s).float().to(torch.float8_e4m3fn).double() * s
                ).reshape(a.shape)
    w13 = dequantize(module.gate_up_proj, module.gate_up_proj_scale_inv)
    w2 = dequantize(module.down_proj, module.down_proj_scale_inv)
    out = torch.zeros(x.shape, dtype=torch.float64)
    xq = quantize(x.double())
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            h = w13[ids[t, j]] @ xq[t]
            a = torch.nn.functional.silu(h[:128]) * h[128:]
            out[t] += float(weights[t, j]) * (
                w2[ids[t, j]] @ quantize(a[None].float().double())[0])
    return out


def test_fp8_experts_implementation_runs_tailor_block_fp8():
    module = fp8_experts_module()
    g = torch.Generator().manual_seed(9)
    x = torch.randn(33, 256, generator=g).bfloat16()
    weights, ids = torch.randn(33, 4, generator=g).softmax(-1).topk(2)
    before = launches()
    with torch.no_grad():
        out = module(x, ids, weights)
    assert launches() > before and out.dtype == torch.bfloat16
    assert not torch.isnan(out).any()
    ref = fp8_reference(module, x, ids, weights)
    assert rel_err(out.double(), ref) < 2e-2


def test_fp8_static_activations_fall_back_with_a_warning(caplog):
    module = fp8_experts_module(activation_scheme="static")
    hf_tailor._warned.clear()
    x = torch.randn(5, 256).bfloat16()
    weights, ids = torch.randn(5, 4).softmax(-1).topk(2)
    before = launches()
    try:
        with torch.no_grad():
            module(x, ids, weights)
    except Exception:  # noqa: BLE001  transformers' own FP8 kernels
        pass           # (Triton) may be missing on a CPU machine
    assert launches() == before
    assert any("activation_scheme 'static'" in r.getMessage()
               for r in caplog.records)
