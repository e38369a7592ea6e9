"""tailor in place of vLLM's unquantized fused MoE (torch only to import).

vLLM's unquantized MoE layer (UnquantizedFusedMoEMethod) ends in
vllm.model_executor.layers.fused_moe.fused_moe.fused_experts:

    fused_experts(hidden_states, w1, w2, topk_weights, topk_ids,
                  inplace=False, activation="silu",
                  apply_router_weight_on_input=False,
                  global_num_experts=-1, expert_map=None, **quant_args)

with w1 = layer.w13_weight [E, 2I, H] (gate rows, then up), w2 =
layer.w2_weight [E, H, I], topk_* from FusedMoE.select_experts [T, k], and
expert_map [E_global] (global -> local id, -1 elsewhere) under expert
parallelism. make_fused_experts(vllm's) returns a function of that
signature that runs the unquantized bf16/f32 SiLU case on
torch.ops.tailor.fused_experts and hands everything else (fp8, int8,
other activations, router weights on the input) to vLLM's own. Install it
in every module that imported the name, e.g. from a plugin
(vllm.general_plugins entry point):

    import vllm.model_executor.layers.fused_moe.fused_moe as vllm_fused_moe
    from tailor.integrations import vllm as tailor_vllm
    vllm_fused_moe.fused_experts = tailor_vllm.make_fused_experts(
        vllm_fused_moe.fused_experts)

tailor's ops are torch custom ops with fake implementations, so they run
inside vLLM's torch.compile graphs and its captured CUDA graphs; call
tailor.torch_ops.reserve(...) with max_num_batched_tokens at model load so
the workspace never grows during capture. examples/python/
vllm_fused_experts.py runs it end to end.
"""

import torch

import tailor.torch_ops

_DTYPES = (torch.bfloat16, torch.float32)


def make_fused_experts(vllm_fused_experts):
    """vLLM's fused_experts signature on tailor; `vllm_fused_experts` runs
    the calls tailor does not serve."""

    def fused_experts(hidden_states, w1, w2, topk_weights, topk_ids,
                      inplace=False, activation="silu",
                      apply_router_weight_on_input=False,
                      global_num_experts=-1, expert_map=None, **quant_args):
        supported = (activation == "silu" and not apply_router_weight_on_input
                     and not any(quant_args.values())
                     and hidden_states.dtype in _DTYPES)
        if not supported:
            return vllm_fused_experts(
                hidden_states, w1, w2, topk_weights, topk_ids,
                inplace=inplace, activation=activation,
                apply_router_weight_on_input=apply_router_weight_on_input,
                global_num_experts=global_num_experts, expert_map=expert_map,
                **quant_args)
        return tailor.torch_ops.fused_experts(
            hidden_states, w1, w2, topk_weights, topk_ids, inplace=inplace,
            activation=activation, global_num_experts=global_num_experts,
            expert_map=expert_map)

    return fused_experts


# ---- attention backend -------------------------------------------------------
#
# The shape of a vLLM v1 attention backend (vllm/v1/attention/backends/
# flash_attn.py: FlashAttentionBackend, FlashAttentionMetadata,
# FlashAttentionMetadataBuilder, FlashAttentionImpl; the builder's input is
# vllm/v1/attention/backends/utils.py: CommonAttentionMetadata), on tailor's
# ragged attention, with torch alone:
#
#   TailorAttentionBackend.get_kv_cache_shape(num_blocks, block_size,
#       num_kv_heads, head_size) -> (2, num_blocks, block_size, Hkv, D),
#       FlashAttention's layout (keys, then values; NHD pages)
#   TailorAttentionMetadataBuilder(kv_cache_spec, layer_names, vllm_config,
#       device).build(common_prefix_len, common_attn_metadata) plans the
#       step on the host from query_start_loc_cpu and seq_lens_cpu (no
#       device sync), reserving the workspace for the scheduler's
#       max_num_seqs / max_num_batched_tokens and the largest CUDA graph
#       capture size, so that capture never allocates
#   TailorAttentionImpl.forward(layer, query, key, value, kv_cache,
#       attn_metadata, output) writes key / value at slot_mapping (-1:
#       padding) and runs the plan into `output` (accept_output_buffer)
#
# The builder serves CUDA graphs of any batch (cudagraph_support ALWAYS,
# CudaGraphSupport below mirroring vLLM's AttentionCGSupport names): the
# graph captures the KV write and the run; each step's build() plans
# outside the graph into the same workspace, and the captured run reads
# the step's block_table and seq_lens from vLLM's persistent buffers. A
# plugin registering this backend maps the class attributes onto vLLM's
# own enum and base classes; this module does not import vLLM.
# Not served (NotImplementedError naming the argument): ALiBi, attention
# sinks, FP8 KV caches, encoder-decoder cross attention, cascade attention
# (use_cascade_attention() is False, so vLLM never asks for it).

