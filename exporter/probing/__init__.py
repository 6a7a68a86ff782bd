"""The request path the probe check and ``bench`` share: HTTP client, SSE stream reader, prompts."""
