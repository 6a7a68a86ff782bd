"""What the fault matrices share (tests/test_engine_faults.py, tests/test_probe_faults.py,
and benchmarks/soak.py): check runs read from a scrape, a scrape timed, a watch that scrapes
until a condition holds while recording the slowest scrape, every page a running exporter
serves, and the canary search over them."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from tests.support.procs import http_get, wait_until
from tests.support.samples import Samples, parse, total

#: Every page a running exporter serves that could show a secret (``/metrics`` is read apart).
PAGES = ("/", "/live", "/api/v1/diagnosis")


def runs(samples: Samples, check: str, outcome: str | None = None) -> float:
    """Runs of ``check`` (of one outcome, or all) in llm_exporter_check_runs_total."""
    labels = {"check": check} if outcome is None else {"check": check, "outcome": outcome}
    return total(samples, "llm_exporter_check_runs_total", **labels)


def scrape(url: str, timeout: float = 10) -> tuple[float, Samples]:
    """(seconds the GET took, its samples); the scrape must succeed."""
    started = time.monotonic()
    status, body = http_get(url, timeout=timeout)
    assert status == 200, status
    return time.monotonic() - started, parse(body)


def first_run(base: str, check: str, within: float = 30) -> Samples:
    """Wait until ``check`` has run once on the exporter at ``base``; the samples then."""

    def ran() -> bool:
        status, body = http_get(f"{base}/metrics")
        return status == 200 and runs(parse(body), check) >= 1

    wait_until(ran, within, f"the first run of {check}")
    return scrape(f"{base}/metrics")[1]


@dataclass
class Watch:
    """What :func:`watch` saw: the last samples, the slowest scrape, how long it watched."""

    samples: Samples
    slowest: float
    elapsed: float
    scrapes: int


def watch(url: str, done: Callable[[Samples], bool], within: float, every: float = 0.2) -> Watch:
    """Scrape ``url`` every ``every`` seconds until ``done`` (or ``within`` runs out)."""
    started = time.monotonic()
    slowest, count = 0.0, 0
    while True:
        took, samples = scrape(url)
        slowest, count = max(slowest, took), count + 1
        if done(samples) or time.monotonic() - started > within:
            return Watch(samples, slowest, time.monotonic() - started, count)
        time.sleep(every)


def pages(base: str) -> dict[str, str]:
    """Each of :data:`PAGES` as served now (status aside: the diagnosis may answer 503)."""
    return {path: http_get(base + path, timeout=10)[1] for path in PAGES}


def exposition(samples: Samples) -> str:
    """Samples back as text, for a substring search over names, labels and values."""
    return "\n".join(f"{name}{dict(labels)} {v}" for (name, labels), v in samples.items())


def basic_auth(user: str, password: str) -> str:
    """What an HTTP client sends for URL user-info: a server can echo this form too."""
    return base64.b64encode(f"{user}:{password}".encode()).decode()


def leaks(canaries: Iterable[str], places: dict[str, str]) -> dict[str, list[str]]:
    """place -> the canaries found in it (places where none was found are left out)."""
    found = {where: [c for c in canaries if c in text] for where, text in places.items()}
    return {where: hit for where, hit in found.items() if hit}
