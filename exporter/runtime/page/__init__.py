"""The exporter's ``/`` page: ``shell`` (the document, its stylesheet and refresh script),
``verdict`` (the diagnosis at the top), ``tiles`` (one per probe, path, engine and GPU) with
``spark`` (their inline SVG sparklines), ``checks`` (the checks table), ``fmt`` (escaping,
redaction and units)."""

from exporter.runtime.page.shell import LIVE_PATH, REFRESH_SECONDS, View, document, live
from exporter.runtime.page.verdict import verdict_html

__all__ = ["LIVE_PATH", "REFRESH_SECONDS", "View", "document", "live", "verdict_html"]
