"""The first connection's cost in secret mode: fetching the secret in a fresh interpreter, as
a function's first invocation does after its cold start.

    .venv/bin/python bench/secret_connect.py [--python python3.13] [--runs 15] [TREE ...]

For each TREE (a checkout of this repository; default: this one), in fresh interpreters of
``--python`` (the Lambda runtime's version) with that tree's library on the path and boto3
installed beside it (the runtime has it), times ``connect_params_from_env()`` with
``DB_SECRET_ARN`` set and the function's credentials in the environment, as Lambda sets them.
Secrets Manager is a loopback stand-in that answers every GetSecretValue with one secret, so
the time is the client's own: imports, client set-up, signing, one local round trip. Trees
are measured in turns; the medians are printed with what each run had imported.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SECRET = {"username": "app", "password": "pw", "host": "db.example.com", "port": 5432,
          "dbname": "app", "engine": "postgres"}
ARN = "arn:aws:secretsmanager:eu-west-1:123456789012:secret:pgdrain-AbCdEf"
PROBE = """
import json, sys, time
started = time.perf_counter()
from pgdrain.aws.credentials import connect_params_from_env
params = connect_params_from_env()
elapsed = time.perf_counter() - started
assert params.user == "app", params
print(json.dumps({"ms": elapsed * 1000, "boto3": "boto3" in sys.modules}))
"""


class _SecretsManager(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = json.dumps({"ARN": ARN, "Name": "pgdrain", "SecretString": json.dumps(SECRET),
                           "VersionId": "v1"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-amz-json-1.1")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--python", default="python3.13")
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("trees", nargs="*", type=Path, default=[ROOT])
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SecretsManager)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="pgdrain-secret-bench-") as scratch:
        site = Path(scratch) / "site"
        # The runtime's boto3 (any recent one) and the library's driver.
        subprocess.run([args.python, "-m", "pip", "install", "-q", "--disable-pip-version-check",
                        "--root-user-action=ignore", "--target", str(site), "boto3",
                        "-r", str(ROOT / "layers" / "pgdrain" / "requirements.txt")],
                       check=True, stderr=subprocess.DEVNULL)
        env = {"PATH": os.environ["PATH"], "DB_SECRET_ARN": ARN, "AWS_REGION": "eu-west-1",
               "AWS_DEFAULT_REGION": "eu-west-1", "AWS_ACCESS_KEY_ID": "AKIDEXAMPLE",
               "AWS_SECRET_ACCESS_KEY": "secret", "AWS_SESSION_TOKEN": "token",
               "AWS_ENDPOINT_URL_SECRETS_MANAGER": f"http://127.0.0.1:{server.server_port}",
               "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
               "DB_SSLMODE": "disable"}
        results: dict[Path, list[dict[str, float]]] = {tree: [] for tree in args.trees}
        for _ in range(args.runs):
            for tree in args.trees:
                library = tree / "layers" / "pgdrain"
                run = subprocess.run(
                    [args.python, "-c", PROBE],
                    env={**env, "PYTHONPATH": f"{library}:{site}"},
                    capture_output=True, text=True, check=False)
                if run.returncode != 0:
                    sys.exit(f"{tree}: {run.stderr[-2000:]}")
                results[tree].append(json.loads(run.stdout))
    server.shutdown()
    print(f"| tree | first secret fetch, median of {args.runs} (ms) | boto3 imported |")
    print("|---|---:|---|")
    for tree, runs in results.items():
        median = statistics.median(r["ms"] for r in runs)
        print(f"| {tree} | {median:.0f} | {'yes' if runs[0]['boto3'] else 'no'} |")


if __name__ == "__main__":
    main()
