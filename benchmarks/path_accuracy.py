"""Path check vs Debian's prometheus-smokeping-prober on the same simulated carrier paths.

The namespace lab of the tests (tests/support/netlab.py): three carrier namespaces whose echoes are
answered by the userspace responder (tests/support/netlab_responder.py) with a delay, uniform jitter
and loss, and two client namespaces, one per prober, each with its own veth to every
carrier, so the responders' logs (the ground truth) tell the two probers' echoes apart by
source address. Both probers run side by side for ``--duration`` seconds at the same echo
rate, 10 every 3 s per target, both on raw ICMP sockets (root, ping_group_range closed):

* ours: ``llm-latency-exporter run`` with bursts of 20 echoes 250 ms apart every 6 s
  (timeout 1 s; route checks only at start);
* reference: ``prometheus-smokeping-prober --privileged -i 300ms`` (continuous).

Both are scraped every 15 s, as Prometheus would. Reported per prober and path:

* RTT error: mean RTT from the histogram (_sum / _count) minus the mean delay the responder
  logged for the replies it sent that prober (kernel receive to reply sent);
* loss error: the loss from the cumulative counters, (sent - received) / sent, minus the
  responder's own dropped / echoes for that prober, read at one scrape. Ours is read at a
  scrape where, for that target, every echo the responder logged is settled (between
  bursts); smokeping_prober is continuous, so any scrape has echoes in flight;
* CPU seconds per 1000 echoes (utime + stime from /proc over the run after a 10 s warm-up,
  echoes counted in the responders' logs) and resident memory at the end.

Run from the repository root (root; apt-get install prometheus-smokeping-prober nftables iproute2):
    .venv/bin/python -m benchmarks.path_accuracy           # --duration 120 (seconds)
Exit status 1 unless ours' mean |RTT error| <= smokeping_prober's, ours' mean |loss error|
< smokeping_prober's, and ours' CPU per 1000 echoes <= 2x smokeping_prober's.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from tests.support.netlab import Lab, Responder, in_netns, lab_unavailable
from tests.support.samples import parse

ROOT = Path(__file__).resolve().parent.parent

PATHS = {  # name: (delay s, uniform jitter +- s, loss), as in the issue
    "ct": (0.150, 0.005, 0.001),
    "cu": (0.230, 0.025, 0.05),
    "cm": (0.280, 0.040, 0.08),
}
SMOKEPING = "prometheus-smokeping-prober"
WARMUP = 10.0
SCRAPE_EVERY = 15.0
OURS_PORT, SMOKEPING_PORT = 9400, 9374
CLK_TCK = os.sysconf("SC_CLK_TCK")


@dataclass
class Prober:
    name: str
    ns: str
    port: int
    sources: dict[str, str]  # path -> this prober's address on its link to the path
    targets: dict[str, str]  # path -> the carrier's address on that link
    proc: subprocess.Popen[bytes] | None = None

    def scrape(self) -> str:
        def get() -> str:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics", timeout=5) as r:
                return str(r.read().decode())

        return in_netns(self.ns, get)

    def cpu_seconds(self) -> float:
        assert self.proc is not None
        fields = Path(f"/proc/{self.proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def rss_mib(self) -> float:
        assert self.proc is not None
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        return float("nan")


def samples(text: str) -> dict[tuple[str, str], float]:
    """(sample name, target) -> value; target is our `target` label or smokeping's `host`."""
    out: dict[tuple[str, str], float] = {}
    for (name, sorted_labels), value in parse(text).items():
        labels = dict(sorted_labels)
        key = labels.get("target") or labels.get("host")
        if key and "le" not in labels:
            out[(name, key)] = out.get((name, key), 0.0) + value
    return out


def counts(prober: Prober, text: str, path: str) -> tuple[float, float, float]:
    """(sent, received, rtt_sum) for one path from one scrape."""
    s = samples(text)
    if prober.name == "ours":
        return (
            s[("llm_path_packets_sent_total", path)],
            s[("llm_path_packets_received_total", path)],
            s[("llm_path_rtt_seconds_sum", path)],
        )
    host = prober.targets[path]
    return (
        s[("smokeping_requests_total", host)],
        s[("smokeping_response_duration_seconds_count", host)],
        s[("smokeping_response_duration_seconds_sum", host)],
    )