import dataclasses  # noqa: E402
import enum  # noqa: E402
from typing import Optional  # noqa: E402

from tailor._errors import invalid_argument  # noqa: E402
from tailor.integrations import _paged  # noqa: E402


class CudaGraphSupport(enum.IntEnum):
    """vLLM's AttentionCGSupport levels, by name and value."""
    NEVER = 0
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    UNIFORM_BATCH = 2
    ALWAYS = 3


@dataclasses.dataclass
class TailorAttentionMetadata:
    """FlashAttentionMetadata's fields that tailor reads, plus the plan."""
    num_actual_tokens: int
    max_query_len: int
    query_start_loc: torch.Tensor   # [B + 1] int32, device
    max_seq_len: int
    seq_lens: torch.Tensor          # [B] int32, device (new tokens included)
    block_table: torch.Tensor       # [B, max_blocks] int32
    slot_mapping: torch.Tensor      # [num_tokens] int64, -1 for padding
    causal: bool
    plan_id: int                    # tailor.torch_ops.ragged_plans_made()
    replan: object                  # plans this step again (same metadata)


class TailorAttentionMetadataBuilder:
    """build() plans the step; one builder per KV cache group (layer
    shape), as vLLM makes them."""

    cudagraph_support = CudaGraphSupport.ALWAYS
    reorder_batch_threshold: Optional[int] = None

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        model = vllm_config.model_config
        window = getattr(kv_cache_spec, "sliding_window", None)
        self.layer = dict(
            num_qo_heads=model.get_num_attention_heads(
                vllm_config.parallel_config),
            num_kv_heads=kv_cache_spec.num_kv_heads,
            head_dim=kv_cache_spec.head_size,
            page_size=kv_cache_spec.block_size, dtype=kv_cache_spec.dtype,
            window_left=window - 1 if window else -1)
        self.layer_names = list(layer_names)
        self.device = torch.device(device)
        scheduler = vllm_config.scheduler_config
        capture = getattr(vllm_config.compilation_config,
                          "cudagraph_capture_sizes", None) or [0]
        self.max_batch = max(scheduler.max_num_seqs, max(capture))
        self.max_tokens = max(scheduler.max_num_batched_tokens, max(capture))

    def build(self, common_prefix_len, common_attn_metadata,
              fast_build=False):
        m = common_attn_metadata
        layer = dict(self.layer, causal=bool(getattr(m, "causal", True)))

        def plan():
            return _paged.plan(m.query_start_loc_cpu, m.seq_lens_cpu, layer,
                               self.device, self.max_batch, self.max_tokens)

        metadata = TailorAttentionMetadata(
            num_actual_tokens=m.num_actual_tokens,
            max_query_len=m.max_query_len,
            query_start_loc=m.query_start_loc, max_seq_len=m.max_seq_len,
            seq_lens=m.seq_lens, block_table=m.block_table_tensor,
            slot_mapping=m.slot_mapping, causal=layer["causal"],
            plan_id=plan(), replan=None)

        def replan():
            metadata.plan_id = plan()

        metadata.replan = replan
        return metadata

    def build_for_cudagraph_capture(self, common_attn_metadata):
        return self.build(0, common_attn_metadata)

    def use_cascade_attention(self, *args, **kwargs):
        return False


