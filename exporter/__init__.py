"""llm-latency-exporter: where LLM inference latency comes from (network, queue, GPU, app)."""

__version__ = "0.1.0"
