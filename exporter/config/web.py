"""The web configuration file (``run --web.config.file``): TLS, client certificates,
basic-auth users and response headers, in the format of Prometheus exporter-toolkit (the file
node_exporter and blackbox_exporter read), so one file can serve every exporter on a host.

Relative file names are taken from the web config file's folder, as exporter-toolkit does.
Keys that only make sense for Go's TLS stack are recognized and refused with a reason
rather than silently ignored: a user who set ``cipher_suites`` expects them to apply.
"""

from __future__ import annotations

import os
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BeforeValidator, Field, model_validator
from pydantic_core import PydanticCustomError

from exporter import redact
from exporter.config.files import (
    MAX_CONFIG_BYTES,
    MAX_SECRET_BYTES,
    FileProblem,
    read_bounded,
    read_text,
)
from exporter.config.values import StrictModel
from exporter.config.yamlfile import (
    ConfigError,
    YamlPath,
    compose_named,
    format_path,
    line_of,
    validate,
)

TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
TlsVersion = Literal["TLS10", "TLS11", "TLS12", "TLS13"]
ClientAuth = Literal[
    "NoClientCert", "RequestClientCert", "RequireAnyClientCert", "VerifyClientCertIfGiven",
    "RequireAndVerifyClientCert",
]
#: What each policy asks of OpenSSL. RequestClientCert asks for a certificate that nothing
#: then checks, which grants exactly what NoClientCert grants, so it is served as that.
VERIFY_MODES = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_NONE,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
#: exporter-toolkit's fixed set of settable headers, and the values allowed where it fixes them.
HEADERS: dict[str, tuple[str, ...]] = {
    "Strict-Transport-Security": (),
    "X-Content-Type-Options": ("nosniff",),
    "X-Frame-Options": ("deny", "sameorigin"),
    "X-XSS-Protection": (),
    "Content-Security-Policy": (),
}
#: A bcrypt hash as htpasswd -B and Go's bcrypt write it ($2y$, $2a$, $2b$; cost 4 to 31).
_BCRYPT = re.compile(r"\$2[abxy]?\$(0[4-9]|[12]\d|3[01])\$[./A-Za-z0-9]{53}")
HASH_HINT = "generate one with: htpasswd -nBC 10 \"\" | tr -d ':\\n'"


def _problem(message: str) -> PydanticCustomError:
    # The text goes in as a value: a brace in a user's name is not a template field.
    return PydanticCustomError("web", "{problem}", {"problem": message})


def _bcrypt_hash(value: Any) -> str:
    # The message never repeats the value: a plain password typed here is still a secret.
    if not isinstance(value, str) or not _BCRYPT.fullmatch(value.strip()):
        raise _problem(f"not a bcrypt hash ({HASH_HINT})")
    return value.strip()


BcryptHash = Annotated[str, BeforeValidator(_bcrypt_hash)]


class TLSServerConfig(StrictModel):
    cert_file: str = ""
    key_file: str = ""
    client_ca_file: str = ""
    client_auth_type: ClientAuth = "NoClientCert"
    client_allowed_sans: list[str] = Field(default_factory=list)
    min_version: TlsVersion = "TLS12"
    max_version: TlsVersion = "TLS13"
    prefer_server_cipher_suites: bool = True
    # exporter-toolkit keys this exporter does not serve; set, they are refused with why.
    cert: str | None = None
    key: str | None = None
    client_ca: str | None = None
    cipher_suites: list[str] | None = None
    curve_preferences: list[str] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> TLSServerConfig:
        for key in ("cert", "key", "client_ca"):
            if getattr(self, key) is not None:
                raise _problem(
                    f"inline {key} is not supported; put it in a file and set {key}_file")
        for key in ("cipher_suites", "curve_preferences"):
            if getattr(self, key) is not None:
                raise _problem(
                    f"{key} names Go's TLS settings and is not supported here (OpenSSL's defaults"
                    " apply; min_version: TLS13 narrows them to TLS 1.3's suites)"
                )
        auth = self.client_auth_type
        if self.enabled and not (self.cert_file and self.key_file):
            raise _problem("both cert_file and key_file are needed for TLS")
        if auth == "RequireAnyClientCert":
            raise _problem(
                "client_auth_type RequireAnyClientCert accepts any certificate without checking"
                " it and is not supported; use RequireAndVerifyClientCert with client_ca_file"
            )
        if self.client_ca_file and VERIFY_MODES[auth] == ssl.CERT_NONE:
            raise _problem(f"client_ca_file is set but client_auth_type {auth} never checks it")
        if VERIFY_MODES[auth] != ssl.CERT_NONE and not self.client_ca_file:
            raise _problem(f"client_auth_type {auth} needs client_ca_file to verify against")
        if self.client_allowed_sans and VERIFY_MODES[auth] == ssl.CERT_NONE:
            raise _problem(
                "client_allowed_sans needs a client_auth_type that verifies certificates")
        if TLS_VERSIONS[self.min_version] > TLS_VERSIONS[self.max_version]:
            raise _problem(
                f"min_version {self.min_version} is above max_version {self.max_version}")
        return self

    @property
    def enabled(self) -> bool:
        """Any TLS key set turns TLS on (then cert_file and key_file are required)."""
        return bool(self.cert_file or self.key_file or self.client_ca_file
                    or self.client_auth_type != "NoClientCert")


