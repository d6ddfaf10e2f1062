"""Secrets Manager's GetSecretValue on a loopback port, answered by a boto3 client under
moto's mock: what pgdrain's own signed requests (pgdrain.aws.sigv4) reach in tests, the same
secrets the test's boto3 client wrote. The request must carry a SigV4 Authorization for
secretsmanager in the secret's region; the signature itself is checked byte for byte against
botocore's in tests/unit/test_sigv4.py."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@contextmanager
def secrets_standin(client: Any) -> Iterator[str]:
    """Serve ``client`` (a mocked boto3 Secrets Manager client); yields the endpoint URL."""
    requests: list[dict[str, Any]] = []

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            requests.append({"headers": dict(self.headers), "body": body})
            auth = self.headers.get("Authorization", "")
            if (self.headers.get("X-Amz-Target") != "secretsmanager.GetSecretValue"
                    or not auth.startswith("AWS4-HMAC-SHA256 Credential=")
                    or "/secretsmanager/aws4_request" not in auth):
                self._answer(400, {"__type": "InvalidSignatureException", "message": auth})
                return
            try:
                answer = client.get_secret_value(**body)
            except client.exceptions.ClientError as exc:
                error = exc.response["Error"]
                self._answer(400, {"__type": error["Code"], "message": error["Message"]})
                return
            answer.pop("ResponseMetadata", None)
            self._answer(200, answer)

        def _answer(self, status: int, document: dict[str, Any]) -> None:
            data = json.dumps(document, default=str).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/x-amz-json-1.1")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
