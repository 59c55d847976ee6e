"""The examples in README.md (its ```python blocks; ```py blocks are excerpts) run
against the real sidecar (with its address and the test namespace put in)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def test_readme_has_examples() -> None:
    assert len(BLOCKS) >= 2


def test_readme_starts_with_a_ten_line_example() -> None:
    text = README.read_text(encoding="utf-8")
    first_fence = text.index("```")
    assert text[first_fence:].startswith("```python\n" + BLOCKS[0])
    assert text[:first_fence].count("\n") <= 2, "the example comes first, after the title"
    assert len(BLOCKS[0].strip().splitlines()) <= 10
    assert "SAFEWRITE_ADDRESS" in BLOCKS[0] and "sw.Client()" in BLOCKS[0]


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_example_runs(addr: str, namespace: str, index: int) -> None:
    code = BLOCKS[index].replace('"127.0.0.1:50051"', repr(addr)).replace(
        '"default"', repr(namespace)
    )
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=dict(os.environ)
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip(), "the example printed nothing"
