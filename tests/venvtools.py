"""Running code with the python of an installed venv, seeing only the install (shared by the runtime tests)."""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import textwrap
from pathlib import Path
from typing import Any


def python_of(venv: Any) -> str:
    """The interpreter of a conftest Venv (or of a venv folder, or an interpreter path)."""
    v = getattr(venv, "python", None)
    if v:
        return str(v)
    p = Path(venv)
    return str(p / "bin" / "python") if p.is_dir() else str(p)


def run_py(python: str, *argv: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """From a neutral cwd and without PYTHON* variables, so only the install is importable."""
    e = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    e.update(env or {})
    return subprocess.run(
        [python, *argv],
        capture_output=True,
        text=True,
        env=e,
        cwd=tempfile.gettempdir(),
        timeout=300,
        check=False,
    )


def run_code(
    python: str, code: str, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_py(python, "-c", textwrap.dedent(code), *args, env=env)


def json_of(python: str, code: str, *args: str, env: dict[str, str] | None = None) -> Any:
    """Run code that prints one JSON line last; fail the test with its output if it fails."""
    r = run_code(python, code, *args, env=env)
    assert r.returncode == 0, f"venv python failed ({r.returncode}):\n{r.stdout}\n{r.stderr}"
    return json.loads(r.stdout.strip().splitlines()[-1])


def package_dir(python: str) -> Path:
    """Where the venv's `netra` package is installed (site-packages/netra)."""
    return Path(json_of(python, "import json, os, netra; print(json.dumps(os.path.dirname(netra.__file__)))"))
