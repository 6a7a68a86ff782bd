"""The verdict at the top of the ``/`` page: rendered on the server for the first paint, then
refreshed by a small inline script from /api/v1/diagnosis (no external assets, so the page
works on a host with no route out). Both renderers read the same JSON (``Diagnosis.to_json``)
and produce the same sections: status, the primary verdict's summary, its evidence table and
actions, the secondary verdicts, and what was ruled out."""

from __future__ import annotations

import html
from typing import Any

#: Seconds between refreshes of the verdict section.
REFRESH_SECONDS = 5

STYLE = """#diagnosis{border:1px solid #ccc;padding:.5em 1em;margin-bottom:1.5em}
#diagnosis .healthy{color:#1a7f37}#diagnosis .degraded{color:#9a6700}
#diagnosis .failing{color:#cf222e}#diagnosis .unknown{color:#57606a}"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value))


def _num(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return _e(value)


def _evidence(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return ""
    body = "".join(
        "<tr>" + "".join(f"<td>{c}</td>" for c in (
            _e(r.get("metric")),
            _e(", ".join(f"{k}={v}" for k, v in (r.get("labels") or {}).items())),
            _num(r.get("value")), _num(r.get("threshold")), _num(r.get("baseline")),
            _e(r.get("window")),
        )) + "</tr>"
        for r in rows
    )
    return ("<table><tr><th>metric</th><th>labels</th><th>value</th><th>threshold</th>"
            f"<th>baseline</th><th>window</th></tr>{body}</table>")


def _scope(scope: dict[str, str]) -> str:
    return ", ".join(f"{k} {v}" for k, v in scope.items())


def verdict_html(doc: dict[str, Any] | None) -> str:
    """The inside of ``<section id="diagnosis">`` for one diagnosis JSON (None: not yet)."""
    if doc is None or not doc.get("at"):
        return '<h2 class="unknown">Diagnosis: waiting for the first evaluation</h2>'
    status = str(doc.get("status", "unknown"))
    parts = [
        f'<h2 class="{_e(status)}">Diagnosis: {_e(status)}</h2>',
        f"<p>{_e(doc.get('source'))} windows of {_e(doc.get('window'))}, at {_e(doc.get('at'))}"
        "</p>",
    ]
    verdicts = doc.get("verdicts") or []
    if not verdicts:
        parts.append("<p>healthy: no verdict</p>" if status == "healthy" else
                     "<p>No verdict.</p>")
    else:
        v = verdicts[0]
        parts.append(
            f"<h3>{_e(v.get('layer'))} / {_e(v.get('cause'))}: {_e(v.get('summary'))}</h3>"
            f"<p>{_e(_scope(v.get('scope') or {}))}</p>"
            + _evidence(v.get("evidence") or [])
        )
        if v.get("actions"):
            parts.append("<ul>" + "".join(f"<li>{_e(a)}</li>" for a in v["actions"]) + "</ul>")
        if len(verdicts) > 1:
            parts.append("<h3>Also</h3><ul>" + "".join(
                f"<li>{_e(s.get('layer'))} / {_e(s.get('cause'))}: {_e(s.get('summary'))}</li>"
                for s in verdicts[1:]
            ) + "</ul>")
    cleared = [s for s in doc.get("steps") or [] if s.get("result") == "ruled_out"]
    if cleared:
        parts.append("<h3>Ruled out</h3><ul>" + "".join(
            f"<li>{_e(s.get('step'))}"
            + (": " + _e(", ".join(str(e.get("metric")) for e in s.get("evidence") or []))
               if s.get("evidence") else "")
            + "</li>"
            for s in cleared
        ) + "</ul>")
    unknown = [str(s.get("step")) for s in doc.get("steps") or [] if s.get("result") == "no_data"]
    if unknown:
        parts.append(f"<p>No data for: {_e(', '.join(unknown))}</p>")
    return "".join(parts)


# The same sections as verdict_html, from the same JSON; textContent-safe via esc().
SCRIPT = """<script>
(function(){
var el=document.getElementById('diagnosis');
function esc(v){return String(v==null?'':v).replace(/[&<>"']/g,function(c){
return {'&':'&amp;','<':'&lt;','>':'&gt;','"':'&quot;',"'":'&#x27;'}[c];});}
function num(v){return typeof v==='number'&&!Number.isInteger(v)?
String(Number(v.toPrecision(4))):esc(v);}
function scope(s){return Object.keys(s||{}).map(function(k){return k+' '+s[k];}).join(', ');}
function ev(rows){if(!rows||!rows.length)return '';return '<table><tr><th>metric</th>'+
'<th>labels</th><th>value</th><th>threshold</th><th>baseline</th><th>window</th></tr>'+
rows.map(function(r){var l=Object.keys(r.labels||{}).map(function(k){
return k+'='+r.labels[k];}).join(', ');return '<tr><td>'+esc(r.metric)+'</td><td>'+esc(l)+
'</td><td>'+num(r.value)+'</td><td>'+num(r.threshold)+'</td><td>'+num(r.baseline)+
'</td><td>'+esc(r.window)+'</td></tr>';}).join('')+'</table>';}
function li(xs,f){return '<ul>'+xs.map(function(x){return '<li>'+f(x)+'</li>';}).join('')+
'</ul>';}
function render(d){if(!d||!d.at)return '<h2 class="unknown">Diagnosis: waiting for the '+
'first evaluation</h2>';var st=d.status||'unknown',h='<h2 class="'+esc(st)+
'">Diagnosis: '+esc(st)+'</h2><p>'+esc(d.source)+' windows of '+esc(d.window)+', at '+
esc(d.at)+'</p>',vs=d.verdicts||[],steps=d.steps||[];
if(!vs.length){h+=st==='healthy'?'<p>healthy: no verdict</p>':'<p>No verdict.</p>';}
else{var v=vs[0];h+='<h3>'+esc(v.layer)+' / '+esc(v.cause)+': '+esc(v.summary)+'</h3><p>'+
esc(scope(v.scope))+'</p>'+ev(v.evidence);if(v.actions&&v.actions.length)h+=li(v.actions,esc);
if(vs.length>1)h+='<h3>Also</h3>'+li(vs.slice(1),function(s){return esc(s.layer)+' / '+
esc(s.cause)+': '+esc(s.summary);});}
var out=steps.filter(function(s){return s.result==='ruled_out';});
if(out.length)h+='<h3>Ruled out</h3>'+li(out,function(s){var e=(s.evidence||[]).map(
function(x){return x.metric;}).join(', ');return esc(s.step)+(e?': '+esc(e):'');});
var nd=steps.filter(function(s){return s.result==='no_data';}).map(function(s){
return s.step;});if(nd.length)h+='<p>No data for: '+esc(nd.join(', '))+'</p>';return h;}
function tick(){fetch('api/v1/diagnosis',{cache:'no-store'}).then(function(r){
return r.json();}).then(function(d){el.innerHTML=render(d);}).catch(function(){});}
setInterval(tick,REFRESH_MS);
})();
</script>""".replace("REFRESH_MS", str(REFRESH_SECONDS * 1000))


def section(doc: dict[str, Any] | None) -> str:
    """The verdict section with its refresh script, for the top of the page."""
    return f'<section id="diagnosis">{verdict_html(doc)}</section>{SCRIPT}'
