"""``--model`` omitted: ask the server which model it serves (``GET /v1/models``), as
``vllm bench serve`` does. Exactly one is used; none or several is an error naming them,
since guessing would benchmark a model nobody chose.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import aiohttp

from exporter.bench.errors import BenchError
from exporter.probing.request import target_of

#: The model list is small; a bound keeps a wrong URL's huge page out of memory.
MAX_MODELS_BYTES = 1 << 20
#: Shown in the error; a gateway serving hundreds gets the first ones and a count.
LIST_MAX = 10


def models_url(endpoint: str) -> str:
    """The model list beside an endpoint: ``.../v1/chat/completions`` -> ``.../v1/models``
    (a path prefix before it is kept, for a gateway), else ``/v1/models`` at the root."""
    parts = urlsplit(endpoint)
    path = parts.path.rstrip("/")
    for suffix in ("/chat/completions", "/completions"):
        if path.endswith(suffix):
            return urlunsplit(parts._replace(path=path[: -len(suffix)] + "/models", query=""))
    return urlunsplit(parts._replace(path="/v1/models", query=""))


def pick_model(ids: list[str], where: str) -> str:
    if len(ids) == 1:
        return ids[0]
    if not ids:
        raise BenchError(f"--model omitted and {where} serves no model; pass --model")
    shown = ", ".join(ids[:LIST_MAX]) + (f" (and {len(ids) - LIST_MAX} more)"
                                         if len(ids) > LIST_MAX else "")
    raise BenchError(f"--model omitted and {where} serves {len(ids)} models: {shown}; "
                     f"pass --model NAME")


def _ids(doc: Any) -> list[str] | None:
    data = doc.get("data") if isinstance(doc, dict) else None
    if not isinstance(data, list):
        return None
    ids = [m.get("id") for m in data if isinstance(m, dict)]
    return [i for i in ids if isinstance(i, str) and i] if len(ids) == len(data) else None


async def _fetch(url: str, api_key: str | None, ca_file: str | None, timeout: float) -> Any:
    ctx: ssl.SSLContext | bool = True
    if urlsplit(url).scheme == "https" and ca_file:
        ctx = ssl.create_default_context(cafile=ca_file)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    async with aiohttp.ClientSession(
        timeout=aiohttp.ClientTimeout(total=timeout),
        connector=aiohttp.TCPConnector(ssl=ctx),
    ) as session, session.get(url, headers=headers, allow_redirects=False) as resp:
        if resp.status != 200:
            raise BenchError(f"--model omitted and GET {_shown(url)} answered HTTP "
                             f"{resp.status}; pass --model")
        body = await resp.content.read(MAX_MODELS_BYTES + 1)
        if len(body) > MAX_MODELS_BYTES:
            raise BenchError(f"--model omitted and GET {_shown(url)} sent over "
                             f"{MAX_MODELS_BYTES} bytes; pass --model")
        try:
            return json.loads(body)
        except ValueError:
            return None


def _shown(url: str) -> str:
    # No credentials or query in an error line: the host:port and the path only.
    parts = urlsplit(url)
    return urlunsplit(parts._replace(netloc=target_of(url), query=""))


def discover_model(endpoint: str, api_key: str | None, ca_file: str | None,
                   timeout: float) -> str:
    """The one model the server lists, or a BenchError (exit 2) saying why not."""
    url = models_url(endpoint)
    try:
        doc = asyncio.run(_fetch(url, api_key, ca_file, timeout))
    except BenchError:
        raise
    except (aiohttp.ClientError, OSError, TimeoutError, ssl.SSLError) as exc:
        raise BenchError(f"--model omitted and GET {_shown(url)} failed "
                         f"({type(exc).__name__}); pass --model") from None
    ids = _ids(doc)
    if ids is None:
        raise BenchError(f"--model omitted and GET {_shown(url)} is not an OpenAI model "
                         f"list; pass --model")
    return pick_model(ids, f"GET {_shown(url)}")
