"""``llm-latency-exporter generate``: rules, alerts, Alertmanager template and dashboards.

One config drives all of them (kubernetes-mixin's ``_config``), so thresholds, windows and
probe names agree between what pages and what the dashboards show.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from exporter.commands import AddParser, add_config_flag
from exporter.config.load import load_config
from exporter.config.models import Config
from exporter.config.yamlfile import ConfigError
from exporter.monitoring import dashboards as grafana
from exporter.monitoring.alertmanager import alertmanager_config
from exporter.monitoring.alerts import alert_groups
from exporter.monitoring.recording import recording_groups
from exporter.monitoring.yamlout import dump_yaml

EXIT_USAGE = 2

EXAMPLES = """examples:
  llm-latency-exporter generate --config.file config.yaml --out monitoring
      writes monitoring/rules/recording.yaml, monitoring/rules/alerts.yaml,
      monitoring/alertmanager.yaml and monitoring/dashboards/*.json
  llm-latency-exporter generate --config.file config.example.yaml --out alerts \\
      --dashboards dashboards
      refreshes the copies committed in this repository (make generate)
  promtool check rules monitoring/rules/*.yaml && amtool check-config monitoring/alertmanager.yaml
"""



def render(config: Config) -> dict[str, str]:
    """Path relative to the output folder -> file text (dashboards under dashboards/)."""
    files = {
        "rules/recording.yaml": dump_yaml({"groups": recording_groups(config)}),
        "rules/alerts.yaml": dump_yaml({"groups": alert_groups(config)}),
        "alertmanager.yaml": dump_yaml(alertmanager_config(config)),
    }
    files.update(
        {f"dashboards/{name}": text for name, text in grafana.render(config).items()}
    )
    return files


def write(config: Config, out: Path, dashboards: Path | None = None) -> list[Path]:
    """Write every file; ``dashboards`` replaces ``out/dashboards`` when given."""
    written = []
    for rel, text in render(config).items():
        path = out / rel
        if dashboards is not None and rel.startswith("dashboards/"):
            path = dashboards / rel.removeprefix("dashboards/")
        path.parent.mkdir(parents=True, exist_ok=True)
        # Only rewrite what changed, so file times tell a reader what regenerating did.
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


def cmd_generate(args: argparse.Namespace) -> int:
    try:
        config = load_config(args.config, resolve_secrets=False)
    except ConfigError as exc:
        for message in exc.messages:
            print(f"error: {message}", file=sys.stderr)
        return EXIT_USAGE
    dashboards = Path(args.dashboards) if args.dashboards else None
    for path in write(config, Path(args.out), dashboards):
        print(path)
    return 0


def register(add: AddParser) -> None:
    p = add(
        "generate",
        cmd_generate,
        "write Prometheus recording and alerting rules, an Alertmanager template and "
        "Grafana dashboards for a config",
        EXAMPLES,
    )
    add_config_flag(p, "config file (default: %(default)s)", "config.yaml")
    p.add_argument("--out", required=True, metavar="DIR",
                   help="folder for rules/, alertmanager.yaml and dashboards/")
    p.add_argument("--dashboards", metavar="DIR",
                   help="write the dashboards here instead of DIR/dashboards")
