"""The layout holds: the functions stay thin roots that nothing imports, bench/ is never a
dependency, and the layer ships the library and the job modules only. (The import contracts
between pgdrain's rooms are import-linter's, in `make lint`.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CODE = [p for top in ("layers", "dev", "functions", "bench", "demo", "tests")
        for p in (ROOT / top).rglob("*.py")]


@pytest.mark.parametrize("function", ["drain", "enqueue", "migrate"])
def test_each_function_is_wiring_under_80_lines(function):
    lines = (ROOT / "functions" / function / "app.py").read_text().splitlines()
    assert len(lines) < 80


def test_nothing_imports_the_functions_or_the_benchmarks():
    importing = re.compile(r"^\s*(?:from|import)\s+(?:functions|bench)\b", re.MULTILINE)
    assert [str(p.relative_to(ROOT)) for p in CODE if importing.search(p.read_text())] == []


def test_the_functions_import_no_driver():
    # Failures are classified by pgdrain's own errors (DatabaseUnavailable, ...), not pg8000's.
    for path in (ROOT / "functions").rglob("*.py"):
        assert not re.search(r"^\s*(?:from|import)\s+pg8000", path.read_text(), re.MULTILINE), \
            path


def test_the_layer_holds_the_library_and_the_job_modules_only():
    layer = ROOT / "layers" / "pgdrain"
    packages = {p.name for p in layer.iterdir() if (p / "__init__.py").is_file()}
    assert packages == {"pgdrain", "pgdrain_jobs"}


def _pins(name: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / name).read_text().splitlines():
        line = line.split("#")[0].split(";")[0].strip()
        if "==" in line:
            package, version = line.split("==")
            pins[package.lower().replace("_", "-")] = version
    return pins


def test_the_demo_installs_a_subset_of_the_test_pins():
    demo, dev = _pins("requirements-demo.txt"), _pins("requirements-dev.txt")
    assert demo and all(dev.get(package) == version for package, version in demo.items())
    assert "pytest" not in demo and "-r layers/pgdrain/requirements.txt" in (
        ROOT / "requirements-demo.txt").read_text()