class HTTPServerConfig(StrictModel):
    #: Accepted for compatibility; the exporter serves HTTP/1.1 (all Prometheus needs).
    http2: bool = True
    headers: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _headers(self) -> HTTPServerConfig:
        for name, value in self.headers.items():
            if name not in HEADERS:
                raise _problem(
                    f"header {name!r} can not be configured (one of: {', '.join(HEADERS)})"
                )
            allowed = HEADERS[name]
            if allowed and value not in allowed:
                raise _problem(
                    f"header {name}: expected one of {', '.join(allowed)}, got {value!r}")
            if "\r" in value or "\n" in value:
                raise _problem(f"header {name}: a line break in the value")
        return self


class WebConfig(StrictModel):
    tls_server_config: TLSServerConfig = Field(default_factory=TLSServerConfig)
    http_server_config: HTTPServerConfig = Field(default_factory=HTTPServerConfig)
    basic_auth_users: dict[str, BcryptHash] = Field(default_factory=dict)
    auth_excluded_paths: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _names(self) -> WebConfig:
        for user in self.basic_auth_users:
            if not user or ":" in user:
                raise _problem(f"user name {user!r}: must be non-empty and without ':'")
        for path in self.auth_excluded_paths:
            if not path.startswith("/"):
                raise _problem(f"auth_excluded_paths: {path!r} is not a path (starts with /)")
        return self


@dataclass(frozen=True)
class Web:
    """A loaded web config: the settings and, when TLS is on, the server's TLS context."""

    config: WebConfig
    path: str
    tls: ssl.SSLContext | None

    @property
    def scheme(self) -> str:
        return "https" if self.tls else "http"


def load_web_config(path: str | os.PathLike[str]) -> Web:
    """Read, validate and build ``path``; raise ConfigError with one line per problem."""
    name = str(path)
    try:
        text = read_text(path)
    except FileProblem as exc:
        raise ConfigError([f"{name}: cannot read web config: {exc}"]) from None
    data, lines = compose_named(text, name)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError([f"{name} (line 1): expected a mapping at the top level"])
    config = validate(WebConfig, data, lines, name)
    redact.remember(config.basic_auth_users.values())
    tls = config.tls_server_config
    if not tls.enabled:
        return Web(config, name, None)
    folder = Path(name).parent
    files = {
        key: str(folder / getattr(tls, key))
        for key in ("cert_file", "key_file", "client_ca_file") if getattr(tls, key)
    }
    tls = tls.model_copy(update=files)
    config = config.model_copy(update={"tls_server_config": tls})
    return Web(config, name, _context(tls, name, lines))


def _context(tls: TLSServerConfig, name: str, lines: dict[YamlPath, int]) -> ssl.SSLContext:
    def fail(key: str, problem: str) -> ConfigError:
        where: YamlPath = ("tls_server_config", key)
        return ConfigError([f"{name}: {format_path(where)} (line {line_of(where, lines)}):"
                            f" {getattr(tls, key)}: {problem}"])

    def read(key: str, limit: int) -> bytes:
        try:
            return read_bounded(getattr(tls, key), limit)
        except FileProblem as exc:
            raise fail(key, f"cannot read: {exc}") from None

    read("cert_file", MAX_CONFIG_BYTES)
    read("key_file", MAX_SECRET_BYTES)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = TLS_VERSIONS[tls.min_version]
    ctx.maximum_version = TLS_VERSIONS[tls.max_version]
    if tls.prefer_server_cipher_suites:
        ctx.options |= ssl.OP_CIPHER_SERVER_PREFERENCE
    # Offer HTTP/1.1 only: a Go client (Prometheus) that also offers h2 settles on it.
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        # An empty password makes an encrypted key an error instead of a terminal prompt.
        ctx.load_cert_chain(tls.cert_file, tls.key_file, password=b"")
    except (ssl.SSLError, OSError) as exc:
        raise fail("key_file", "not a PEM private key matching cert_file"
                   f" ({getattr(exc, 'reason', None) or exc.strerror or exc})") from None
    ctx.verify_mode = VERIFY_MODES[tls.client_auth_type]
    if tls.client_ca_file:
        ca = read("client_ca_file", MAX_CONFIG_BYTES)
        try:
            ctx.load_verify_locations(cadata=ca.decode("ascii", errors="replace"))
        except (ssl.SSLError, ValueError) as exc:
            raise fail("client_ca_file", f"no PEM CA certificate in it ({exc})") from None
    return ctx
