"""Glue between tailor's ops and the frameworks users already run.

  tailor.integrations.transformers   "tailor" as a Hugging Face transformers
                                     experts implementation, "tailor_paged"
                                     as its continuous-batching attention
  tailor.integrations.vllm           drop-in for vLLM's fused_experts; an
                                     attention backend of vLLM v1's shape
  tailor.integrations.sglang         drop-in for SGLang's fused_experts; an
                                     attention backend of SGLang's shape
  tailor.integrations.flash_attn     FlashAttention's flash_attn_varlen_func
                                     (the arguments vLLM passes to FA3)

Each module imports its framework on import; this package imports none.
"""
