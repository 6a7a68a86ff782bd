"""The ``/`` document: the header and links around the live part (verdict, tiles, checks),
one stylesheet and one small script, all inline so the page works with no route out.

The script swaps in the live part from ``live`` (the same renderer, as an HTML fragment)
every few seconds while the tab is visible, so nothing is rendered twice in two languages;
when a refresh fails the page says since when it is stale instead of going blank.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from exporter.checks.base import Check
from exporter.config.models import Config
from exporter.diagnosis.observations import Observations
from exporter.diagnosis.thresholds import resolve
from exporter.diagnosis.trends import Point
from exporter.runtime.page import budget, checks, verdict
from exporter.runtime.page.fmt import esc
from exporter.runtime.page.tiles import tiles
from exporter.runtime.scheduler import CheckState

#: Seconds between refreshes of the live part.
REFRESH_SECONDS = 5
#: Where the script fetches the live part, relative to the page (so a path prefix works).
LIVE_PATH = "live"


@dataclass(frozen=True)
class View:
    """Everything one render reads, taken from the running exporter at one moment."""

    version: str
    config_path: str
    config: Config
    checks: Sequence[tuple[Check, CheckState | None]]
    diagnosis: dict[str, Any] | None  # Diagnosis.to_json(), None before the first
    observations: Observations | None
    trend: Sequence[Point]
    now: float


STYLE = """
:root{--fg:#1f2328;--muted:#59636e;--line:#d1d9e0;--bg:#fff;--tile:#f6f8fa;--ok:#1a7f37;
--warn:#9a6700;--bad:#cf222e;--accent:#0969da}
*{box-sizing:border-box}
body{font:15px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;color:var(--fg);
background:var(--bg);margin:0 auto;padding:1rem 1.5rem 2rem;max-width:1400px}
header{display:flex;flex-wrap:wrap;align-items:baseline;gap:.25rem 1rem;
border-bottom:1px solid var(--line);padding-bottom:.5rem;margin-bottom:1rem}
header h1{font-size:1.25rem;margin:0}header nav{display:flex;flex-wrap:wrap;gap:.25rem .9rem}
a{color:var(--accent)}h2{font-size:1.1rem;margin:1.2rem 0 .5rem}h3{font-size:1rem;margin:.6rem 0}
.muted,.caption,.sub{color:var(--muted)}.sub{margin:0 0 .4rem;font-size:.85rem}
#stale{color:var(--bad);font-weight:600}
#diagnosis{border:1px solid var(--line);border-left:6px solid var(--muted);border-radius:6px;
padding:.25rem 1rem .5rem;background:var(--tile)}
#diagnosis h2{margin:.5rem 0 .25rem}#diagnosis.s-healthy{border-left-color:var(--ok)}
#diagnosis.s-degraded{border-left-color:var(--warn)}#diagnosis.s-failing{border-left-color:var(--bad)}
.healthy{color:var(--ok)}.degraded{color:var(--warn)}.failing{color:var(--bad)}
.unknown{color:var(--muted)}.pending{color:var(--warn);font-style:italic}
#diagnosis li,#diagnosis p,#diagnosis h3{overflow-wrap:anywhere}
.tiles{display:grid;grid-template-columns:repeat(auto-fill,minmax(270px,1fr));gap:.75rem}
.tile{border:1px solid var(--line);border-radius:6px;padding:.5rem .75rem;background:var(--tile);
min-width:0}.tile.down{border-color:var(--bad)}.tile h3{margin:0;overflow-wrap:anywhere}
.tile .kind{margin:0;font-size:.75rem;text-transform:uppercase;letter-spacing:.05em;
color:var(--muted)}
.row{display:grid;grid-template-columns:minmax(0,1fr) 48%;align-items:center;gap:.5rem;
padding:.3rem 0;border-top:1px solid var(--line)}
.row .k{display:block;color:var(--muted);font-size:.8rem}.row .v{display:block;
font-variant-numeric:tabular-nums;font-weight:600;overflow-wrap:anywhere}
.row .v.bad{color:var(--bad)}
svg.spark{width:100%;height:34px;display:block;background:var(--bg);border-radius:3px}
svg.spark path{fill:none;vector-effect:non-scaling-stroke}
svg.spark .line{stroke:var(--accent);stroke-width:1.5;stroke-linecap:round;
stroke-linejoin:round}svg.spark .dot{stroke:var(--accent);stroke-width:4;stroke-linecap:round}
svg.spark .limit{stroke:var(--bad);stroke-width:1;stroke-dasharray:3 3}
table{border-collapse:collapse;width:100%;font-size:.9rem}
th,td{padding:.3rem .6rem;text-align:left;vertical-align:top;border-bottom:1px solid var(--line)}
th{background:var(--tile)}td.error,td.target{overflow-wrap:anywhere}
.o{display:inline-block;padding:0 .45rem;border-radius:1rem;font-weight:600;font-size:.85rem;
color:#fff;background:var(--muted)}.o-success{background:var(--ok)}.o-error{background:var(--bad)}
.o-timeout{background:var(--warn)}
@media (max-width:700px){
body{padding:.75rem}.tiles{grid-template-columns:1fr}
table thead{display:none}table,tbody,tr,td{display:block;width:100%}
tr{border:1px solid var(--line);border-radius:6px;margin-bottom:.5rem;padding:.25rem 0}
td{display:flex;gap:1rem;justify-content:space-between;border:0;padding:.15rem .6rem}
td::before{content:attr(data-label);color:var(--muted);flex:none}
td>*{min-width:0}td{overflow-wrap:anywhere;text-align:right}td:empty{display:none}}
"""

SCRIPT = """
(function(){
var live=document.getElementById('live'),stale=document.getElementById('stale'),ok=Date.now();
function tick(){if(document.hidden)return;
fetch('LIVE',{cache:'no-store'}).then(function(r){if(!r.ok)throw new Error(r.status);
return r.text();}).then(function(t){live.innerHTML=t;ok=Date.now();stale.textContent='';})
.catch(function(){stale.textContent='not updated for '+Math.round((Date.now()-ok)/1000)+
' s (the exporter does not answer)';});}
setInterval(tick,MS);document.addEventListener('visibilitychange',tick);
})();
""".replace("LIVE", LIVE_PATH).replace("MS", str(REFRESH_SECONDS * 1000))


def live(view: View) -> str:
    """The part the script refreshes: verdict, tiles, checks."""
    parts = [verdict.section(view.diagnosis)]
    if view.observations is not None:
        parts.append(tiles(view.observations, view.trend, resolve(view.config)))
    parts.append("<h2>Checks</h2>" + checks.table(view.checks, view.now))
    return "".join(parts)


def document(view: View) -> str:
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1">
<title>llm-latency-exporter</title><link rel="icon" href="data:,">
<style>{STYLE}{budget.STYLE}</style></head>
<body><header><h1>llm-latency-exporter {esc(view.version)}</h1>
<nav><a href="metrics">/metrics</a><a href="-/healthy">/-/healthy</a>
<a href="-/ready">/-/ready</a><a href="api/v1/diagnosis">/api/v1/diagnosis</a></nav>
<span id="stale" role="status"></span></header>
<main id="live">{live(view)}</main>
<footer class="muted"><p>Config: {esc(view.config_path)} (reload with SIGHUP). This page
refreshes itself every {REFRESH_SECONDS} s.</p></footer>
<script>{SCRIPT}</script></body></html>"""
