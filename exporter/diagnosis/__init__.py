"""Diagnosis: where the latency comes from. ``observations`` (one window of every layer),
``chain`` (the field guides' decision chain, pure), ``result`` (the verdict and its JSON),
and the sources that fill observations: ``embedded`` (the exporter's own windows) and
``prometheus`` (PromQL over the recording rules, any Prometheus-compatible API)."""