def build_lab(lab: Lab) -> tuple[dict[str, Responder], Prober, Prober]:
    ours_ns, smoke_ns = lab.netns("ours"), lab.netns("smoke")
    ours = Prober("ours", ours_ns, OURS_PORT, {}, {})
    smoke = Prober("smokeping_prober", smoke_ns, SMOKEPING_PORT, {}, {})
    responders = {}
    for i, (name, (delay, jitter, loss)) in enumerate(PATHS.items()):
        ns = lab.netns(name)
        for j, prober in enumerate((ours, smoke)):
            net = f"198.18.{10 * j + i}"
            lab.link(prober.ns, f"{net}.1", ns, f"{net}.2")
            prober.sources[name], prober.targets[name] = f"{net}.1", f"{net}.2"
        responders[name] = lab.responder(ns, delay, jitter, loss, seed=i + 1)
    return responders, ours, smoke


def start(lab: Lab, workdir: Path, ours: Prober, smoke: Prober) -> None:
    targets = "\n".join(
        f"    {p}: [{{name: {p}, host: {a}, region: lab}}]" for p, a in ours.targets.items()
    )
    config = workdir / "ours.yaml"
    config.write_text(
        f"server: {{listen_address: '127.0.0.1:{OURS_PORT}', log_level: warning}}\n"
        "paths:\n  interval: 6s\n  burst: 20\n  spacing: 250ms\n  timeout: 1s\n"
        "  route_interval: 1h\n"
        f"  carriers:\n{targets}\n"
    )
    # Debian's default config file adds a localhost target; an empty one leaves the CLI hosts.
    (workdir / "smokeping.yml").write_text("targets: []\n")
    devnull = subprocess.DEVNULL
    ours.proc = lab.spawn(
        ours.ns,
        [sys.executable, "-m", "exporter", "run", "--config", str(config)],
        cwd=ROOT,
        stdout=devnull,
        stderr=devnull,
    )
    smoke.proc = lab.spawn(
        smoke.ns,
        [
            SMOKEPING,
            f"--web.listen-address=127.0.0.1:{SMOKEPING_PORT}",
            f"--config.file={workdir / 'smokeping.yml'}",
            "--privileged",
            "--ping.interval=300ms",
            *smoke.targets.values(),
        ],
        stdout=devnull,
        stderr=devnull,
    )


