"""Certificates for a secured cluster: a throwaway certificate authority, a key and certificate per node, and a
client pair for mutual-TLS examples.

Usage: ``python deploy/certs.py DIR [--nodes 3] [--days 365] [--force]`` (``make certs``: DIR is
``${CLUSTER_DIR:-./cluster-data}/certs``; ``make compose-secrets``: ``deploy/certs``). Writes:

  ============== ====== =============================================================================
  file           mode   what
  ============== ====== =============================================================================
  ``ca.pem``     0644   the CA certificate: what clients and nodes trust (``ssl.truststore.location``)
  ``nodeN.pem``  0600   node N's private key, its certificate and the CA's (``ssl.keystore.location``)
  ``client.crt`` 0644   a client certificate, CN=app, then the CA's (``ssl.certificate.location``)
  ``client.key`` 0600   its private key (``ssl.key.location``)
  ============== ====== =============================================================================

Rules:
- Node N's certificate names ``127.0.0.1``, ``localhost`` and ``nodeN`` (subject alternative names): the
  local cluster's address and the compose service name, so clients and peers can check host names
  (``ssl.endpoint.identification.algorithm=https``). Node certificates are good for serverAuth and clientAuth
  (a node is its peers' client); the client certificate for clientAuth only.
- The CA's private key is never written: it lives only while this script runs. To renew, or to add nodes,
  run again with ``--force``: the whole set is made again (a set from two CAs would not verify), then the
  nodes are restarted (or sent SIGHUP) and clients pick up the new ``ca.pem``.
- Without ``--force`` an existing set is kept when every file is there, parses, was signed by ``ca.pem``,
  covers the nodes asked for and stays valid for ``RENEW_BEFORE_DAYS`` more days; otherwise it is made again.
- Keys are EC P-256, signatures SHA-256 (what Kafka's Java clients, librdkafka and Python's ssl accept).
  Private key files are created 0600 from the start (never readable by others, not even for a moment);
  every file is written under a temporary name and renamed into place.
- Uses ``cryptography`` (pyca), which the venv has: trustme is built on it.
"""

from __future__ import annotations

import argparse
import datetime as dt
import ipaddress
import os
import sys
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_NODES = 3
DEFAULT_DAYS = 365
RENEW_BEFORE_DAYS = 7
CLIENT_NAME = "app"
ORGANIZATION = "groupcoord local cluster"


def node_names(node_id: int) -> list[str]:
    """The names node ``node_id``'s certificate is good for."""
    return ["127.0.0.1", "localhost", f"node{node_id}"]


def files(out: Path, nodes: int) -> list[Path]:
    return [out / "ca.pem", *(out / f"node{i}.pem" for i in range(1, nodes + 1)), out / "client.crt",
            out / "client.key"]


# --- making ------------------------------------------------------------------------------------------------

def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, ORGANIZATION),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _san(names: list[str]) -> x509.SubjectAlternativeName:
    entries: list[x509.GeneralName] = []
    for n in names:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            entries.append(x509.DNSName(n))
    return x509.SubjectAlternativeName(entries)


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


