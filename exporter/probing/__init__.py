"""The request path the probe check and ``bench`` share: request types, the HTTP client and
its timing, the SSE stream reader, prompts."""
