"""Monitoring as code: recording rules, alerts, Alertmanager config and Grafana dashboards
generated from the config (``make generate`` writes alerts/ and dashboards/)."""
