"""tailor in place of SGLang's unquantized fused MoE (torch only to import).

SGLang's Triton MoE runner calls
sglang.srt.layers.moe.fused_moe_triton.fused_moe.fused_experts:

    fused_experts(hidden_states, w1, w2, topk_output, moe_runner_config,
                  b1=None, b2=None, use_fp8_w8a8=False, ..., block_shape=None)

where topk_output is a StandardTopKOutput (topk_weights, topk_ids,
router_logits) and moe_runner_config a MoeRunnerConfig (activation,
inplace, no_combine, routed_scaling_factor, apply_router_weight_on_input,
...). make_fused_experts(sglang's) returns a function of that signature
that runs the unquantized bf16/f32 SiLU case on
torch.ops.tailor.fused_experts and hands everything else (quantized
weights, biases, no_combine, router weights on the input) to SGLang's own.
Install it where SGLang looks the name up:

    import sglang.srt.layers.moe.fused_moe_triton.fused_moe as sgl_fused_moe
    from tailor.integrations import sglang as tailor_sglang
    sgl_fused_moe.fused_experts = tailor_sglang.make_fused_experts(
        sgl_fused_moe.fused_experts)

SGLang captures CUDA graphs for decode batch sizes: call
tailor.torch_ops.reserve(...) for the largest one (and for chunked
prefill's token budget) before capture. examples/python/sglang_fused_moe.py
runs it end to end.
"""

import torch

import tailor.torch_ops

_DTYPES = (torch.bfloat16, torch.float32)


def _quantized(quant_args):
    return any(v is not None and v is not False for v in quant_args.values())


def make_fused_experts(sglang_fused_experts):
    """SGLang's fused_experts signature on tailor; `sglang_fused_experts`
    runs the calls tailor does not serve."""

    def fused_experts(hidden_states, w1, w2, topk_output, moe_runner_config,
                      b1=None, b2=None, **quant_args):
        cfg = moe_runner_config
        supported = (cfg.activation == "silu" and not cfg.no_combine
                     and not cfg.apply_router_weight_on_input
                     and b1 is None and b2 is None
                     and not _quantized(quant_args)
                     and hidden_states.dtype in _DTYPES)
        if not supported:
            return sglang_fused_experts(hidden_states, w1, w2, topk_output,
                                        moe_runner_config, b1, b2,
                                        **quant_args)
        topk_weights, topk_ids = topk_output[0], topk_output[1]
        if cfg.routed_scaling_factor not in (None, 1.0):
            topk_weights = topk_weights * cfg.routed_scaling_factor
        return tailor.torch_ops.fused_experts(
            hidden_states, w1, w2, topk_weights, topk_ids,
            inplace=cfg.inplace, activation="silu")

    return fused_experts


# ---- attention backend -------------------------------------------------------
#
# The shape of an SGLang attention backend (python/sglang/srt/layers/
# attention/base_attn_backend.py: AttentionBackend; flashattention_backend.py
# builds its page table the same way) on tailor's ragged attention, with
# torch alone: TailorAttnBackend(model_runner) takes what SGLang's
# ModelRunner carries (model_config, tp_size, dtype, page_size, device,
# req_to_token_pool, server_args, sliding_window_size) and
#
#   init_forward_metadata(forward_batch)   plans the step (host work from
#       seq_lens_cpu and extend_seq_lens_cpu) and gathers the page table
#       req_to_token[req_pool_indices, ::page_size] // page_size
#   forward_extend / forward_decode(q, k, v, layer, forward_batch,
#       save_kv_cache=True)   write k / v through the pool's set_kv_buffer
#       at out_cache_loc and run the plan over the pool's buffers viewed as
#       pages [slots / page_size, page_size, Hkv, D]
#   init_cuda_graph_state(max_bs, max_num_tokens), then per decode batch
#       size init_forward_metadata_capture_cuda_graph(...) and, before each
#       replay, init_forward_metadata_replay_cuda_graph(...): the graph
#       captures the KV write and the run over persistent page-table and
#       length buffers; each replay plans outside the graph and refills
#       them (padded sequences have length 1, SGLang's fill value)
#
# Decode and extend (prefill, chunked prefill over a cached prefix) are
# served; speculative verify / draft modes, cross attention and a KV cache
# in another dtype than q raise NotImplementedError naming what is asked.
# tailor's CUDA kernels take pages of 8..256 tokens (SGLang --page-size 16,
# say); the CPU backend takes any page size, 1 included.

