"""Cold-start import cost of each Lambda function, as the runtime would pay it.

    .venv/bin/python bench/coldstart.py [--python python3.13] [--runs 9]

Builds the layer's contents (layers/pgdrain/requirements.txt plus the pgdrain packages) into a
temporary folder with the given Python (the Lambda runtime's version), once without and once
with compiled bytecode (``compileall --invalidation-mode unchecked-hash``, what the layer
build ships). Then imports each function's app.py in a fresh interpreter ``--runs`` times with
``-X importtime`` and reports the median total import time (ms), with the three most costly
top-level imports. boto3 is not installed in the layer (the runtime provides it): a function
that imports it at init would show it here as a failure to import.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FUNCTIONS = [p.parent for p in sorted((ROOT / "functions").glob("*/app.py"))]
LINE = re.compile(r"import time:\s+(\d+) \|\s+(\d+) \| (\s*)(\S+)")


def build_layer(python: str, target: Path, compiled: bool) -> None:
    # pgdrain's layer and the Powertools layer (or AWS's managed one: the same package) both
    # land in /opt/python: one folder here.
    layer = ROOT / "layers" / "pgdrain"
    requirements = [layer / "requirements.txt"]
    if (layer / "requirements-powertools.txt").exists():
        requirements.append(layer / "requirements-powertools.txt")
    subprocess.run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                    "--root-user-action=ignore", "--no-compile", "--target", str(target),
                    *(arg for r in requirements for arg in ("-r", str(r)))], check=True,
                   stderr=subprocess.DEVNULL)
    for package in ("pgdrain", "pgdrain_jobs", "jobs"):
        shutil.copytree(ROOT / "layers" / "pgdrain" / package, target / package,
                        ignore=shutil.ignore_patterns("__pycache__"))
    if compiled:
        subprocess.run([python, "-m", "compileall", "-q", "--invalidation-mode",
                        "unchecked-hash", str(target)], check=True, stdout=subprocess.DEVNULL)


def measure(python: str, function: Path, layer: Path, runs: int) -> tuple[float, list[str]]:
    env = {"PATH": os.environ["PATH"], "PYTHONPATH": f"{function}:{layer}",
           "PYTHONDONTWRITEBYTECODE": "1", "AWS_DEFAULT_REGION": "eu-west-1",
           "DATABASE_URL": "postgresql://u@db.invalid/x"}
    totals, top = [], []
    for _ in range(runs):
        result = subprocess.run([python, "-X", "importtime", "-c", "import app"], env=env,
                                capture_output=True, text=True, cwd=function)
        if result.returncode != 0:
            raise SystemExit(f"{function.name}: import failed:\n{result.stderr[-2000:]}")
        lines = LINE.findall(result.stderr)
        totals.append(next(int(cum) for _, cum, indent, name in lines
                           if indent == "" and name == "app") / 1000)
        # What app.py imports directly, costliest first.
        children = sorted(((int(cum), name) for _, cum, indent, name in lines
                           if indent == "  "), reverse=True)
        top = [f"{name} {cum / 1000:.0f}" for cum, name in children[:4]]
    return statistics.median(totals), top


def find_python(name: str) -> tuple[str, str]:
    """The interpreter called ``name``: on PATH, or installed but inactive under pyenv."""
    pyenv = sorted((Path.home() / ".pyenv" / "versions").glob(f"{name.removeprefix('python')}*"))
    for candidate in [shutil.which(name), *(str(v / "bin" / name) for v in reversed(pyenv))]:
        if candidate:
            result = subprocess.run([candidate, "--version"], capture_output=True, text=True)
            if result.returncode == 0:
                return candidate, result.stdout.strip()
    raise SystemExit(f"{name} is not installed here")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="python3.13")
    parser.add_argument("--runs", type=int, default=9)
    args = parser.parse_args()
    python, version = find_python(args.python)
    print(f"{version}, median of {args.runs} fresh interpreters, ms of import time "
          "(-X importtime: `import app`, cumulative)\n")
    print("| function | without .pyc | with .pyc | biggest imports (with .pyc, ms) |")
    print("|---|---:|---:|---|")
    with tempfile.TemporaryDirectory() as scratch:
        layers = {}
        for compiled in (False, True):
            layers[compiled] = Path(scratch) / f"layer-{compiled}"
            build_layer(python, layers[compiled], compiled)
        for function in FUNCTIONS:
            plain, _ = measure(python, function, layers[False], args.runs)
            fast, top = measure(python, function, layers[True], args.runs)
            print(f"| {function.name} | {plain:.0f} | {fast:.0f} | {', '.join(top)} |")


if __name__ == "__main__":
    main()