class Authority:
    """A CA that exists only in memory; ``issue`` signs leaf certificates."""

    def __init__(self, days: int) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        self.now = dt.datetime.now(dt.UTC)
        self.days = days
        ski = x509.SubjectKeyIdentifier.from_public_key(self.key.public_key())
        self.cert = (
            x509.CertificateBuilder()
            .subject_name(_name(f"{ORGANIZATION} CA")).issuer_name(_name(f"{ORGANIZATION} CA"))
            .public_key(self.key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(self.now - dt.timedelta(hours=1))
            .not_valid_after(self.now + dt.timedelta(days=days + 1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=False, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=True,
                                         crl_sign=True, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(ski, critical=False)
            .sign(self.key, hashes.SHA256())
        )

    def issue(self, common_name: str, names: list[str], server: bool,
              ) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
        key = ec.generate_private_key(ec.SECP256R1())
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server else [
            ExtendedKeyUsageOID.CLIENT_AUTH]
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name)).issuer_name(self.cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(self.now - dt.timedelta(hours=1))
            .not_valid_after(self.now + dt.timedelta(days=self.days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, content_commitment=False, key_encipherment=False,
                                         data_encipherment=False, key_agreement=False, key_cert_sign=False,
                                         crl_sign=False, encipher_only=False, decipher_only=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(self.key.public_key()), critical=False)
        )
        if names:
            builder = builder.add_extension(_san(names), critical=False)
        return key, builder.sign(self.key, hashes.SHA256())


def _write(path: Path, data: bytes, mode: int) -> None:
    """``data`` into ``path`` (mode ``mode`` from creation on), by rename."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.unlink(missing_ok=True)
    with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode), "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    os.chmod(tmp, mode)  # the umask may have taken bits off
    tmp.replace(path)


def make(out: Path, nodes: int = DEFAULT_NODES, days: int = DEFAULT_DAYS) -> None:
    """A new CA and everything it signs, in ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    ca = Authority(days)
    ca_pem = _pem_cert(ca.cert)
    for i in range(1, nodes + 1):
        key, cert = ca.issue(f"node{i}", node_names(i), server=True)
        _write(out / f"node{i}.pem", _pem_key(key) + _pem_cert(cert) + ca_pem, 0o600)
    key, cert = ca.issue(CLIENT_NAME, [], server=False)
    _write(out / "client.key", _pem_key(key), 0o600)
    _write(out / "client.crt", _pem_cert(cert) + ca_pem, 0o644)
    _write(out / "ca.pem", ca_pem, 0o644)  # last: its presence says the set is complete


# --- checking ----------------------------------------------------------------------------------------------

def problem(out: Path, nodes: int = DEFAULT_NODES) -> str | None:
    """Why the set in ``out`` must be made again (None: it is good to keep)."""
    missing = [p.name for p in files(out, nodes) if not p.exists()]
    if len(missing) == len(files(out, nodes)):
        return "none there"
    if missing:
        return f"missing {', '.join(missing)}"
    try:
        ca = x509.load_pem_x509_certificate((out / "ca.pem").read_bytes())
        leaves = {f"node{i}.pem": x509.load_pem_x509_certificates((out / f"node{i}.pem").read_bytes())[0]
                  for i in range(1, nodes + 1)}
        leaves["client.crt"] = x509.load_pem_x509_certificates((out / "client.crt").read_bytes())[0]
    except (OSError, ValueError) as e:
        return f"unreadable: {e}"
    horizon = dt.datetime.now(dt.UTC) + dt.timedelta(days=RENEW_BEFORE_DAYS)
    for name, cert in [("ca.pem", ca), *leaves.items()]:
        if cert.not_valid_after_utc < horizon:
            return f"{name} expires {cert.not_valid_after_utc:%Y-%m-%d}"
    for name, cert in leaves.items():
        try:
            cert.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            return f"{name} was not signed by ca.pem"
    for i in range(1, nodes + 1):
        san = leaves[f"node{i}.pem"].extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        have = {str(v) for v in san.get_values_for_type(x509.IPAddress)} | set(san.get_values_for_type(x509.DNSName))
        if not set(node_names(i)) <= have:
            return f"node{i}.pem does not name {', '.join(sorted(set(node_names(i)) - have))}"
    return None


def ensure(out: Path, nodes: int = DEFAULT_NODES, days: int = DEFAULT_DAYS, force: bool = False) -> str:
    """Keep a good set in ``out`` or make a new one; says which (one line)."""
    why = "--force" if force else problem(out, nodes)
    if why is None:
        return f"certificates in {out} kept (valid, {nodes} nodes)"
    make(out, nodes, days)
    return f"certificates made in {out} ({why}): ca.pem, node1..{nodes}.pem, client.crt/client.key"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="certs.py", description="A CA and per-node TLS certificates (PEM).")
    p.add_argument("dir", type=Path)
    p.add_argument("--nodes", type=int, default=DEFAULT_NODES)
    p.add_argument("--days", type=int, default=DEFAULT_DAYS)
    p.add_argument("--force", action="store_true", help="make a new set even if the present one is good")
    args = p.parse_args(argv)
    if args.nodes < 1 or args.days < RENEW_BEFORE_DAYS + 1:
        p.error(f"--nodes must be at least 1 and --days more than {RENEW_BEFORE_DAYS}")
    print(ensure(args.dir.resolve(), args.nodes, args.days, args.force))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