import types  # noqa: E402

from tailor.integrations import _paged  # noqa: E402


def _window_left(window):
    # SGLang's sliding_window_size counts the keys left of the query.
    return -1 if window is None or window < 0 else int(window)


class TailorAttnBackend:
    """SGLang's AttentionBackend interface on tailor."""

    def __init__(self, model_runner, skip_prefill=False):
        config, tp = model_runner.model_config, model_runner.tp_size
        self.page_size = int(model_runner.page_size)
        self.device = torch.device(model_runner.device)
        self.req_to_token = model_runner.req_to_token_pool.req_to_token
        self.layer = dict(
            num_qo_heads=config.num_attention_heads // tp,
            num_kv_heads=config.get_num_kv_heads(tp),
            head_dim=config.head_dim, page_size=self.page_size,
            dtype=model_runner.dtype, causal=True,
            window_left=_window_left(
                getattr(model_runner, "sliding_window_size", None)))
        args = model_runner.server_args
        self.max_batch = model_runner.req_to_token_pool.size
        self.max_tokens = max(args.chunked_prefill_size or 0,
                              args.max_prefill_tokens or 0)
        self.forward_metadata = None
        self.graph = None

    # -- metadata -------------------------------------------------------------

    def _page_table(self, req_pool_indices, max_len, out=None):
        table = self.req_to_token[req_pool_indices.long(), :max_len]
        table = (table[:, ::self.page_size] // self.page_size).to(torch.int32)
        if out is None:
            return table
        out[:, :table.shape[1]].copy_(table)
        return out

    def _plan(self, q_lens, seq_lens_cpu, page_table, seq_lens):
        cu_q = torch.zeros(len(q_lens) + 1, dtype=torch.int32)
        cu_q[1:] = torch.as_tensor(q_lens, dtype=torch.int32).cumsum(0)
        host_lens = seq_lens_cpu.to(torch.int32)
        metadata = types.SimpleNamespace(page_table=page_table,
                                         seq_lens=seq_lens, plan_id=None)

        def replan():
            metadata.plan_id = _paged.plan(cu_q, host_lens, self.layer,
                                           self.device, self.max_batch,
                                           self.max_tokens)

        metadata.replan = replan
        replan()
        self.forward_metadata = metadata

    def _q_lens(self, forward_batch):
        mode = forward_batch.forward_mode
        if mode.is_decode_or_idle():
            return [1] * forward_batch.batch_size
        if mode.is_extend() and not (mode.is_target_verify() or
                                     mode.is_draft_extend()):
            return list(forward_batch.extend_seq_lens_cpu)
        raise NotImplementedError(
            f"tailor: TailorAttnBackend: forward mode {mode!r} is not "
            f"supported (decode and extend only)")

    def init_forward_metadata(self, forward_batch):
        if forward_batch.forward_mode.is_idle():
            self.forward_metadata = None
            return
        seq_lens_cpu = forward_batch.seq_lens_cpu
        max_len = int(seq_lens_cpu.max()) if len(seq_lens_cpu) else 0
        table = self._page_table(forward_batch.req_pool_indices, max_len)
        self._plan(self._q_lens(forward_batch), seq_lens_cpu, table,
                   forward_batch.seq_lens.to(torch.int32))

    # -- CUDA graphs (decode) ---------------------------------------------------

    def init_cuda_graph_state(self, max_bs, max_num_tokens, kv_indices_buf=None):
        pages = -(-self.req_to_token.shape[1] // self.page_size)
        self.graph = types.SimpleNamespace(
            page_table=torch.zeros((max_bs, pages), dtype=torch.int32,
                                   device=self.device),
            seq_lens=torch.ones(max_bs, dtype=torch.int32,
                                device=self.device))
        self.max_batch = max(self.max_batch, max_bs)
        self.max_tokens = max(self.max_tokens, max_num_tokens)

    def _graph_metadata(self, bs, req_pool_indices, seq_lens, seq_lens_cpu,
                        forward_mode):
        if not forward_mode.is_decode_or_idle():
            raise NotImplementedError(
                f"tailor: TailorAttnBackend: CUDA graphs of forward mode "
                f"{forward_mode!r} are not supported (decode only)")
        g = self.graph
        g.seq_lens[:bs].copy_(seq_lens[:bs])
        max_len = max(int(seq_lens_cpu[:bs].max()), 1)
        self._page_table(req_pool_indices[:bs], max_len, g.page_table[:bs])
        self._plan([1] * bs, seq_lens_cpu[:bs], g.page_table[:bs],
                   g.seq_lens[:bs])

    def init_forward_metadata_capture_cuda_graph(
            self, bs, num_tokens, req_pool_indices, seq_lens, encoder_lens,
            forward_mode, spec_info):
        self._graph_metadata(bs, req_pool_indices, seq_lens,
                             seq_lens.cpu(), forward_mode)

    def init_forward_metadata_replay_cuda_graph(
            self, bs, req_pool_indices, seq_lens, seq_lens_sum, encoder_lens,
            forward_mode, spec_info, seq_lens_cpu=None):
        if seq_lens_cpu is None:
            seq_lens_cpu = seq_lens.cpu()
        self._graph_metadata(bs, req_pool_indices, seq_lens, seq_lens_cpu,
                             forward_mode)

    def get_cuda_graph_seq_len_fill_value(self):
        return 1

    # -- forward ----------------------------------------------------------------

    def forward(self, q, k, v, layer, forward_batch, save_kv_cache=True,
                **kwargs):
        if forward_batch.forward_mode.is_idle():
            return q.new_empty(q.shape[0],
                               layer.tp_q_head_num * layer.v_head_dim)
        if forward_batch.forward_mode.is_decode():
            return self.forward_decode(q, k, v, layer, forward_batch,
                                       save_kv_cache)
        return self.forward_extend(q, k, v, layer, forward_batch,
                                   save_kv_cache)

    def forward_extend(self, q, k, v, layer, forward_batch,
                       save_kv_cache=True):
        return self._attend(q, k, v, layer, forward_batch, save_kv_cache,
                            "forward_extend")

    def forward_decode(self, q, k, v, layer, forward_batch,
                       save_kv_cache=True):
        return self._attend(q, k, v, layer, forward_batch, save_kv_cache,
                            "forward_decode")

    def _attend(self, q, k, v, layer, forward_batch, save_kv_cache, caller):
        self._check_layer(layer, q)
        pool = forward_batch.token_to_kv_pool
        if k is not None and save_kv_cache:
            pool.set_kv_buffer(layer, forward_batch.out_cache_loc, k, v)
        heads, dim = layer.tp_q_head_num, layer.head_dim
        pages = (-1, self.page_size, layer.tp_k_head_num, dim)
        key_cache = pool.get_key_buffer(layer.layer_id).view(pages)
        value_cache = pool.get_value_buffer(layer.layer_id).view(pages)
        q = q.reshape(-1, heads, dim)
        out = q.new_empty(q.shape[0], heads, layer.v_head_dim)
        m = self.forward_metadata
        _paged.run(q, key_cache, value_cache, m.page_table, m.seq_lens, out,
                   plan_id=m.plan_id, replan=m.replan,
                   sm_scale=float(layer.scaling),
                   logits_soft_cap=float(layer.logit_cap or 0.0),
                   caller=f"TailorAttnBackend.{caller}")
        return out.view(-1, heads * layer.v_head_dim)

    def _check_layer(self, layer, q):
        asked = (
            (getattr(layer, "is_cross_attention", False), "cross attention"),
            (layer.v_head_dim != layer.head_dim,
             f"v_head_dim {layer.v_head_dim} != head_dim {layer.head_dim}"),
            (_window_left(getattr(layer, "sliding_window_size", -1)) !=
             self.layer["window_left"], "a per-layer sliding window"),
            (q.dtype != self.layer["dtype"],
             f"q dtype {q.dtype} (the KV cache is {self.layer['dtype']})"))
        for bad, what in asked:
            if bad:
                raise NotImplementedError(
                    f"tailor: TailorAttnBackend: {what} is not supported")
