"""The smallest client of the Prometheus HTTP API the diagnosis and the report need: instant
queries at a given time (vectors, or the raw samples of a range selector) and range queries.
Only ``/api/v1/query`` and ``/api/v1/query_range`` are used, which Prometheus, Thanos Query,
Mimir and VictoriaMetrics all serve the same way, so one client reads any of them.

Every way a query can fail (unreachable, a non-200, a body that is not the API's JSON, an
``error`` status) raises :class:`PrometheusError` with one line a person can act on; the
CLI prints it and exits 3, never with a traceback.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

#: Error text from the server is cut here: a proxy's HTML error page is no one-liner.
_MAX_DETAIL = 200


class SourceError(Exception):
    """A diagnosis source (Prometheus, or an exporter's API) could not answer; the message
    is one line."""


class PrometheusError(SourceError):
    """The Prometheus-compatible API could not answer."""


@dataclass(frozen=True)
class Sample:
    """One series of an instant vector; ``value`` is None for NaN and infinities (a P95
    over no requests, a ratio of zeros): absent, never a number the chain could judge."""

    labels: Mapping[str, str]
    value: float | None


@dataclass(frozen=True)
class Series:
    """One series of a range vector: its samples as (unix time, value), None as in Sample."""

    labels: Mapping[str, str]
    samples: tuple[tuple[float, float | None], ...]


def _finite(text: str) -> float | None:
    value = float(text)
    return value if math.isfinite(value) else None


class PromClient:
    """Instant queries against one base URL (``http://prometheus:9090``, or a Mimir or
    Thanos prefix such as ``http://mimir/prometheus``)."""

    def __init__(self, base_url: str, timeout: float = 30.0,
                 headers: Mapping[str, str] | None = None) -> None:
        self.base = base_url.rstrip("/")
        self.timeout = timeout
        self.headers = dict(headers or {})

    def query(self, expr: str, at: float) -> list[Sample]:
        data = self._data("query", {"query": expr, "time": f"{at:.3f}"})
        kind, result = data.get("resultType"), data.get("result")
        if kind == "scalar" and isinstance(result, list):
            return [Sample({}, _finite(str(result[1])))]
        if kind != "vector" or not isinstance(result, list):
            raise PrometheusError(f"{self.base}: expected an instant vector, got {kind}")
        return [Sample(dict(item.get("metric", {})), _finite(str(item["value"][1])))
                for item in result]

    def query_series(self, expr: str, at: float) -> list[Series]:
        """A range selector (``x[1h]``) at ``at``: every raw sample of each series."""
        return self._matrix(self._data("query", {"query": expr, "time": f"{at:.3f}"}))

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        return self._matrix(self._data("query_range", {
            "query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step:g}"}))

    def _matrix(self, data: Mapping[str, Any]) -> list[Series]:
        kind, result = data.get("resultType"), data.get("result")
        if kind != "matrix" or not isinstance(result, list):
            raise PrometheusError(f"{self.base}: expected a range vector, got {kind}")
        return [Series(dict(item.get("metric", {})),
                       tuple((float(t), _finite(str(v))) for t, v in item["values"]))
                for item in result]

    def _data(self, endpoint: str, params: Mapping[str, str]) -> Mapping[str, Any]:
        # POST, not GET: the longest expressions (subqueries with gates) would otherwise
        # meet the URL length limits of proxies in front of Mimir or Thanos.
        req = urllib.request.Request(
            f"{self.base}/api/v1/{endpoint}", data=urllib.parse.urlencode(params).encode(),
            method="POST",
            headers={"Content-Type": "application/x-www-form-urlencoded",
                     "Accept": "application/json", **self.headers},
        )
        doc = fetch_json(req, self.base, self.timeout, PrometheusError)
        if not isinstance(doc, dict):
            raise PrometheusError(f"{self.base} did not answer with the Prometheus API's JSON")
        if doc.get("status") != "success":
            raise PrometheusError(f"{self.base}: query failed: {doc.get('error', doc)}")
        data = doc.get("data")
        if not isinstance(data, dict):
            raise PrometheusError(f"{self.base}: the query answer has no data")
        return data


def fetch_json(req: urllib.request.Request, where: str, timeout: float,
               error: type[SourceError] = SourceError) -> Any:
    """The JSON body of ``req``; every failure is ``error`` with one line."""
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
    except urllib.error.HTTPError as exc:
        raise error(f"{where} answered HTTP {exc.code}: {_detail(exc.read())}") from None
    except urllib.error.URLError as exc:
        raise error(f"cannot reach {where}: {_reason(exc.reason)}") from None
    except TimeoutError:
        raise error(f"cannot reach {where}: no answer within {timeout:g}s") from None
    except OSError as exc:  # reset mid-body, and the like
        raise error(f"cannot reach {where}: {_reason(exc)}") from None
    try:
        return json.loads(raw)
    except ValueError:
        raise error(f"{where} did not answer with JSON (is this the right base URL?)") from None


def _reason(reason: object) -> str:
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    return str(reason) or type(reason).__name__


def _detail(raw: bytes) -> str:
    """The API's ``error`` field when the body is its JSON, else the start of the body."""
    text = raw.decode("utf-8", "replace")
    try:
        doc = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict) and doc.get("error"):
        text = str(doc["error"])
    line = " ".join(text.split())
    return line[:_MAX_DETAIL] or "(empty body)"
