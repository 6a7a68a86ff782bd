"""Who may read the endpoints, from the web config: basic-auth users (bcrypt hashes) and the
SANs a client certificate must carry; and the headers it adds to every response.

bcrypt is slow on purpose (50-300 ms a check), so checks run on two threads of their own,
never on the event loop and never in the default executor other work shares; a successful
(user, password, hash) is remembered, as exporter-toolkit does, so a scraper pays once. A
flood of wrong passwords queues at most MAX_PENDING checks; past that it gets 401 unchecked,
which grants nothing and costs nothing.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import ipaddress
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor

import bcrypt
from aiohttp import web

from exporter.config.web import Web
from exporter.runtime.logs import Throttle

log = logging.getLogger("exporter.http")

MAX_PENDING = 8
CACHE_SIZE = 64
REALM = 'Basic realm="llm-latency-exporter", charset="UTF-8"'

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _checkpw(password: str, hashed: str) -> bool:
    try:
        return bcrypt.checkpw(password.encode("utf-8", "surrogateescape"), hashed.encode())
    except ValueError:  # longer than bcrypt's 72 bytes, or a hash it cannot read
        return False


def _san(kind: str, value: str) -> str:
    """A SAN as Go prints it, so client_allowed_sans reads the same as for node_exporter."""
    if kind == "IP Address":
        try:
            return ipaddress.ip_address(value.strip()).compressed
        except ValueError:
            return value
    return value


class Guard:
    def __init__(self, current: Callable[[], Web | None]) -> None:
        self._current = current
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="bcrypt")
        self._verified: OrderedDict[bytes, None] = OrderedDict()
        self._pending = 0
        self._throttle = Throttle()

    def install(self, app: web.Application) -> None:
        app.middlewares.append(self.middleware)
        app.on_response_prepare.append(self._headers)

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)

    async def _headers(self, request: web.Request, response: web.StreamResponse) -> None:
        current = self._current()
        if current is not None:
            response.headers.update(current.config.http_server_config.headers)

    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        current = self._current()
        if current is None or request.path in current.config.auth_excluded_paths:
            return await handler(request)
        problem = self._san_problem(request, current) or await self._basic_problem(
            request, current)
        if problem is None:
            return await handler(request)
        extra = self._throttle.allow()
        if extra is not None:
            log.debug("unauthorized request",
                      extra={**extra, "remote": request.remote, "problem": problem})
        headers = {"WWW-Authenticate": REALM} if current.config.basic_auth_users else {}
        return web.Response(status=401, text="Unauthorized\n", headers=headers)

    def _san_problem(self, request: web.Request, current: Web) -> str | None:
        allowed = current.config.tls_server_config.client_allowed_sans
        if not allowed or current.tls is None or request.transport is None:
            return None
        cert = request.transport.get_extra_info("peercert")
        if not cert:
            return None  # VerifyClientCertIfGiven and none given; the Require modes never get here
        names = {_san(kind, value) for kind, value in cert.get("subjectAltName", ())}
        if names & {_san("IP Address", a) if _is_ip(a) else a for a in allowed}:
            return None
        return "client certificate has none of client_allowed_sans"

    async def _basic_problem(self, request: web.Request, current: Web) -> str | None:
        users = current.config.basic_auth_users
        if not users:
            return None
        credentials = _basic_credentials(request.headers.get("Authorization", ""))
        if credentials is None:
            return "no or malformed basic auth"
        if await self._verify(*credentials, users):
            return None
        return "wrong user or password"

    async def _verify(self, user: str, password: str, users: dict[str, str]) -> bool:
        stored = users.get(user)
        key = hashlib.sha256(
            "\0".join((user, stored or "", password)).encode("utf-8", "surrogateescape")
        ).digest()
        if stored is not None and key in self._verified:
            self._verified.move_to_end(key)
            return True
        if self._pending >= MAX_PENDING:
            return False
        self._pending += 1
        try:
            # An unknown user is checked against a real hash too: the answer takes as long.
            ok = await asyncio.get_running_loop().run_in_executor(
                self._pool, _checkpw, password, stored or next(iter(users.values())))
        finally:
            self._pending -= 1
        if not ok or stored is None:
            return False
        self._verified[key] = None
        while len(self._verified) > CACHE_SIZE:
            self._verified.popitem(last=False)
        return True


def _basic_credentials(header: str) -> tuple[str, str] | None:
    """(user, password) of an ``Authorization: Basic`` header (RFC 7617, UTF-8), or None."""
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(token.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return None
    user, sep, password = decoded.partition(":")
    return (user, password) if sep else None


def _is_ip(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True
