"""Throwaway TLS material (openssl CLI) and a TLS-only redis-server, for tests.

Two CAs: `ca` signs the server certificates (one valid for 127.0.0.1 and localhost, one
for another name only) and the client certificate; `other_ca` signs nothing the server uses,
so trusting only it must fail. EC P-256 keys: fast to make.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from recovery.testing.local_redis import LocalServer, free_port, server_binary

DAYS = "2"


@dataclass(frozen=True)
class TlsFiles:
    """PEM files: CA certificates, server and client certificates with their keys."""

    ca: Path
    other_ca: Path
    server_cert: Path
    server_key: Path
    wrong_name_cert: Path
    wrong_name_key: Path
    client_cert: Path
    client_key: Path


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl {' '.join(args)} failed: {proc.stderr}")


def _key(path: Path) -> Path:
    _openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", str(path))
    return path


def _ca(directory: Path, name: str) -> tuple[Path, Path]:
    key = _key(directory / f"{name}.key")
    cert = directory / f"{name}.crt"
    _openssl("req", "-x509", "-new", "-key", str(key), "-days", DAYS, "-subj",
             f"/CN=test {name}", "-out", str(cert))
    return cert, key


def _signed(directory: Path, name: str, ca: tuple[Path, Path], extensions: str
            ) -> tuple[Path, Path]:
    key = _key(directory / f"{name}.key")
    csr, cert, ext = (directory / f"{name}.{s}" for s in ("csr", "crt", "ext"))
    _openssl("req", "-new", "-key", str(key), "-subj", f"/CN={name}", "-out", str(csr))
    ext.write_text(extensions)
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(ca[0]), "-CAkey", str(ca[1]),
             "-CAcreateserial", "-days", DAYS, "-extfile", str(ext), "-out", str(cert))
    return cert, key


def make_tls_files(directory: Path) -> TlsFiles:
    """A CA, a second CA, server certificates (right and wrong name), a client certificate."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca(directory, "ca")
    other_ca, _ = _ca(directory, "other-ca")
    # Cluster nodes also present their certificate as clients (cluster bus, replication).
    server = _signed(directory, "server", ca, "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                     "extendedKeyUsage=serverAuth,clientAuth\n")
    wrong = _signed(directory, "wrong-name", ca, "subjectAltName=DNS:wrong.example\n"
                    "extendedKeyUsage=serverAuth\n")
    client = _signed(directory, "client", ca, "extendedKeyUsage=clientAuth\n")
    return TlsFiles(ca[0], other_ca, server[0], server[1], wrong[0], wrong[1], client[0],
                    client[1])


def tls_server_args(files: TlsFiles, port: int, wrong_name: bool = False,
                    client_certs: bool = True) -> tuple[str, ...]:
    """redis-server options for TLS only on `port` (``--port 0``); with `client_certs` the
    server asks clients for a certificate signed by the CA (``--tls-auth-clients yes``)."""
    cert, key = ((files.wrong_name_cert, files.wrong_name_key) if wrong_name
                 else (files.server_cert, files.server_key))
    return ("--port", "0", "--tls-port", str(port), "--tls-cert-file", str(cert),
            "--tls-key-file", str(key), "--tls-ca-cert-file", str(files.ca),
            "--tls-auth-clients", "yes" if client_certs else "no")


def tls_client_options(files: TlsFiles) -> dict[str, object]:
    """redis-py options of the tests' own clients (seeding, checks): the client certificate."""
    return {"ssl": True, "ssl_ca_certs": str(files.ca), "ssl_certfile": str(files.client_cert),
            "ssl_keyfile": str(files.client_key), "ssl_check_hostname": False}


def tls_server(files: TlsFiles, *, wrong_name: bool = False, client_certs: bool = True
               ) -> LocalServer:
    """A started redis-server listening with TLS only."""
    binary = server_binary("redis")
    if binary is None:
        raise RuntimeError("no redis-server on the PATH: apt-get install redis-server")
    port = free_port()
    return LocalServer(binary, port=port,
                       args=tls_server_args(files, port, wrong_name, client_certs),
                       client_options=tls_client_options(files)).start()
