"""Your job modules: a module placed in ``layers/pgdrain/jobs/`` is in the layer ``sam build``
makes, and the drain function, at the template's default ``JobModules``, drains its jobs; the
demo's stand-ins are in neither the layer nor the installed package."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from samtranslator.yaml_helper import yaml_parse

from pgdrain.db import connect
from pgdrain.registry import DEFAULT_JOB_MODULES

ROOT = Path(__file__).resolve().parents[2]
LAYER = ROOT / "layers" / "pgdrain"
TEMPLATE = yaml_parse((ROOT / "template.yaml").read_text())

USER_MODULE = '''
import pgdrain

@pgdrain.job("count-words")
def count_words(job: pgdrain.Job) -> dict:
    return {"words": len(job.payload["text"].split())}
'''

# The drain function in a process whose path is the built layer (as /opt/python) and the
# function's folder, with the default PGDRAIN_JOBS; it answers what it drained and what it
# loaded from where.
DRAIN = '''
import json, sys
import app, jobs, pgdrain
from pgdrain_dev.context import LambdaContext
summary = app.lambda_handler({}, LambdaContext("drain", 60))
print(json.dumps({"summary": summary, "jobs_from": jobs.__file__, "modules": jobs.MODULES,
                  "pgdrain_from": pgdrain.__file__}))
'''


def build_layer(source: Path, artifacts: Path) -> Path:
    """The layer as `sam build` makes it: the layer's own Makefile run on a copy of its folder
    (sam copies it to a scratch directory), without the wheels (pip is ``true`` here: the test
    process's own packages stand in for them)."""
    subprocess.run(["make", "--no-print-directory", "-C", str(source), "build-PgdrainLayer",
                    f"ARTIFACTS_DIR={artifacts}", "PYTHON=true", "PYC_PYTHON="],
                   check=True, capture_output=True, text=True)
    return artifacts / "python"


def test_a_module_placed_in_jobs_is_deployed_and_drained(tmp_path, database_url):
    assert TEMPLATE["Parameters"]["JobModules"]["Default"] == DEFAULT_JOB_MODULES == "jobs"
    source = tmp_path / "layer-source"
    shutil.copytree(LAYER, source, ignore=shutil.ignore_patterns(
        "__pycache__", "*.egg-info"))
    (source / "jobs" / "words.py").write_text(USER_MODULE)
    built = build_layer(source, tmp_path / "artifacts")
    assert (built / "jobs" / "words.py").exists() and (built / "jobs" / "echo.py").exists()

    conn = connect(database_url)
    try:
        ids = [r[0] for r in conn.run(
            "INSERT INTO jobs (job_type, payload) VALUES "
            "('count-words', '{\"text\": \"one two three\"}'), "
            "('echo', '{\"hello\": \"world\"}') RETURNING id")]
    finally:
        conn.close()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PGDRAIN_", "DB_")) and k != "PYTHONPATH"}
    env.update(DATABASE_URL=database_url, PGDRAIN_RETENTION_SECONDS="3600",
               PYTHONPATH=os.pathsep.join([str(ROOT / "functions" / "drain"), str(built),
                                           str(ROOT / "dev")]))
    ran = subprocess.run([sys.executable, "-P", "-c", DRAIN], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)
    assert ran.returncode == 0, ran.stderr
    answer = json.loads(ran.stdout.splitlines()[-1])
    assert answer["jobs_from"].startswith(str(built)), answer
    assert answer["pgdrain_from"].startswith(str(built)), answer
    assert answer["modules"] == ["echo", "words"]
    assert answer["summary"]["done"] == 2, answer["summary"]

    conn = connect(database_url)
    try:
        results = dict(conn.run("SELECT job_type, result FROM jobs WHERE id = ANY(:ids) "
                                "AND status = 'done'", ids=ids))
    finally:
        conn.close()
    assert results == {"count-words": {"words": 3}, "echo": {"hello": "world"}}


def test_the_stand_ins_ship_in_neither_the_layer_nor_the_package(tmp_path):
    built = build_layer(LAYER, tmp_path / "artifacts")
    shipped = {p.relative_to(built).as_posix() for p in built.rglob("*.py")}
    assert "jobs/echo.py" in shipped and "pgdrain_jobs/webhook.py" in shipped
    assert not [p for p in shipped if "demo_jobs" in p or p.endswith(("examples.py",
                                                                      "seed.py"))], shipped
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = project["tool"]["setuptools"]["packages"]["find"]  # no jobs, no stand-ins
    assert packages["include"] == ["pgdrain*", "pgdrain_jobs*"]
    assert not list((LAYER / "pgdrain_jobs").glob("examples.py"))
