"""bench/fp8/fp8_selftest.py — the GPU harness tested without a GPU: the
driver (fp8_runner.py) runs the small correctness suite and one bench point
on the CPU stand-in (fp8_fake.py) with faults injected into four kernels,
and this checks that each fault costs exactly what it should:

  128_silu raises a CUDA error  its cases FAIL, then SKIP; 128_quant is judged
                                against fp64 alone and passes
  64_plain computes 2 % off     its cases FAIL, the others run
  64_quant kills the process    CRASH twice, then SKIP
  s32_silu hangs                TIMEOUT once, then SKIP; s32_quant passes
and every other case passes, and the bench point has tailor's times.

  FP8_SELFTEST_PYTHON=/path/to/python-with-torch python3 fp8_selftest.py
(a few minutes on two cores; needs torch, CPU build suffices).
"""
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FAULTS = "128_silu:raise,64_plain:wrong,64_quant:crash,s32_silu:hang"
EXPECT = {  # kernel -> statuses its cases may end with
    "128 silu": {"FAIL", "SKIP"}, "64 plain": {"FAIL"},
    "64 quant": {"CRASH", "SKIP"}, "s32 silu": {"TIMEOUT", "SKIP"},
}


def main():
    python = os.environ.get("FP8_SELFTEST_PYTHON", sys.executable)
    out = tempfile.mkdtemp(prefix="fp8_selftest_")
    env = dict(os.environ, FP8_FAKE="1", FP8_FAKE_FAULT=FAULTS)
    subprocess.run([python, os.path.join(HERE, "fp8_runner.py"), "--out", out,
                    "--small", "--models", "qwen3_30b_a3b", "--tokens", "1",
                    "--budget", "600"], env=env, check=True)
    with open(os.path.join(out, "checks.json")) as f:
        checks = json.load(f)
    problems = []
    for case, (status, detail) in checks.items():
        parts = case.split(":")
        kernel = f"{parts[1]} {parts[2]}" if parts[0] == "gemm" else parts[0]
        allowed = EXPECT.get(kernel, {"PASS"})
        if status not in allowed:
            problems.append(f"{case}: {status} {detail[:120]}")
    with open(os.path.join(out, "bench.json")) as f:
        bench = json.load(f)
    rows = bench["rows"]
    if not rows or "gate_up_tailor_ms" not in rows[0]:
        problems.append(f"bench: no tailor times in {rows}")
    print("\n".join(problems) or f"selftest: ALL AS EXPECTED ({out})")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
