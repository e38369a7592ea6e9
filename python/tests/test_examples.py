"""The examples and the README's snippets: examples/python/* (the vLLM and
SGLang integrations) run and check themselves (torch only, CPU tensors);
every C++ snippet of README.md is an excerpt of the compiled example named
on its first line; every Python snippet runs."""

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples" / "python"
README = ROOT / "README.md"


def _snippets(language):
    """(line number, text) of every ```<language> block of README.md."""
    text = README.read_text()
    return [(text[:m.start()].count("\n") + 1, m.group(1))
            for m in re.finditer(rf"^```{re.escape(language)}\n(.*?)^```$",
                                 text, re.M | re.S)]


def _stripped_lines(text):
    return [line.strip() for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("name", ["vllm_fused_experts.py",
                                  "sglang_fused_moe.py"])
def test_example_runs(name):
    pytest.importorskip("torch", reason="torch not installed")
    result = subprocess.run([sys.executable, str(EXAMPLES / name)],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "stats:" in result.stdout


def test_readme_cxx_snippets_are_excerpts_of_compiled_examples():
    snippets = _snippets("c++")
    assert snippets, "README.md has no C++ snippet"
    built = (ROOT / "examples" / "CMakeLists.txt").read_text()
    for line, snippet in snippets:
        first, _, body = snippet.partition("\n")
        match = re.fullmatch(r"// (examples/[\w./]+\.cc)", first)
        assert match, (f"README.md:{line}: a C++ snippet opens with "
                       f"'// examples/<file>.cc', got {first!r}")
        source = ROOT / match.group(1)
        assert source.name in built, f"{source.name} is not built"
        want = _stripped_lines(body)
        have = _stripped_lines(source.read_text())
        found = any(have[i:i + len(want)] == want
                    for i in range(len(have) - len(want) + 1))
        assert found, (f"README.md:{line}: the snippet is not an excerpt of "
                       f"{match.group(1)} (copy it again from there)")


@pytest.mark.parametrize("line,snippet", _snippets("python"),
                         ids=lambda x: str(x) if isinstance(x, int) else "")
def test_readme_python_snippets_run(line, snippet):
    for module in re.findall(r"^import (\w+)", snippet, re.M):
        if module != "tailor":
            pytest.importorskip(module, reason=f"{module} not installed")
    result = subprocess.run([sys.executable, "-c", snippet],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, (f"README.md:{line}:\n" + result.stdout +
                                    result.stderr)
