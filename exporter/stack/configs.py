"""The files the native stack's processes read, rendered into its working directory.

They are the files docker-compose.yml mounts: deploy/prometheus/prometheus.yml (copied byte for
byte), the generated rules in alerts/rules/ and the generated alerts/alertmanager.yaml. What
differs from compose is only what must: prometheus.yml reads its targets from files under
targets/, written here with loopback ports; and Alertmanager's receivers are pointed at the
local sink (``local_receivers``), so a notification never leaves the machine.
"""

from __future__ import annotations

import copy
import shutil
from pathlib import Path
from string import Template
from typing import Any

import yaml

from exporter.stack.state import Ports


def local_receivers(config: dict[str, Any], sink: str) -> dict[str, Any]:
    """Alertmanager config with every notification endpoint replaced by the local sink.

    Webhook-style URLs become ``<sink>/<receiver>``, so the sink can tell which receiver
    (pager, tickets, ...) a notification was routed to; SMTP smarthosts point at the sink
    too, which refuses to speak SMTP, so mail fails locally instead of leaving the host.
    Routing, grouping, inhibition and time intervals are left exactly as generated.
    """
    out = copy.deepcopy(config)
    host_port = sink.removeprefix("http://")
    defaults = out.get("global") or {}
    for key in list(defaults):
        if key.endswith("_url"):
            defaults[key] = sink
        elif key == "smtp_smarthost":
            defaults[key] = host_port
    for receiver in out.get("receivers") or []:
        for kind, entries in receiver.items():
            if not kind.endswith("_configs"):
                continue
            for entry in entries:
                for key in list(entry):
                    if key in ("url", "api_url"):
                        entry[key] = f"{sink}/{receiver['name']}"
                    elif key in ("url_file", "api_url_file"):
                        del entry[key]
                        entry[key.removesuffix("_file")] = f"{sink}/{receiver['name']}"
                    elif key == "smarthost":
                        entry[key] = host_port
    return out


def _targets(hostport: str, labels: dict[str, str] | None = None) -> str:
    group: dict[str, Any] = {"targets": [hostport]}
    if labels:
        group["labels"] = labels
    return yaml.safe_dump([group], sort_keys=False)


def render(root: Path, workdir: Path, ports: Ports) -> None:
    """Write everything the processes read into ``workdir``."""
    prom = workdir / "prometheus"
    (prom / "targets").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(root / "deploy/prometheus/prometheus.yml", prom / "prometheus.yml")
    loopback = "127.0.0.1:{}".format
    targets = {
        "exporter.yml": _targets(loopback(ports.exporter)),
        # `target` matches the engine's name in deploy/stack/exporter.yaml, as the compose
        # targets file labels the demo engine.
        "engine.yml": _targets(loopback(ports.simulator), {"target": "main"}),
        "prometheus.yml": _targets(loopback(ports.prometheus)),
        "alertmanager.yml": _targets(loopback(ports.alertmanager)),
    }
    for name, text in targets.items():
        (prom / "targets" / name).write_text(text)
    rules = prom / "rules"
    if rules.is_symlink() or rules.exists():
        rules.unlink()
    rules.symlink_to((root / "alerts/rules").resolve(), target_is_directory=True)

    am = workdir / "alertmanager"
    am.mkdir(parents=True, exist_ok=True)
    generated = yaml.safe_load((root / "alerts/alertmanager.yaml").read_text())
    local = local_receivers(generated, f"http://127.0.0.1:{ports.sink}")
    (am / "alertmanager.yml").write_text(
        "# alerts/alertmanager.yaml with its receivers pointed at the local sink "
        "(exporter/stack/configs.py).\n" + yaml.safe_dump(local, sort_keys=False)
    )

    template = Template((root / "deploy/stack/exporter.yaml").read_text())
    (workdir / "exporter.yaml").write_text(
        template.substitute(exporter_port=ports.exporter, simulator_port=ports.simulator)
    )
