"""examples/python/*: the vLLM and SGLang integrations run and check
themselves (torch only, CPU tensors)."""

import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("torch")
EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


@pytest.mark.parametrize("name", ["vllm_fused_experts.py",
                                  "sglang_fused_moe.py"])
def test_example_runs(name):
    result = subprocess.run([sys.executable, str(EXAMPLES / name)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "stats:" in result.stdout
