"""README.md as a newcomer uses it: its install commands run as written in a new
virtualenv, and its examples (its ```python blocks; ```py blocks are excerpts) run
against the real sidecar (with its address and the test namespace put in)."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Tuple

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
REPO_ROOT = README.parents[2]
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), re.S)
INSTALL = re.search(
    r"<!-- begin: install\b[^>]*-->\s*```sh\n(.*?)```\s*<!-- end: install -->",
    README.read_text(encoding="utf-8"),
    re.S,
)

#: What the installed client must do with no sidecar and no SAFEWRITE_ADDRESS: import
#: from the virtualenv (not the checkout), with its extras, and read the proto's retry
#: advice with the protobuf installed there.
INSTALLED_CHECK = """
import os, sys
import grpc
import safewrite_client as sw
import safewrite_client.kopf, opentelemetry.propagate
from safewrite_client.v1 import writer_pb2

assert sw.__file__.startswith(sys.prefix), sw.__file__
assert "SAFEWRITE_ADDRESS" not in os.environ
assert sw.default_target() == "127.0.0.1:50051", sw.default_target()
assert writer_pb2.REASON_CIRCUIT_OPEN in sw.RETRYABLE_REASONS
lost = writer_pb2.REASON_WRITE_OUTCOME_UNKNOWN
assert not sw.is_retryable(grpc.StatusCode.UNKNOWN, lost)
assert sw.is_retryable(grpc.StatusCode.UNKNOWN, lost, idempotent=True)
print("installed", sw.__version__, "at", os.path.dirname(sw.__file__))
"""


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


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Tuple[Path, Dict[str, str]]:
    """A new virtualenv, that sees no other packages, in which the install block's
    commands ran as written from the repository root: its directory, and the
    environment of a newcomer's shell in it (no SAFEWRITE_ADDRESS)."""
    assert INSTALL, "README.md has no <!-- begin: install --> sh block <!-- end: install -->"
    commands = [line for line in INSTALL.group(1).splitlines() if line.strip()]
    assert commands and all(c.startswith("pip install ") for c in commands), commands
    venv = tmp_path_factory.mktemp("newcomer") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    assert "include-system-site-packages = false" in (venv / "pyvenv.cfg").read_text()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.pop("SAFEWRITE_ADDRESS", None)
    env["VIRTUAL_ENV"] = str(venv)
    env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", "")])
    for command in commands:
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", command],
            cwd=str(REPO_ROOT), env=env, capture_output=True, text=True, timeout=600,
        )
        assert proc.returncode == 0, "%s\n%s%s" % (command, proc.stdout, proc.stderr)
    return venv, env


def test_install_runs_as_written_in_a_fresh_venv(
    installed: Tuple[Path, Dict[str, str]], tmp_path: Path
) -> None:
    """The client installed by the install block imports from the virtualenv and works
    offline (INSTALLED_CHECK)."""
    venv, env = installed
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-c", INSTALLED_CHECK],
        cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.startswith("installed "), proc.stdout


def test_a_newcomer_runs_the_first_example_as_written(
    installed: Tuple[Path, Dict[str, str]], addr: str, tmp_path: Path
) -> None:
    """The README's first example, copied as written (its namespace and address too)
    into a new project that uses the virtualenv the install block made, type-checks
    under mypy --strict against the installed package and runs against the real
    sidecar, found through SAFEWRITE_ADDRESS as the example says."""
    venv, env = installed
    project = tmp_path / "project"
    project.mkdir()
    (project / "main.py").write_text(BLOCKS[0], encoding="utf-8")
    # mypy of the test environment, reading the packages of the newcomer's virtualenv
    # (PEP 561: the installed py.typed), with no configuration of this checkout.
    if importlib.util.find_spec("mypy") is not None:
        checked = subprocess.run(
            [sys.executable, "-m", "mypy", "--strict", "--no-incremental",
             "--python-executable", str(venv / "bin" / "python"), "main.py"],
            cwd=str(project), capture_output=True, text=True, timeout=300,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr
    ran = subprocess.run(
        [str(venv / "bin" / "python"), "main.py"],
        cwd=str(project), env=dict(env, SAFEWRITE_ADDRESS=addr),
        capture_output=True, text=True, timeout=120,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    outcome, _, data = ran.stdout.strip().partition(" ")
    assert outcome in ("CREATED", "UPDATED"), ran.stdout
    assert "'n':" in data, ran.stdout


def test_the_counter_in_the_readme_is_the_example_file() -> None:
    """The README's two-replica counter is examples/lead_counter/counter.py as it is
    (tests/test_lead.py runs that file's replica)."""
    example = (README.parent / "examples" / "lead_counter" / "counter.py").read_text(encoding="utf-8")
    assert "```py\n" + example + "```" in README.read_text(encoding="utf-8")
