"""The three files of a report. Imports matplotlib (the ``report`` extra): the command
imports this module before it queries anything, so a missing extra is one line."""

from __future__ import annotations

from exporter.report import html, markdown, plots, tables
from exporter.report.model import Report


def all_formats(r: Report) -> dict[str, str]:
    sections = tables.sections(r)
    return {
        "report.html": html.render(r, sections, plots.plots(r)),
        "report.md": markdown.render(r, sections),
        "report.json": r.model_dump_json(indent=1) + "\n",
    }
