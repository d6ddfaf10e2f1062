"""The library's rooms stay small enough to read: line limits per module, and the drain
package (pgdrain/drain/) with its own stricter rules (see its ruff.toml for complexity)."""

from __future__ import annotations

import tomllib
from pathlib import Path

LIBRARY = Path(__file__).resolve().parents[2] / "layers" / "pgdrain" / "pgdrain"
DRAIN = LIBRARY / "drain"

DRAIN_MODULE_LINES = 400
MODULE_LINES = 650

# Modules allowed past MODULE_LINES for now, each with its reason. None of the drain's.
ALLOWED_LONGER: set[str] = set()


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


def _modules(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*.py") if "__pycache__" not in p.parts)


def test_the_drain_is_a_package_of_small_rooms():
    assert (DRAIN / "__init__.py").is_file(), "pgdrain.drain is a package"
    too_long = {p.name: _lines(p) for p in _modules(DRAIN) if _lines(p) > DRAIN_MODULE_LINES}
    assert too_long == {}, f"drain modules over {DRAIN_MODULE_LINES} lines"


def test_no_library_module_is_over_the_limit():
    too_long = {str(p.relative_to(LIBRARY)): _lines(p) for p in _modules(LIBRARY)
                if _lines(p) > MODULE_LINES and p.name not in ALLOWED_LONGER}
    assert too_long == {}, f"modules over {MODULE_LINES} lines"
    assert not any(name.startswith("drain") for name in ALLOWED_LONGER)


def test_the_drain_needs_no_type_ignore():
    marked = [f"{p.name}:{number}" for p in _modules(DRAIN)
              for number, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
              if "type: ignore" in line]
    assert marked == []


def test_the_drain_has_its_own_complexity_bar():
    config = tomllib.loads((DRAIN / "ruff.toml").read_text(encoding="utf-8"))
    assert config["lint"]["mccabe"]["max-complexity"] == 10
    assert (DRAIN / config["extend"]).resolve() == LIBRARY.parents[2] / "pyproject.toml"


CONSOLE = LIBRARY.parents[2] / "console" / "pgdrain_console"


def test_the_console_stays_out_of_the_lambda_layer():
    """The layer ships what is beside layers/pgdrain/Makefile: the console is an operator's
    tool, installed with the CLI (pip install ./console), and its template engine never
    reaches a function's cold start."""
    layer = LIBRARY.parent
    assert CONSOLE.is_dir() and layer not in CONSOLE.parents
    assert not list(layer.rglob("pgdrain_console"))
    for path in _modules(layer):
        source = path.read_text(encoding="utf-8")
        assert "pgdrain_console" not in source and "jinja2" not in source, path
    assert not any(line.lower().startswith(("jinja2", "markupsafe", "selenium"))
                   for name in ("requirements.txt", "requirements-powertools.txt")
                   for line in (layer / name).read_text().splitlines())


def test_no_console_module_is_over_the_limit():
    too_long = {p.name: _lines(p) for p in _modules(CONSOLE) if _lines(p) > MODULE_LINES}
    assert too_long == {}
