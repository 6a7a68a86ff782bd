"""``llm-latency-exporter report``: the acceptance report (HTML, Markdown, JSON) of a period,
read from Prometheus."""
