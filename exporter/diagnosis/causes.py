"""The vocabulary: every cause the chain may conclude, one row each.

A row is the whole of a cause: its layer and name, what it means in one line, the symptoms
it can take over and the failure kinds it produces, the shallower causes it takes over (an
engine's time split becomes a throttled GPU's evidence), the alerts that stand for it, the
config keys of its lines, and what to do next. The verdict metric's label values, the
enums of ``schema.json``, the alert mapping (``exporter/monitoring/findings.py``), the
docs' vocabulary table and every verdict's actions are read from here
(``python -m exporter.diagnosis.vocabulary`` rewrites the generated files); a rule in
``steps/`` names its cause by the row's constant, never by a string.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from exporter.diagnosis.parts import BudgetPart

Layer = Literal["network", "engine", "gpu", "host", "application", "exporter"]
#: In the chain's order: the field guides measure the network before believing the engine,
#: and look at the host when the GPU is not the answer.
LAYERS: tuple[Layer, ...] = ("network", "engine", "gpu", "host", "application", "exporter")
Symptom = Literal["ttft", "tpot", "failures", "long_context"]
SYMPTOMS: tuple[Symptom, ...] = ("ttft", "long_context", "tpot", "failures")
#: How a failed probe request failed (``steps/symptom.py`` maps each probe outcome to one:
#: ``limited`` is a 429), so
#: that only a cause that can produce it takes a probe's failures over.
Failure = Literal["limited", "timeout", "connect", "server", "stream"]

ALL: frozenset[Symptom] = frozenset(SYMPTOMS)
FIRST_TOKEN: frozenset[Symptom] = frozenset(("ttft", "long_context"))
COMPUTE: frozenset[Symptom] = FIRST_TOKEN | {"tpot"}
TPOT: frozenset[Symptom] = frozenset(("tpot",))
FAILURES: frozenset[Symptom] = frozenset(("failures",))
ANY_FAILURE: frozenset[Failure] = frozenset(("timeout", "connect", "server", "stream"))
TIMEOUT: frozenset[Failure] = frozenset(("timeout",))
#: A network fault drops connections and streams or makes them time out; it never answers
#: with an HTTP status.
DROPPED: frozenset[Failure] = frozenset(("timeout", "connect", "stream"))


@dataclass(frozen=True)
class Cause:
    layer: Layer
    name: str
    meaning: str
    #: Symptoms a verdict of this cause takes over from the probes it slows.
    explains: frozenset[Symptom]
    #: Failure kinds it produces: it takes over a probe's failures only of these kinds.
    fails: frozenset[Failure]
    actions: tuple[str, ...]
    #: Shallower causes a finding of this one takes over, their numbers kept as evidence: the
    #: engine says where the time goes, a deeper cause says why.
    absorbs: tuple[Cause, ...] = ()
    #: Alerts one of which must be pending or firing with a verdict of this cause: its own
    #: numbers over their line are a verdict whether or not a probe feels them yet.
    pages: tuple[str, ...] = ()
    #: Further alerts a verdict of this cause answers without demanding them.
    answers: tuple[str, ...] = ()
    #: The config keys its lines come from (``slo.``, ``alerting.``, ``diagnosis.``).
    thresholds: tuple[str, ...] = ()
    #: A fault on its own (a down engine, an XID): a verdict whether or not anyone feels it,
    #: and first among equals.
    fault: bool = False
    #: The parts of the first token's budget its time lands in: what a verdict of it must
    #: account for when it explains a slow first token.
    parts: tuple[BudgetPart, ...] = ()

    def __str__(self) -> str:
        return f"{self.layer}/{self.name}"

    @property
    def alerted(self) -> bool:
        """Some alert stands for it, or for a cause it takes over: its own numbers over the
        line are then a verdict even while every probe is inside its SLO."""
        return bool(self.pages or self.answers) or any(a.alerted for a in self.absorbs)


# --- network ------------------------------------------------------------------------------
STREAM_STALLS = Cause(
    "network", "stream_stalls",
    "the client sees stalls while the engine emits tokens steadily", TPOT, DROPPED, (
        "The engine emits tokens steadily: look between engine and client (gateway or "
        "proxy buffering, load balancer idle timeouts, the carrier's path).",
        "Disable response buffering on proxies for text/event-stream.",
    ),
    thresholds=("alerting.stall_seconds",))
PACKET_LOSS = Cause(
    "network", "packet_loss",
    "the carrier's path to the target, or its users' own streams, lose packets over the line",
    ALL, DROPPED, (
        "Compare with the other carriers' paths to the same target: loss on one carrier "
        "only is that carrier's, not the engine's.",
        "Run an mtr from the carrier's vantage point to find the hop where loss starts.",
        "Ask the provider for a CN2 GIA / CMIN2 / 9929 return route, or route this "
        "carrier's users through a better-peered entry point.",
    ),
    # A stall on a lossy stream is a retransmission waiting out its timeout.
    absorbs=(STREAM_STALLS,),
    pages=("LLMPathPacketLoss", "LLMProbeStreamPacketLoss", "LLMClientsRetransmissionHigh"),
    # A lost SYN waits for the kernel's retry: the late connections are the loss's.
    answers=("LLMProbeConnectionSetupSlow",),
    thresholds=("slo.loss_ratio", "alerting.clients_min_segments", "diagnosis.loss_ratio"),
    parts=(BudgetPart.NETWORK, BudgetPart.REMAINDER))
JITTER = Cause(
    "network", "jitter", "the path's RFC 3550 jitter is over the line",
    frozenset(("tpot", "ttft")), DROPPED, (
        "Check the path for queueing on a congested link (mtr, the RTT heatmap).",
        "Prefer a premium route class for streaming traffic; buffer output client-side.",
    ),
    pages=("LLMPathJitterHigh",), thresholds=("slo.jitter_seconds", "diagnosis.jitter_seconds"),
    parts=(BudgetPart.NETWORK, BudgetPart.REMAINDER))
RTT_FLOOR = Cause(
    "network", "rtt_floor",
    "the round trips before the first token take more than their share of the TTFT SLO",
    FIRST_TOKEN, DROPPED, (
        "Serve this carrier's users from a nearer region or an edge entry point.",
        "Cut round trips: keep connections alive (reuse TCP/TLS), enable TLS 1.3 / 0-RTT.",
        "If the SLO cannot hold at this distance, set a per-probe SLO that includes it.",
    ),
    thresholds=("diagnosis.rtt_round_trips", "diagnosis.rtt_budget_share"),
    parts=(BudgetPart.NETWORK, BudgetPart.REMAINDER))
ROUTE_CHANGE = Cause(
    "network", "route_change",
    "the route class is worse than its recent best, or the route changed in the window",
    ALL, DROPPED, (
        "Compare the route (llm_path_route_info) with its recent best class; the return "
        "path usually moved off the premium network.",
        "Open a ticket with the provider quoting the hops and the time of the change.",
    ),
    # A worse class brings its loss, and the move itself drops packets in flight.
    absorbs=(PACKET_LOSS, RTT_FLOOR), answers=("LLMPathRouteDegraded",),
    thresholds=("alerting.route_class_order",),
    parts=(BudgetPart.NETWORK, BudgetPart.REMAINDER))
PEAK_CONGESTION = Cause(
    "network", "peak_congestion", "loss or RTT over its off-peak baseline, only in a peak window",
    ALL, DROPPED, (
        "The loss or RTT appears only in the evening peak: the carrier's interconnect is "
        "congested. Ask the provider for a premium (CN2 GIA / CMIN2) route.",
        "Shift this carrier's peak traffic to a better-peered entry or a second region.",
    ),
    absorbs=(PACKET_LOSS, STREAM_STALLS), answers=("LLMPathLossPeakDrift",),
    thresholds=("diagnosis.drift_ratio", "alerting.peak_drift_min_loss_ratio"),
    parts=(BudgetPart.NETWORK, BudgetPart.REMAINDER))
CONNECTION_SETUP = Cause(
    "network", "connection_setup",
    "new connections take long to open (DNS, connect, TLS) beyond their round trips",
    # The probe's TTFT starts once connected: a slow setup explains its connect failures,
    # never the first token it times.
    FAILURES, DROPPED, (
        "Check DNS resolution time and TLS handshakes; enable keep-alive / connection "
        "pooling in the client so requests reuse connections.",
        "Place a TLS-terminating entry point near the users.",
        "Connections a second or more late lost their first SYN: look for a SYN-flood "
        "guard, a full accept queue (ss -lnt: Recv-Q at the backlog) or a firewall in "
        "front of the server dropping new connections.",
    ),
    pages=("LLMProbeConnectionSetupSlow",),
    thresholds=("diagnosis.connection_setup_share", "slo.ttft_p95_seconds"),
    parts=(BudgetPart.NETWORK, BudgetPart.REMAINDER))


# --- engine -------------------------------------------------------------------------------
DOWN = Cause(
    "engine", "down", "the engine answers neither its metrics nor its requests", ALL,
    ANY_FAILURE, (
        "Check the engine process and its logs (OOM kill, crash loop, failed model load).",
        "Check the engine's health endpoint and the port the exporter scrapes.",
    ),
    pages=("LLMEngineDown",), answers=("LLMProbeAbsent",), fault=True)
QUEUEING = Cause(
    "engine", "queueing", "requests wait: the queue's share of the engine's time is high",
    # A request queued past the client's patience ends as a timeout.
    FIRST_TOKEN | FAILURES, TIMEOUT, (
        "Add capacity (replicas or GPUs), or raise the batch limit (max_num_seqs) if the "
        "KV cache has room.",
        "Shed or rate-limit load at the gateway before requests queue for seconds.",
    ),
    pages=("LLMEngineCapacityBound",),
    thresholds=("alerting.queue_share_ratio", "diagnosis.queue_share"),
    parts=(BudgetPart.QUEUE,))
SLOW_PREFILL = Cause(
    "engine", "slow_prefill", "inference dominates and the first token is slow", FIRST_TOKEN,
    ANY_FAILURE, (
        "Check prompt lengths and the prefix cache hit ratio; enable chunked prefill.",
        "Consider prefill/decode disaggregation or more tensor parallelism for long prompts.",
    ),
    pages=("LLMEngineComputeBound",), thresholds=("slo.ttft_p95_seconds",),
    parts=(BudgetPart.PREFILL,))
SLOW_DECODE = Cause(
    "engine", "slow_decode", "inference dominates and decode (inter-token latency) is slow",
    TPOT, ANY_FAILURE, (
        "Check the batch size and the GPU's memory bandwidth; decode is memory-bound.",
        "Consider speculative decoding, a quantized KV cache or a smaller batch limit.",
    ),
    pages=("LLMEngineComputeBound",), thresholds=("slo.tpot_p95_seconds",))
KV_CACHE_PRESSURE = Cause(
    "engine", "kv_cache_pressure", "the KV cache is near full and requests are preempted",
    # Preempted requests are recomputed or swapped: the first token and the stream wait.
    ALL, frozenset(("timeout", "server")), (
        "Give the KV cache more memory (gpu_memory_utilization), shorten max_model_len, "
        "or quantize the KV cache.",
        "Lower the batch limit so requests wait instead of being preempted.",
    ),
    # Queued because the cache cannot admit more: one cause, the cache's.
    absorbs=(QUEUEING,), pages=("LLMEngineKVCacheSaturated",),
    thresholds=("alerting.kv_cache_usage_ratio", "diagnosis.kv_cache_usage"),
    parts=(BudgetPart.QUEUE, BudgetPart.PREFILL))
IMBALANCE = Cause(
    "engine", "imbalance",
    "one data-parallel rank's queue or KV cache is far above its peers'",
    # Requests routed to the busy rank wait there, or time out.
    FIRST_TOKEN | FAILURES, TIMEOUT, (
        "Check how requests are spread over the data-parallel ranks: the router's or load "
        "balancer's policy (round robin against least loaded), session or prefix-cache "
        "affinity pinning long conversations to one rank.",
        "Check the busy rank's own health (a slow GPU, a throttled or shared device, "
        "expert-parallel hot spots on a MoE model such as DeepSeek): compare its "
        "prefill and decode times with its peers'.",
    ),
    absorbs=(QUEUEING,), pages=("LLMEngineImbalance",),
    thresholds=("alerting.imbalance_ratio", "alerting.imbalance_min_waiting",
                "alerting.imbalance_kv_gap"),
    parts=(BudgetPart.QUEUE,))

FRONTEND = Cause(
    "engine", "frontend",
    "the engine's API server holds requests before queueing them (tokenizing, templating)",
    FIRST_TOKEN | FAILURES, TIMEOUT, (
        "Check the API server's CPU (llm_engine_process_cpu_seconds_total): near one core, "
        "its single Python process is saturated; run more API server processes (vLLM "
        "--api-server-count) or replicas.",
        "Look for costly preprocessing: long chat templates, multimodal inputs, a tokenizer "
        "without its fast implementation; and for other jobs on the host's CPUs.",
    ),
    absorbs=(SLOW_PREFILL,), pages=("LLMEngineFrontendBound",),
    thresholds=("alerting.frontend_share_ratio", "slo.ttft_p95_seconds",
                "diagnosis.frontend_share"),
    # The same process hands the first token back (detokenizing, streaming it) after the
    # engine's clock stops: a starved API server's delay there is in no engine part, so in
    # the remainder (a real vLLM capped at 3% of a core: 0.81 s before the engine queued
    # each request, 0.9 s more after).
    parts=(BudgetPart.FRONTEND, BudgetPart.REMAINDER))
PREFIX_CACHE_MISS = Cause(
    "engine", "prefix_cache_miss",
    "the prefix cache stopped hitting and prefill per request grew",
    COMPUTE, TIMEOUT, (
        "Look for something unique at the head of shared prompts (a timestamp, a request id, "
        "a user's name in the system prompt): move it after the shared part.",
        "Check the cache holds the prefixes in use (KV cache usage, cache size) and that "
        "requests sharing a prefix reach the same instance (router affinity).",
    ),
    # The prefix it no longer spares is computed in chunks beside the running decodes, so
    # their steps stretch too: the stream's slowness is the same cause. Each request holds
    # the engine longer, so a queue forms behind it, and a new request waits out the longer
    # steps before the engine takes it in, which reads as API-server time.
    absorbs=(SLOW_PREFILL, SLOW_DECODE, QUEUEING), pages=("LLMEnginePrefixCacheMiss",),
    answers=("LLMEngineFrontendBound",),
    thresholds=("diagnosis.prefix_hit_min", "diagnosis.drift_ratio"),
    parts=(BudgetPart.QUEUE, BudgetPart.PREFILL))
SPEC_DECODE = Cause(
    "engine", "spec_decode",
    "speculative decoding's draft tokens are accepted less, so each step yields fewer tokens",
    # Its own numbers explain the stream; the first token only through a queue it takes
    # over (engine step: the finding is narrowed to TPOT until it does).
    COMPUTE, TIMEOUT, (
        "The drafts no longer fit the text: ngram drafts need repetition, a draft model "
        "drifts from its target. Lower num_speculative_tokens, or serve this traffic without "
        "speculation.",
        "Compare acceptance per draft position (vllm:spec_decode_num_accepted_tokens_per_pos)"
        " and per model before and after the change.",
    ),
    # Fewer tokens per step: each answer takes more steps and holds its batch slot longer,
    # so a queue forms behind it at the same load.
    absorbs=(SLOW_DECODE, QUEUEING), pages=("LLMEngineSpecDecodeAcceptance",),
    thresholds=("diagnosis.spec_acceptance_min", "diagnosis.drift_ratio"))
KV_TRANSFER = Cause(
    "engine", "kv_transfer",
    "the KV handover from a prefill instance to this decode instance takes the first token's "
    "time", FIRST_TOKEN | FAILURES, TIMEOUT, (
        "Check the link between the prefill and decode instances (RDMA, NVLink, the NIXL "
        "backend) and its failed transfers.",
        "Check the prefill instances' own queue and the decode instance's deferred requests: "
        "add prefill capacity or move the pair closer.",
    ),
    # Requests waiting for their KV wait in the queue.
    absorbs=(SLOW_PREFILL, QUEUEING), pages=("LLMEngineKVTransferSlow",),
    thresholds=("alerting.kv_transfer_share_ratio", "slo.ttft_p95_seconds",
                "diagnosis.kv_transfer_share"),
    parts=(BudgetPart.KV_TRANSFER, BudgetPart.QUEUE))

# --- gpu ----------------------------------------------------------------------------------
#: A GPU cause says why its engine's time split (slow prefill, slow decode) is slow.
SPLIT = (SLOW_PREFILL, SLOW_DECODE)
THROTTLING = Cause(
    "gpu", "throttling", "a fault clock-event reason (thermal, HW slowdown, power brake) holds",
    COMPUTE, TIMEOUT, (
        "Check cooling and power: temperature, fan and power-brake state (nvidia-smi -q -d "
        "PERFORMANCE).",
        "Move load off the throttled GPU until the cause is fixed.",
    ),
    absorbs=SPLIT, pages=("LLMGPUThrottled",),
    thresholds=("alerting.throttle_reasons", "alerting.throttle_share"),
    parts=(BudgetPart.QUEUE, BudgetPart.PREFILL))
MEMORY_FULL = Cause(
    "gpu", "memory_full", "GPU memory is at its limit", ALL, frozenset(("server", "stream")), (
        "Check what else holds memory on the GPU (llm_gpu_process_memory_bytes).",
        "Lower the engine's memory fraction or the batch limit.",
    ),
    absorbs=SPLIT, pages=("LLMGPUMemoryNearFull",),
    thresholds=("alerting.gpu_memory_ratio", "diagnosis.gpu_memory_ratio"),
    parts=(BudgetPart.QUEUE, BudgetPart.PREFILL))
XID_ERRORS = Cause(
    "gpu", "xid_errors", "the driver reported XID errors in the window", ALL,
    frozenset(("server", "stream", "timeout", "connect")), (
        "Look up the XID in NVIDIA's XID catalogue; drain the GPU and check dmesg.",
        "Reset or replace the GPU if errors repeat.",
    ),
    absorbs=SPLIT, pages=("LLMGPUXidError",), fault=True)
UNDERUTILIZED = Cause(
    "gpu", "underutilized", "the GPU is mostly idle while its engine is slow", COMPUTE, TIMEOUT, (
        "The GPU is mostly idle while the engine is slow: look at the host (CPU, "
        "tokenization, I/O, PCIe) and the scheduler's batch limit.",
    ),
    # An idle GPU under a slow engine is a why too: the time goes to the host.
    absorbs=SPLIT, thresholds=("diagnosis.gpu_underutilized",),
    parts=(BudgetPart.QUEUE, BudgetPart.PREFILL))
MEMORY_BANDWIDTH = Cause(
    "gpu", "memory_bandwidth", "DRAM bandwidth is saturated while decode is slow", TPOT,
    TIMEOUT, (
        "Decode is memory-bandwidth bound: use a smaller or quantized model or KV cache, "
        "lower the batch limit, or spread the load over more GPUs.",
    ),
    absorbs=(SLOW_DECODE,), thresholds=("diagnosis.dram_bandwidth",))

INTERCONNECT = Cause(
    "gpu", "interconnect",
    "a GPU's PCIe link runs below its maximum, an NVLink is down, or link errors climb while "
    "its engine is slow", COMPUTE, TIMEOUT, (
        "Check the links (nvidia-smi -q -d PCIE; nvidia-smi nvlink -s, -e): a PCIe link "
        "below its maximum width or generation wants a reseat (riser, slot); an NVLink down "
        "or erroring wants the GPU drained and the board serviced.",
        "Keep tensor-parallel groups on GPUs joined by NVLink (nvidia-smi topo -m).",
    ),
    absorbs=SPLIT, parts=(BudgetPart.QUEUE, BudgetPart.PREFILL))

# --- host ---------------------------------------------------------------------------------
#: A starved host slows every part of the engine's work that runs on it: the API server,
#: the scheduler between steps, the launches that keep the GPU fed (which then idles).
STARVED = (SLOW_PREFILL, SLOW_DECODE, QUEUEING, FRONTEND, UNDERUTILIZED)


def _host(name: str, waits: str, page: str, key: str, actions: tuple[str, ...],
          absorbs: tuple[Cause, ...] = ()) -> Cause:
    return Cause("host", name, f"the engine's tasks wait for {waits} (PSI some over its line)",
                 COMPUTE, TIMEOUT, actions, absorbs=(*STARVED, *absorbs), pages=(page,),
                 thresholds=(f"alerting.host_{key}_pressure_ratio",),
                 parts=(BudgetPart.FRONTEND, BudgetPart.QUEUE, BudgetPart.PREFILL))


CPU_SATURATED = _host("cpu_saturated", "a CPU", "LLMHostCPUPressure", "cpu", (
    "Find what else runs on the engine's CPUs (top, per cgroup: systemd-cgtop): another "
    "job, a data loader, a noisy neighbour; move it, or pin the engine to CPUs of its own "
    "(cpuset, Kubernetes' static CPU manager).",
    "Check the engine's own CPU quota (cpu.max, a container's CPU limit): a limit under "
    "what its API server and scheduler need throttles them."))
IO_PRESSURE = _host("io_pressure", "IO", "LLMHostIOPressure", "io", (
    "Find who uses the disks (iotop, pidstat -d): checkpoints, logs, a model download, "
    "swap; move them off the engine's disks.",
    "Check the engine's own IO limit (io.max) and whether it reads models or KV from a "
    "slow or network disk."))
MEMORY_PRESSURE = _host("memory_pressure", "memory: reclaim, swap-in, refaults",
                        "LLMHostMemoryPressure", "memory", (
    "Check memory available and swap (free -m, vmstat 1: si/so): system memory should be "
    "2-4x GPU memory so nothing swaps; stop what else holds memory on the host.",
    "Check the engine's own memory limit (memory.max / memory.high, a container's limit): "
    "near it, the kernel reclaims the engine's pages."),
    # A working set over its memory is read back as it is evicted: the IO is memory's.
    absorbs=(IO_PRESSURE,))
HOST_CAUSES = (CPU_SATURATED, MEMORY_PRESSURE, IO_PRESSURE)

# --- application --------------------------------------------------------------------------
LONG_PROMPTS = Cause(
    "application", "long_prompts",
    "prompts too long for the TTFT SLO at the engine's prefill rate, or grown over the baseline",
    COMPUTE, TIMEOUT, (
        "Find who sends the longer prompts (system prompt growth, the full history on every "
        "turn); trim or summarize history.",
        "Use prefix caching for shared system prompts.",
    ),
    # Long prompts make prefill slow and the queue long, and take the API server longer to
    # tokenize (a real vLLM's 7,000-token prompts: most of the first token before the engine);
    # the tokens they grew by were never cached, so the prefix cache's hit ratio falls too.
    absorbs=(SLOW_PREFILL, QUEUEING, FRONTEND, PREFIX_CACHE_MISS),
    thresholds=("diagnosis.prompt_budget_share", "diagnosis.long_prompt_tokens",
                "diagnosis.prompt_growth"),
    parts=(BudgetPart.FRONTEND, BudgetPart.QUEUE, BudgetPart.PREFILL))
RATE_LIMITED = Cause(
    "application", "rate_limited", "requests are answered 429", FAILURES,
    frozenset(("limited",)), (
        "Check the gateway's or provider's rate limits against the request rate.",
        "Add client-side backoff and retry with jitter; request a higher quota.",
    ),
    thresholds=("slo.probe_failure_ratio", "diagnosis.failure_ratio"))
CLIENT_CONCURRENCY = Cause(
    "application", "client_concurrency",
    "the request rate grew over its baseline at the same capacity", COMPUTE, TIMEOUT, (
        "Request rate is above its baseline at the same capacity: add capacity or limit "
        "concurrency per client.",
        "Find the client whose rate grew (gateway logs).",
    ),
    # More clients at the same capacity make the queue long and fill the cache.
    absorbs=(QUEUEING, KV_CACHE_PRESSURE), thresholds=("diagnosis.request_rate_growth",),
    parts=(BudgetPart.QUEUE,))
CLIENT_TIMEOUTS = Cause(
    "application", "client_timeouts",
    "requests time out while the server answers within its SLO", FAILURES, TIMEOUT, (
        "The server answers within its SLO: the client's timeout is too short for the "
        "answers it asks for; raise it or stream.",
    ),
    thresholds=("slo.probe_failure_ratio", "diagnosis.failure_ratio"))

# --- exporter -----------------------------------------------------------------------------
NO_DATA = Cause(
    "exporter", "no_data",
    "the checks needed to decide are failing or absent: never a guess", ALL, ANY_FAILURE, (
        "Fix any failing check the summary names (llm_exporter_check_runs_total, "
        "/-/ready); the chain will not guess without it.",
        "Make sure the engine, path and GPU checks cover what the probe talks to; the first "
        "token's budget (diagnose's parts table, the page's bars) says where the time sits.",
    ),
    answers=("LLMEngineDown", "LLMProbeAbsent", "LLMExporterCheckFailing"))

CAUSES: tuple[Cause, ...] = (
    PACKET_LOSS, JITTER, RTT_FLOOR, ROUTE_CHANGE, PEAK_CONGESTION, CONNECTION_SETUP,
    STREAM_STALLS,
    DOWN, QUEUEING, SLOW_PREFILL, SLOW_DECODE, KV_CACHE_PRESSURE, IMBALANCE, FRONTEND,
    PREFIX_CACHE_MISS, SPEC_DECODE, KV_TRANSFER,
    THROTTLING, MEMORY_FULL, XID_ERRORS, UNDERUTILIZED, MEMORY_BANDWIDTH, INTERCONNECT,
    *HOST_CAUSES,
    LONG_PROMPTS, RATE_LIMITED, CLIENT_CONCURRENCY, CLIENT_TIMEOUTS,
    NO_DATA,
)
#: layer -> its causes' names, in the table's order: the vocabulary a verdict may use.
NAMES: dict[str, tuple[str, ...]] = {
    layer: tuple(c.name for c in CAUSES if c.layer == layer) for layer in LAYERS}
BY_KEY: dict[tuple[str, str], Cause] = {(c.layer, c.name): c for c in CAUSES}
assert len(BY_KEY) == len(CAUSES), "one row per cause"
assert all(c.layer in LAYERS for c in CAUSES)
