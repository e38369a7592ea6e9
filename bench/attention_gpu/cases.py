"""The cases of the ragged-attention GPU run: correctness (tailor only, awkward
sizes, every compiled variant kind) and timing (the ragged-attention shape list, beside
FlashInfer fa2 / fa3 and torch SDPA). A case is a dict; `id` names it uniquely.
"""
import numpy as np

MODELS = {"llama3-8b": (32, 8), "qwen3-30b": (32, 4)}


def _case(cid, q_lens, kv_lens, **kw):
    c = {"id": cid, "q_lens": [int(x) for x in q_lens], "kv_lens": [int(x) for x in kv_lens],
         "hq": 32, "hkv": 8, "d": 128, "page": 16, "dtype": "bf16", "causal": True,
         "window": -1, "cap": 0.0, "layout": "NHD", "poison": True, "bad_pages": 0,
         "shared_prefix": False, "strided_q": False, "check": "all"}
    c.update(kw)
    c["pack"] = c.get("pack") or min(c["hq"] // c["hkv"], 16)
    return c


def correctness_cases():
    """Small and awkward: every row checked, unused cache slots NaN."""
    awk_q = [0, 1, 127, 128, 129, 17, 577, 5, 1, 4, 31, 33]
    awk_kv = [0, 1, 127, 131, 1129, 1000, 577, 5, 9000, 300, 31, 2100]
    out = []
    for model, (hq, hkv) in MODELS.items():
        out.append(_case(f"awkward-causal-{model}", awk_q, awk_kv, hq=hq, hkv=hkv))
    out.append(_case("awkward-noncausal", awk_q, [0, 1, 50, 128, 129, 16, 600, 0, 3, 4, 5, 64],
                     causal=False))
    out.append(_case("f16-awkward", awk_q, awk_kv, dtype="f16"))
    out.append(_case("f16-qwen", awk_q, awk_kv, dtype="f16", hkv=4))
    for g, hkv in ((1, 32), (2, 16), (16, 2)):
        out.append(_case(f"group{g}", [1, 200, 129, 3], [700, 200, 400, 3], hq=32, hkv=hkv))
    for page in (8, 32, 64, 128, 256):
        out.append(_case(f"page{page}", [1, 300, 129, 0, 40], [1000, 300, 2000, 5, 40],
                         page=page))
    out.append(_case("d64", awk_q, awk_kv, d=64))
    out.append(_case("d256", awk_q, awk_kv, d=256))
    out.append(_case("d256-qwen", [1, 300, 129], [4000, 300, 700], d=256, hkv=4))
    out.append(_case("softcap30", awk_q, awk_kv, cap=30.0))
    out.append(_case("window100", awk_q, awk_kv, window=100))
    out.append(_case("window0", [1, 64, 200], [64, 64, 1000], window=0))
    out.append(_case("hnd-layout", awk_q, awk_kv, layout="HND"))
    out.append(_case("strided-q", awk_q, awk_kv, strided_q=True))
    out.append(_case("shared-prefix", [100, 100, 1, 1], [1100, 1100, 1050, 900],
                     shared_prefix=True))
    out.append(_case("bad-page-ids", [50, 1, 300], [500, 700, 900], bad_pages=3))
    out.append(_case("split-decode-32k", [1, 1, 2, 4], [32768, 20000, 100, 5000], hkv=4))
    out.append(_case("split-long-chunk", [64], [60000]))
    # One plan, two launches: prefill rows on the prefill kernel, the trailing
    # q_len 1 rows on the decode kernel (bf16, D 128, pages of 16).
    dec_kv = [1, 2, 15, 16, 17, 63, 64, 65, 577, 1000, 4097, 9000, 31, 127, 300, 5]
    for model, (hq, hkv) in MODELS.items():
        out.append(_case(f"split-mixed-{model}", [37, 129, 4] + [1] * len(dec_kv),
                         [1000, 129, 4000] + dec_kv, hq=hq, hkv=hkv, route="split"))
    out.append(_case("split-decode-only", [1] * 9, [1, 17, 64, 65, 3000, 129, 2, 5000, 31],
                     route="split"))
    out.append(_case("nopack-llama", [1, 129, 5], [300, 129, 70], pack=1))
    out.append(_case("pack2-llama", [1, 129, 5], [300, 129, 70], pack=2))
    return out


def _ragged():
    rng = np.random.default_rng(0)
    q = [int(x) for x in rng.integers(1, 2048, size=32, endpoint=True)]
    extra = [int(x) for x in rng.integers(0, 2048, size=32, endpoint=True)]
    return q, [a + b for a, b in zip(q, extra)]


def _mixed():
    rng = np.random.default_rng(1)
    decode = [int(x) for x in rng.integers(1, 8192, size=127, endpoint=True)]
    return [2048] + [1] * 127, [2048 + 30 * 1024] + decode


def perf_cases(quick=False):
    """The timing shapes (page 16, bf16); 'split' marks the mixed batch."""
    rq, rkv = _ragged()
    mq, mkv = _mixed()
    shapes = [
        ("B=1 q=kv=512", [512], [512]),
        ("B=1 q=kv=4096", [4096], [4096]),
        ("B=1 q=kv=16384", [16384], [16384]),
        ("B=8 q=kv=1024", [1024] * 8, [1024] * 8),
        ("B=16 q=512 kv=2048", [512] * 16, [2048] * 16),
        ("B=32 ragged", rq, rkv),
        ("mixed 2048/30k + 127 decode", mq, mkv),
    ]
    if quick:
        shapes = [shapes[1], shapes[2], shapes[4], shapes[6]]
    out = []
    for model, (hq, hkv) in MODELS.items():
        for name, q, kv in shapes:
            out.append(_case(f"{model} {name}", q, kv, hq=hq, hkv=hkv, poison=False,
                             check="sample", kind="mixed" if "mixed" in name else "prefill",
                             model=model, shape=name))
    for page in (128,):  # one box per chunk of D: the producer's TMA count
        out.append(_case(f"llama3-8b page{page} B=1 q=kv=16384", [16384], [16384],
                         page=page, poison=False, check="sample", kind="prefill",
                         model="llama3-8b", shape=f"page{page} B=1 q=kv=16384"))
    for d in () if quick else (64, 256):
        out.append(_case(f"llama3-8b d{d} B=8 q=kv=1024", [1024] * 8, [1024] * 8, d=d,
                         poison=False, check="sample", kind="prefill", model="llama3-8b",
                         shape=f"d{d} B=8 q=kv=1024"))
    return out


def decode_cases(quick=False):
    """The decode grid of the anchors README (q_len 1 rows through the same kernel)."""
    rng = np.random.default_rng(0)
    ragged = [int(x) for x in rng.integers(1, 8192, size=64, endpoint=True)]
    rng = np.random.default_rng(0)
    mixed = [16384] + [int(x) for x in rng.integers(1, 1024, size=127, endpoint=True)]
    grid = [("B=1 L=4096", [4096]), ("B=1 L=32768", [32768]), ("B=8 L=32768", [32768] * 8),
            ("B=32 L=1024", [1024] * 32), ("B=32 L=8192", [8192] * 32),
            ("B=128 L=1024", [1024] * 128), ("B=128 L=4096", [4096] * 128),
            ("B=256 L=2048", [2048] * 256), ("B=64 ragged U(1..8192)", ragged),
            ("B=128 1x16384+127xU(1..1024)", mixed)]
    if quick:
        grid = [grid[0], grid[3], grid[9]]
    out = []
    for model, (hq, hkv) in MODELS.items():
        for name, kv in grid:
            out.append(_case(f"decode {model} {name}", [1] * len(kv), kv, hq=hq, hkv=hkv,
                             poison=False, check="sample", kind="decode", model=model,
                             shape=name))
    return out


def sanitize_cases():
    """Small enough for compute-sanitizer: one awkward mixed batch with splits."""
    return [_case("sanitize-awkward", [1, 129, 17, 0, 3], [2000, 129, 600, 4, 3000], hkv=4,
                  poison=True),
            _case("sanitize-noncausal-d64", [5, 130], [0, 70], causal=False, d=64),
            _case("sanitize-split", [40, 1, 1, 1], [300, 5000, 17, 64], route="split")]


def ncu_case(shape=None):
    """Llama B=1 q=kv=4096, or the Llama perf or decode case named `shape` (its shape
    column; a decode shape as "decode B=128 L=4096")."""
    if shape:
        kind, _, name = shape.partition(" ") if shape.startswith("decode ") else ("", "", shape)
        pool = decode_cases() if kind else perf_cases()
        return next(c for c in pool if c["model"] == "llama3-8b" and c["shape"] == name)
    return _case("ncu llama3-8b B=1 q=kv=4096", [4096], [4096], poison=False, check="sample",
                 kind="prefill", model="llama3-8b", shape="B=1 q=kv=4096")
