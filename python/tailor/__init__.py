"""tailor: runtime JIT and specialization for ragged LLM serving, from Python.

A ctypes binding of tailor's C ABI (libtailor_c.so, tailor/c_api.h). Tensors
are numpy arrays, torch tensors or DLPack objects, viewed without copies;
errors raise tailor.Error subclasses carrying the C++ status text.

    import numpy as np, tailor
    rt = tailor.Runtime(backend="cpu")
    ws = tailor.moe.Workspace()
    tailor.moe.experts(rt, hidden, w13, w2, topk_weights, topk_ids, out, ws)
    print(tailor.stats(rt)["launches"])

torch custom ops (torch.ops.tailor.fused_experts, ...) are registered by
`import tailor.torch_ops`. tailor.integrations.transformers registers
"tailor" as a transformers experts implementation.
"""

from tailor._capi import lib as _lib
from tailor._errors import (Error, FailedPreconditionError, InternalError,
                            InvalidArgumentError, NotFoundError,
                            OutOfRangeError, ResourceExhaustedError,
                            UnavailableError, UnimplementedError)
from tailor._runtime import Runtime, runtime_for, stats
from tailor import attention, moe

__version__ = _lib.tailor_version().decode()
library_path = _lib.path

__all__ = [
    "Error", "FailedPreconditionError", "InternalError",
    "InvalidArgumentError", "NotFoundError", "OutOfRangeError",
    "ResourceExhaustedError", "Runtime", "UnavailableError",
    "UnimplementedError", "attention", "moe", "runtime_for", "stats",
]
