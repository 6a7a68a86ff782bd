"""The synthetic streaming probe: TTFT/TPOT through the shared request path in ``probing``."""