def wait_ready(prober: Prober, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            prober.scrape()
            return
        except OSError:
            time.sleep(0.2)
    raise SystemExit(f"{prober.name} did not serve /metrics within {timeout:g}s")


def echoes_from(
    responders: dict[str, Responder], prober: Prober, path: str
) -> list[tuple[bool, float, int]]:
    return [(e[4], e[5], e[3]) for e in responders[path].echoes(prober.sources[path])]


def settled_read(
    responders: dict[str, Responder], ours: Prober, path: str, limit: float = 15
) -> tuple[str, list[tuple[bool, float, int]]]:
    """A scrape of ours in which every echo the responder logged for ``path`` is settled."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        before = echoes_from(responders, ours, path)
        text = ours.scrape()
        after = echoes_from(responders, ours, path)
        if len(before) == len(after) == counts(ours, text, path)[0]:
            return text, before
        time.sleep(0.05)
    raise SystemExit(f"ours never settled on {path} within {limit:g}s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=120.0, help="seconds measured (default 120)")
    args = ap.parse_args()
    reason = lab_unavailable()
    if reason is None and shutil.which(SMOKEPING) is None:
        reason = f"{SMOKEPING} is not installed (apt-get install {SMOKEPING})"
    if reason:
        print(f"cannot run: {reason}", file=sys.stderr)
        return 2

    with tempfile.TemporaryDirectory() as tmp:
        lab = Lab(Path(tmp))
        try:
            responders, ours, smoke = build_lab(lab)
            start(lab, Path(tmp), ours, smoke)
            for prober in (ours, smoke):
                wait_ready(prober)
            time.sleep(WARMUP)
            cpu0 = {p.name: p.cpu_seconds() for p in (ours, smoke)}
            n0 = {
                p.name: sum(len(echoes_from(responders, p, path)) for path in PATHS)
                for p in (ours, smoke)
            }
            t0 = time.monotonic()
            while (left := t0 + args.duration - time.monotonic()) > 0:
                time.sleep(min(SCRAPE_EVERY, left))
                for prober in (ours, smoke):
                    prober.scrape()
            cpu1 = {p.name: p.cpu_seconds() for p in (ours, smoke)}
            n1 = {
                p.name: sum(len(echoes_from(responders, p, path)) for path in PATHS)
                for p in (ours, smoke)
            }
            rss = {p.name: p.rss_mib() for p in (ours, smoke)}
            reads: dict[str, dict[str, tuple[str, list[tuple[bool, float, int]]]]] = {
                "ours": {},
                "smokeping_prober": {},
            }
            # The responder logs an echo once its fate is decided (reply sent, or dropped), so
            # a log read right after the scrape is the truth that scrape should match.
            smoke_text = smoke.scrape()
            for path in PATHS:
                reads["smokeping_prober"][path] = (smoke_text, echoes_from(responders, smoke, path))
            for path in PATHS:
                reads["ours"][path] = settled_read(responders, ours, path)
        finally:
            lab.close()

    print(f"path_accuracy: {args.duration:g} s side by side, 10 echoes per 3 s per target each\n")
    print(
        "| prober | path | echoes | mean RTT | responder delay | RTT error"
        " | loss | true loss | loss error |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    summary: dict[str, dict[str, float]] = {}
    for prober in (ours, smoke):
        rtt_errs, loss_errs = [], []
        for path in PATHS:
            text, echoes = reads[prober.name][path]
            sent, received, rtt_sum = counts(prober, text, path)
            applied = statistics.fmean(d for ok, d, _ in echoes if ok)
            true_loss = sum(not ok for ok, _, _ in echoes) / len(echoes)
            rtt, loss = rtt_sum / received, (sent - received) / sent
            rtt_errs.append(abs(rtt - applied))
            loss_errs.append(abs(loss - true_loss))
            print(
                f"| {prober.name} | {path} | {len(echoes)} | {rtt * 1e3:.3f} ms"
                f" | {applied * 1e3:.3f} ms | {(rtt - applied) * 1e6:+.0f} µs | {loss:.4%}"
                f" | {true_loss:.4%} | {(loss - true_loss) * 100:+.3f} pp |"
            )
        echoes_run = n1[prober.name] - n0[prober.name]
        summary[prober.name] = {
            "rtt_err_us": statistics.fmean(rtt_errs) * 1e6,
            "loss_err_pp": statistics.fmean(loss_errs) * 100,
            "cpu_per_1000": (cpu1[prober.name] - cpu0[prober.name]) / echoes_run * 1000,
            "cpu_s": cpu1[prober.name] - cpu0[prober.name],
            "echoes": echoes_run,
            "rss_mib": rss[prober.name],
        }
    print(
        "\n| prober | mean abs RTT error | mean abs loss error | CPU s / 1000 echoes"
        " | CPU s (echoes) | RSS |"
    )
    print("|---|---|---|---|---|---|")
    for name, s in summary.items():
        print(
            f"| {name} | {s['rtt_err_us']:.0f} µs | {s['loss_err_pp']:.3f} pp"
            f" | {s['cpu_per_1000']:.3f} |"
            f" {s['cpu_s']:.2f} ({s['echoes']:.0f}) | {s['rss_mib']:.1f} MiB |"
        )
    o, r = summary["ours"], summary["smokeping_prober"]
    checks = {
        "RTT error <= smokeping_prober's": o["rtt_err_us"] <= r["rtt_err_us"],
        "loss error < smokeping_prober's": o["loss_err_pp"] < r["loss_err_pp"],
        "CPU per 1000 echoes <= 2x smokeping_prober's": o["cpu_per_1000"] <= 2 * r["cpu_per_1000"],
    }
    print(f"\nCPU ratio ours / smokeping_prober: {o['cpu_per_1000'] / r['cpu_per_1000']:.2f}x")
    for what, ok in checks.items():
        print(f"{'PASS' if ok else 'FAIL'}: {what}")
    return 0 if all(checks.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