class TailorAttentionImpl:
    """FlashAttentionImpl's constructor and forward on tailor."""

    def __init__(self, num_heads, head_size, scale, num_kv_heads,
                 alibi_slopes, sliding_window, kv_cache_dtype,
                 logits_soft_cap=None, attn_type="decoder",
                 kv_sharing_target_layer_name=None, sinks=None):
        for name, value in (("alibi_slopes", alibi_slopes),
                            ("sinks", sinks)):
            if value is not None:
                raise NotImplementedError(
                    f"tailor: TailorAttentionImpl: {name} is not supported")
        if kv_cache_dtype not in ("auto", "bfloat16", "float16"):
            raise NotImplementedError(
                f"tailor: TailorAttentionImpl: kv_cache_dtype "
                f"{kv_cache_dtype!r}: only the model's dtype ('auto')")
        if str(getattr(attn_type, "value", attn_type)).lower() not in (
                "decoder", "encoder_only"):
            raise NotImplementedError(
                f"tailor: TailorAttentionImpl: attn_type {attn_type!r}: "
                f"decoder and encoder-only self-attention only")
        self.num_heads, self.head_size = num_heads, head_size
        self.num_kv_heads, self.scale = num_kv_heads, float(scale)
        self.sliding_window = sliding_window
        self.logits_soft_cap = float(logits_soft_cap or 0.0)
        self.kv_sharing_target_layer_name = kv_sharing_target_layer_name

    def forward(self, layer, query, key, value, kv_cache, attn_metadata,
                output=None, output_scale=None, output_block_scale=None):
        """query [N, Hq, D], key / value [N, Hkv, D], kv_cache [2, blocks,
        block_size, Hkv, D], output [N, Hq, D] (rows past the step's tokens
        untouched) -> output."""
        if output is None:
            raise invalid_argument("output: required (the backend accepts "
                                   "vLLM's output buffer)")
        if output_scale is not None or output_block_scale is not None:
            raise NotImplementedError(
                "tailor: TailorAttentionImpl: quantized output is not "
                "supported")
        if attn_metadata is None:  # vLLM's profiling run
            return output.fill_(0)
        key_cache, value_cache = kv_cache.unbind(0)
        if self.kv_sharing_target_layer_name is None and key is not None:
            _paged.write_kv(key_cache, value_cache,
                            attn_metadata.slot_mapping, key, value)
        _paged.run(query, key_cache, value_cache, attn_metadata.block_table,
                   attn_metadata.seq_lens, output,
                   plan_id=attn_metadata.plan_id,
                   replan=attn_metadata.replan, sm_scale=self.scale,
                   logits_soft_cap=self.logits_soft_cap,
                   caller="TailorAttentionImpl.forward")
        return output


class TailorAttentionBackend:
    """vLLM's AttentionBackend static interface for tailor."""

    accept_output_buffer = True
    supported_dtypes = [torch.bfloat16, torch.float16]

    @staticmethod
    def get_name():
        return "TAILOR"

    @staticmethod
    def get_impl_cls():
        return TailorAttentionImpl

    @staticmethod
    def get_metadata_cls():
        return TailorAttentionMetadata

    @staticmethod
    def get_builder_cls():
        return TailorAttentionMetadataBuilder

    @staticmethod
    def get_kv_cache_shape(num_blocks, block_size, num_kv_heads, head_size,
                           cache_dtype_str="auto"):
        return (2, num_blocks, block_size, num_kv_heads, head_size)

    @staticmethod
    def get_kv_cache_stride_order():
        return (0, 1, 2, 3, 4)
