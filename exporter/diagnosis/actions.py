"""Next steps per cause: what the field guides say to do once the chain has named it. Plain
text, concrete, cheapest check first; docs/diagnosis.md prints the same table."""

from __future__ import annotations

from collections.abc import Mapping

ACTIONS: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "network": {
        "packet_loss": (
            "Compare with the other carriers' paths to the same target: loss on one carrier "
            "only is that carrier's, not the engine's.",
            "Run an mtr from the carrier's vantage point to find the hop where loss starts.",
            "Ask the provider for a CN2 GIA / CMIN2 / 9929 return route, or route this "
            "carrier's users through a better-peered entry point.",
        ),
        "jitter": (
            "Check the path for queueing on a congested link (mtr, the RTT heatmap).",
            "Prefer a premium route class for streaming traffic; buffer output client-side.",
        ),
        "rtt_floor": (
            "Serve this carrier's users from a nearer region or an edge entry point.",
            "Cut round trips: keep connections alive (reuse TCP/TLS), enable TLS 1.3 / 0-RTT.",
            "If the SLO cannot hold at this distance, set a per-probe SLO that includes it.",
        ),
        "route_change": (
            "Compare the route (llm_path_route_info) with its recent best class; the return "
            "path usually moved off the premium network.",
            "Open a ticket with the provider quoting the hops and the time of the change.",
        ),
        "peak_congestion": (
            "The loss or RTT appears only in the evening peak: the carrier's interconnect is "
            "congested. Ask the provider for a premium (CN2 GIA / CMIN2) route.",
            "Shift this carrier's peak traffic to a better-peered entry or a second region.",
        ),
        "connection_setup": (
            "Check DNS resolution time and TLS handshakes; enable keep-alive / connection "
            "pooling in the client so requests reuse connections.",
            "Place a TLS-terminating entry point near the users.",
        ),
        "stream_stalls": (
            "The engine emits tokens steadily: look between engine and client (gateway or "
            "proxy buffering, load balancer idle timeouts, the carrier's path).",
            "Disable response buffering on proxies for text/event-stream.",
        ),
    },
    "engine": {
        "down": (
            "Check the engine process and its logs (OOM kill, crash loop, failed model load).",
            "Check the engine's health endpoint and the port the exporter scrapes.",
        ),
        "queueing": (
            "Add capacity (replicas or GPUs), or raise the batch limit (max_num_seqs) if the "
            "KV cache has room.",
            "Shed or rate-limit load at the gateway before requests queue for seconds.",
        ),
        "slow_prefill": (
            "Check prompt lengths and the prefix cache hit ratio; enable chunked prefill.",
            "Consider prefill/decode disaggregation or more tensor parallelism for long prompts.",
        ),
        "slow_decode": (
            "Check the batch size and the GPU's memory bandwidth; decode is memory-bound.",
            "Consider speculative decoding, a quantized KV cache or a smaller batch limit.",
        ),
        "kv_cache_pressure": (
            "Give the KV cache more memory (gpu_memory_utilization), shorten max_model_len, "
            "or quantize the KV cache.",
            "Lower the batch limit so requests wait instead of being preempted.",
        ),
        "imbalance": (
            "Check how requests are spread over the data-parallel ranks: the router's or load "
            "balancer's policy (round robin against least loaded), session or prefix-cache "
            "affinity pinning long conversations to one rank.",
            "Check the busy rank's own health (a slow GPU, a throttled or shared device, "
            "expert-parallel hot spots on a MoE model such as DeepSeek): compare its "
            "prefill and decode times with its peers'.",
        ),
    },
    "gpu": {
        "throttling": (
            "Check cooling and power: temperature, fan and power-brake state (nvidia-smi -q -d "
            "PERFORMANCE).",
            "Move load off the throttled GPU until the cause is fixed.",
        ),
        "memory_full": (
            "Check what else holds memory on the GPU (llm_gpu_process_memory_bytes).",
            "Lower the engine's memory fraction or the batch limit.",
        ),
        "xid_errors": (
            "Look up the XID in NVIDIA's XID catalogue; drain the GPU and check dmesg.",
            "Reset or replace the GPU if errors repeat.",
        ),
        "underutilized": (
            "The GPU is mostly idle while the engine is slow: look at the host (CPU, "
            "tokenization, I/O, PCIe) and the scheduler's batch limit.",
        ),
        "memory_bandwidth": (
            "Decode is memory-bandwidth bound: use a smaller or quantized model or KV cache, "
            "lower the batch limit, or spread the load over more GPUs.",
        ),
    },
    "application": {
        "long_prompts": (
            "Find who sends the longer prompts (system prompt growth, the full history on every "
            "turn); trim or summarize history.",
            "Use prefix caching for shared system prompts.",
        ),
        "rate_limited": (
            "Check the gateway's or provider's rate limits against the request rate.",
            "Add client-side backoff and retry with jitter; request a higher quota.",
        ),
        "client_concurrency": (
            "Request rate is above its baseline at the same capacity: add capacity or limit "
            "concurrency per client.",
            "Find the client whose rate grew (gateway logs).",
        ),
        "client_timeouts": (
            "The server answers within its SLO: the client's timeout is too short for the "
            "answers it asks for; raise it or stream.",
        ),
    },
    "exporter": {
        "no_data": (
            "Fix the failing checks named in the evidence (llm_exporter_check_runs_total, "
            "/-/ready); the chain will not guess without them.",
            "Make sure the engine, path and GPU checks cover what the probe talks to.",
        ),
    },
}
