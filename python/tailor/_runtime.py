"""tailor.Runtime: one backend and kernel cache, over tailor_runtime."""

import ctypes
import itertools
import json
import os
import threading
import weakref

from tailor import _capi
from tailor._capi import lib
from tailor._errors import check, invalid_argument


def _jit_mode_value(jit_mode):
    """tailor_jit_mode of a Runtime(jit_mode=...) argument."""
    if jit_mode is None:
        return 0  # TAILOR_JIT_MODE_DEFAULT: $TAILOR_JIT_MODE, else blocking
    if isinstance(jit_mode, str) and jit_mode in _capi.JIT_MODES:
        return _capi.JIT_MODES[jit_mode]
    raise invalid_argument(
        f"jit_mode: must be 'blocking', 'background' or None "
        f"($TAILOR_JIT_MODE, else blocking), got {jit_mode!r}")


class Runtime:
    """A tailor runtime (tailor::Runtime): a backend, its kernel cache and
    stats. Thread-safe. Create one per device, or use runtime_for(device).

    Args mirror tailor::Runtime::Options: backend "auto" | "cpu" | "cuda";
    device_index; cache_dir (None: $TAILOR_CACHE_DIR, else the user cache);
    disable_disk_cache; disable_jit (a missing kernel is an error, not a
    compile); memory_cache_capacity (0: default); compile_threads and
    cpu_threads (0: hardware threads); log_level (None: $TAILOR_LOG_LEVEL);
    stats_addr ("host:port": serve /metrics, /stats, /healthz there; None:
    $TAILOR_STATS_ADDR, else no endpoint; see .stats_address); jit_mode
    ("blocking": a call waits for the kernel it needs to compile;
    "background": it runs at once on its op family's generic kernel while
    the specialized one compiles (CPU MoE and paged decode); None:
    $TAILOR_JIT_MODE, else blocking; see .jit_mode for the mode in use).
    Raises tailor.InvalidArgumentError / UnavailableError.
    """

    def __init__(self, backend="auto", device_index=0, cache_dir=None,
                 disable_disk_cache=False, disable_jit=False,
                 memory_cache_capacity=0, compile_threads=0, cpu_threads=0,
                 log_level=None, stats_addr=None, jit_mode=None):
        if backend not in _capi.BACKENDS:
            raise invalid_argument(f"backend: must be one of "
                                   f"{sorted(_capi.BACKENDS)}, got "
                                   f"{backend!r}")
        options = _capi.RuntimeOptions(
            backend=_capi.BACKENDS[backend], device_index=device_index,
            cache_dir=cache_dir.encode() if cache_dir else None,
            disable_disk_cache=int(disable_disk_cache),
            disable_jit=int(disable_jit),
            memory_cache_capacity=memory_cache_capacity,
            compile_threads=compile_threads, cpu_threads=cpu_threads,
            log_level=log_level.encode() if log_level else None,
            stats_addr=stats_addr.encode() if stats_addr else None,
            jit_mode=_jit_mode_value(jit_mode))
        handle = ctypes.c_void_p()
        check(lib.tailor_runtime_create(ctypes.byref(options),
                                        ctypes.byref(handle)))
        self._handle = handle.value
        self._as_parameter_ = self._handle  # pass a Runtime where void* goes
        _register(self)
        info = _capi.RuntimeInfo()
        check(lib.tailor_runtime_get_info(self._handle, ctypes.byref(info)))
        self.backend = _capi.BACKEND_NAMES[info.backend]
        self.device_type = {0: "cpu", 1: "cuda", 2: "hip"}[info.device_type]
        self.device_index = info.device_index
        self.arch = info.arch.decode()
        self.cache_dir = info.cache_dir.decode()
        # Where the stats endpoint listens ("127.0.0.1:9464"); "" for none.
        self.stats_address = info.stats_address.decode()
        # "blocking" or "background": the option, else $TAILOR_JIT_MODE.
        self.jit_mode = _capi.JIT_MODE_NAMES[info.jit_mode]

    @property
    def device(self):
        """"cpu", "cuda:0", ...: where op tensors must live."""
        if self.device_type == "cpu":
            return "cpu"
        return f"{self.device_type}:{self.device_index}"

    def _stats_text(self, format):
        text = ctypes.c_void_p()
        check(lib.tailor_runtime_stats(self._handle, format,
                                       ctypes.byref(text)))
        try:
            return ctypes.string_at(text.value).decode()
        finally:
            lib.tailor_string_free(text)

    def stats(self):
        """The counters and histograms now, as a dict (StatsSnapshot)."""
        return json.loads(self._stats_text(_capi.STATS_JSON))

    def stats_prometheus(self):
        """The same snapshot in the Prometheus text exposition format."""
        return self._stats_text(_capi.STATS_PROMETHEUS)

    def close(self):
        if getattr(self, "_handle", None):
            _live.pop(self._serial, None)
            lib.tailor_runtime_destroy(self._handle)
            self._handle = None

    def __del__(self):
        self.close()

    def __repr__(self):
        return (f"tailor.Runtime(backend={self.backend!r}, "
                f"device={self.device!r}, arch={self.arch!r})")


_runtimes = {}
_runtimes_lock = threading.Lock()

# Every open Runtime of the process, by creation order, for tailor.stats().
_live = {}
_serials = itertools.count()


def _register(runtime):
    runtime._serial = next(_serials)
    _live[runtime._serial] = weakref.ref(runtime)


def runtime_for(device="cpu", **options):
    """The process's shared Runtime for `device` ("cpu", "cuda:1", or a
    torch.device), created on first use with `options`. The torch ops and
    tailor.stats() use these."""
    key = str(device)
    if key == "cuda":
        key = "cuda:0"
    runtime = _runtimes.get(key)
    if runtime is not None:
        return runtime
    with _runtimes_lock:
        runtime = _runtimes.get(key)
        if runtime is None:
            kind, _, index = key.partition(":")
            if kind not in ("cpu", "cuda"):
                raise invalid_argument(
                    f"device: must be 'cpu' or 'cuda[:N]', got {device!r}")
            # Quiet by default: a library inside a server logs warnings.
            options.setdefault(
                "log_level", os.environ.get("TAILOR_LOG_LEVEL") or "warn")
            runtime = Runtime(backend=kind, device_index=int(index or 0),
                              **options)
            _runtimes[key] = runtime
    return runtime


def _named_runtimes():
    """{name: Runtime} over every open runtime: the shared ones of
    runtime_for() by their device ("cpu", "cuda:0"), then the others by
    device in creation order, "#2", "#3", ... added to a name already
    taken, as the stats endpoint names them."""
    with _runtimes_lock:
        named = dict(_runtimes)
    shared = {id(rt) for rt in named.values()}
    for serial in sorted(list(_live)):
        ref = _live.get(serial)
        runtime = ref() if ref is not None else None
        if runtime is None or id(runtime) in shared or not runtime._handle:
            continue
        name, n = runtime.device, 2
        while name in named:
            name, n = f"{runtime.device}#{n}", n + 1
        named[name] = runtime
    return named


def stats(runtime=None):
    """A runtime's stats snapshot as a dict. Without `runtime`: a dict
    {name: snapshot} over every open runtime of the process, the shared
    ones of runtime_for() and those created with tailor.Runtime(...),
    named by device ("cpu", "cuda:0"; "cpu#2" for a second CPU runtime)."""
    if runtime is not None:
        return runtime.stats()
    return {name: rt.stats() for name, rt in _named_runtimes().items()}
