"""A throwaway certificate authority for tests, made with the openssl command line: a CA, a
server certificate for 127.0.0.1 and localhost, and client certificates (one from the CA, one
from a CA nobody trusts), all in a temporary folder."""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import bcrypt

#: Cost 4, bcrypt's lowest: the tests check behaviour, not bcrypt's speed.
TEST_COST = 4


def bcrypt_hash(password: str, cost: int = TEST_COST) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()


@dataclass(frozen=True)
class Pki:
    folder: Path

    def path(self, name: str) -> Path:
        return self.folder / name

    @property
    def ca(self) -> Path:
        return self.path("ca.crt")


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


def _key_and_csr(name: str, cn: str, cwd: Path) -> None:
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", f"/CN={cn}", cwd=cwd)


def _ca(name: str, cwd: Path) -> None:
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
             "-keyout", f"{name}.key", "-out", f"{name}.crt", "-days", "2", "-subj",
             f"/CN={name}", "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign", cwd=cwd)


def _sign(name: str, ca: str, extensions: str, cwd: Path) -> None:
    (cwd / f"{name}.ext").write_text(extensions)
    _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.crt", "-CAkey", f"{ca}.key",
             "-CAcreateserial", "-out", f"{name}.crt", "-days", "2", "-extfile", f"{name}.ext",
             cwd=cwd)


def make_pki(folder: Path) -> Pki:
    """ca.crt; server.crt/.key (127.0.0.1, localhost); client.crt/.key (SAN DNS:scraper,
    signed by ca); stranger.crt/.key (signed by a CA the server does not trust)."""
    assert shutil.which("openssl"), "the openssl command line is needed (Debian: openssl)"
    folder.mkdir(parents=True, exist_ok=True)
    _ca("ca", folder)
    _ca("other-ca", folder)
    _key_and_csr("server", "localhost", folder)
    _sign("server", "ca", "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
          "extendedKeyUsage=serverAuth\n", folder)
    _key_and_csr("client", "scraper", folder)
    _sign("client", "ca", "subjectAltName=DNS:scraper\nextendedKeyUsage=clientAuth\n", folder)
    _key_and_csr("stranger", "stranger", folder)
    _sign("stranger", "other-ca", "subjectAltName=DNS:scraper\nextendedKeyUsage=clientAuth\n",
          folder)
    return Pki(folder)
