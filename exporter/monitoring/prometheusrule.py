"""Wrap the generated rule files into a Prometheus Operator ``PrometheusRule``.

The Operator does not read rule files; it wants the same groups inside a custom resource.
Building that resource from alerts/rules/*.yaml (rather than from the generator's objects)
guarantees Kubernetes runs byte-for-byte the rules that promtool tests and that compose
and ``make stack`` load.

    # alerts/rules -> deploy/kubernetes/prometheusrule.yaml
    python -m exporter.monitoring.prometheusrule
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from exporter.monitoring.yamlout import dump_yaml

NAME = "llm-latency-exporter"
NAMESPACE = "llm-latency"
#: What a kube-prometheus-stack install selects rules by (as servicemonitor.yaml).
LABELS = {"app.kubernetes.io/name": NAME, "release": "kube-prometheus-stack"}
HEADER = (
    "# Generated from alerts/rules/*.yaml by `python -m exporter.monitoring.prometheusrule`"
    " (make generate);\n"
    "# do not edit: change the config or exporter/monitoring/ and regenerate.\n"
)


def rule_groups(files: Sequence[Path]) -> list[dict[str, Any]]:
    groups: list[dict[str, Any]] = []
    for path in files:
        groups.extend(yaml.safe_load(path.read_text())["groups"])
    return groups


def build(files: Sequence[Path]) -> dict[str, Any]:
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "PrometheusRule",
        "metadata": {"name": NAME, "namespace": NAMESPACE, "labels": dict(LABELS)},
        "spec": {"groups": rule_groups(files)},
    }


def render(rules_dir: Path) -> str:
    files = sorted(rules_dir.glob("*.yaml"))
    if not files:
        raise FileNotFoundError(f"no *.yaml rule files in {rules_dir}")
    return dump_yaml(build(files), HEADER)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m exporter.monitoring.prometheusrule",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--rules", type=Path, default=Path("alerts/rules"))
    parser.add_argument("--out", type=Path, default=Path("deploy/kubernetes/prometheusrule.yaml"))
    args = parser.parse_args(argv)
    try:
        text = render(args.rules)
    except FileNotFoundError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.out.exists() or args.out.read_text() != text:
        args.out.write_text(text)
    print(args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
