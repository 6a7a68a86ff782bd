"""``llm-latency-exporter bench``: load an OpenAI-compatible server and report TTFT/TPOT."""
