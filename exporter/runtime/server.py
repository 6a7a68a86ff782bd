"""HTTP endpoints on the exporter's event loop: /metrics, /-/healthy, /-/ready,
/api/v1/diagnosis (the last embedded diagnosis as JSON), and / (verdict and checks)."""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Protocol

from aiohttp import web
from prometheus_client import CollectorRegistry
from prometheus_client.exposition import choose_encoder

from exporter import __version__
from exporter.checks.base import Check
from exporter.diagnosis.result import SCHEMA_ID, Diagnosis
from exporter.runtime import page
from exporter.runtime.scheduler import CheckState


class Served(Protocol):
    """What the endpoints read from the running exporter (the app implements it), so this
    module needs nothing of the app's wiring."""

    registry: CollectorRegistry
    config_path: str

    async def metrics_body(self, openmetrics: bool, gzipped: bool) -> bytes: ...

    @property
    def checks(self) -> Sequence[Check]: ...

    @property
    def ready(self) -> bool: ...

    @property
    def diagnosis(self) -> Diagnosis | None: ...

    def check_state(self, name: str) -> CheckState | None: ...


APP_KEY: web.AppKey[Served] = web.AppKey("exporter")


async def handle_metrics(request: web.Request) -> web.Response:
    app = request.app[APP_KEY]
    _, content_type = choose_encoder(request.headers.get("Accept", ""))
    openmetrics = content_type.startswith("application/openmetrics-text")
    gzipped = "gzip" in request.headers.get("Accept-Encoding", "")
    body = await app.metrics_body(openmetrics, gzipped)
    headers = {"Content-Type": content_type}
    if gzipped:
        headers["Content-Encoding"] = "gzip"
    return web.Response(body=body, headers=headers)


async def handle_healthy(request: web.Request) -> web.Response:
    return web.Response(text="OK\n")


async def handle_ready(request: web.Request) -> web.Response:
    app = request.app[APP_KEY]
    if app.ready:
        return web.Response(text="Ready\n")
    return web.Response(status=503, text="Not ready: waiting for the first run of every check\n")


async def handle_diagnosis(request: web.Request) -> web.Response:
    diagnosis = request.app[APP_KEY].diagnosis
    if diagnosis is None:
        # Same shape as an answer, so a client reads "unknown" rather than a parse error.
        body = {"schema": SCHEMA_ID, "status": "unknown", "source": "exporter", "verdicts": [],
                "steps": [], "reason": "no evaluation yet"}
        return web.json_response(body, status=503)
    return web.json_response(diagnosis.to_json())


async def handle_index(request: web.Request) -> web.Response:
    app = request.app[APP_KEY]
    rows = []
    for check in app.checks:
        st = app.check_state(check.name)
        outcome = st.last_outcome if st else ""
        rows.append(
            "<tr>"
            + "".join(
                f"<td>{html.escape(str(v))}</td>"
                for v in (
                    check.name,
                    f"{check.interval:g}s",
                    check.describe(),
                    outcome or "pending",
                    f"{st.last_duration * 1000:.1f} ms" if st and st.runs else "",
                    st.last_error if st else "",
                )
            )
            + "</tr>"
        )
    table = (
        "<table><tr><th>check</th><th>interval</th><th>target</th><th>last outcome</th>"
        "<th>duration</th><th>last error</th></tr>" + "".join(rows) + "</table>"
        if rows
        else "<p>No checks are configured.</p>"
    )
    diagnosis = app.diagnosis
    text = f"""<!doctype html>
<html><head><meta charset="utf-8"><title>llm-latency-exporter</title>
<style>body{{font-family:sans-serif;margin:2em}}td,th{{padding:.2em .8em;text-align:left}}
tr:nth-child(even){{background:#f4f4f4}}{page.STYLE}</style></head>
<body><h1>llm-latency-exporter {html.escape(__version__)}</h1>
{page.section(diagnosis.to_json() if diagnosis is not None else None)}
<ul><li><a href="metrics">/metrics</a> Prometheus metrics</li>
<li><a href="-/healthy">/-/healthy</a> liveness</li>
<li><a href="-/ready">/-/ready</a> readiness (after the first run of every check)</li>
<li><a href="api/v1/diagnosis">/api/v1/diagnosis</a> the last diagnosis (JSON)</li></ul>
<h2>Checks</h2>{table}
<p>Config: {html.escape(app.config_path)} (reload with SIGHUP)</p>
</body></html>"""
    return web.Response(text=text, content_type="text/html")


def make_web_app(app: Served) -> web.Application:
    web_app = web.Application()
    web_app[APP_KEY] = app
    web_app.router.add_get("/metrics", handle_metrics)
    web_app.router.add_get("/-/healthy", handle_healthy)
    web_app.router.add_get("/-/ready", handle_ready)
    web_app.router.add_get("/api/v1/diagnosis", handle_diagnosis)
    web_app.router.add_get("/", handle_index)
    return web_app
