"""tailor.integrations: drop-in entry points with other libraries' calling
conventions (flash_attn: FlashAttention's flash_attn_varlen_func)."""
