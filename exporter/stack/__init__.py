"""The native stack (``make stack``): Prometheus, Alertmanager, exporter and simulator
on loopback."""
