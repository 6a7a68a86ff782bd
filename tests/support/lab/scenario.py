"""Scenario files (``tests/scenarios/*.yaml``): what the lab sets up, and what diagnosis it
expects. Loaded with the exporter's own YAML reader, so every problem in a file is one line
naming the file, the key and its line.

The engine is the simulator unless ``engine: {kind: vllm}`` puts the real vLLM tier's
server (tests/support/vllm_server.py, the tiny model) in its place; the simulator's run-time
knobs (``simulator.flags``, ``faults``, ``config``) do not exist there and are refused,
``simulator.down`` (stop the engine) works on both.

Timeline of a run: everything starts healthy (default paths, the lab's default load, no
faults; ``simulator.flags`` apply from the start because they are fixed at launch); after
``baseline`` the scenario is applied (faults, engine config, load, paths, hops, GPU; or the
engine is stopped); ``settle`` later the diagnosis is read and compared with ``expect``.
"""

from __future__ import annotations

import functools
import ipaddress
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator, model_validator

from exporter import metrics
from exporter.checks.path.routes import RouteTable, load_table
from exporter.config.values import Duration, Ratio, StrictModel
from exporter.config.yamlfile import ConfigError, compose_named, validate
from exporter.diagnosis.causes import NAMES
from exporter.diagnosis.result import SCOPE_KEYS
from tests.support.vllm_server import MAX_MODEL_LEN

#: The lab's carriers, in the order their namespaces and addresses are made.
CARRIERS = ("mobile", "unicom", "telecom")
#: Each carrier's route before a scenario changes it: one premium hop each.
DEFAULT_HOPS: dict[str, tuple[str, ...]] = {
    "mobile": ("cmin2",),
    "unicom": ("cu_9929",),
    "telecom": ("cn2",),
}
#: The RTT of a healthy carrier path, seconds.
DEFAULT_DELAY = 0.02
Source = Literal["exporter", "prometheus"]
SOURCES: tuple[Source, ...] = ("exporter", "prometheus")


class ScenarioError(Exception):
    """A bad scenario file; one line per problem."""

    def __init__(self, messages: list[str]) -> None:
        super().__init__("\n".join(messages))
        self.messages = messages


@functools.cache
def _route_table() -> RouteTable:
    # Read once: the generator validates thousands of drawn scenarios.
    return load_table()


def hop_networks(hop: str) -> list[str]:
    """What one ``hops`` entry stands for: a literal address, a network of the route table
    (one hop in it), or a route class (one hop in each network its rule needs)."""
    table = _route_table()
    try:
        ipaddress.IPv4Address(hop)
        return [hop]
    except ValueError:
        pass
    if hop in table.networks:
        return [hop]
    for rule in table.rules:
        if rule.route_class == hop:
            return sorted(rule.networks)
    known = sorted({*table.networks, *(r.route_class for r in table.rules)})
    raise ValueError(f"{hop!r} is neither an IPv4 address, a network nor a route class of "
                     f"the route table ({', '.join(known)})")


class Simulator(StrictModel):
    #: ``simulate`` CLI options by name (max_num_seqs: 4 -> --max-num-seqs 4), at launch.
    flags: dict[str, float | int | str | bool] = Field(default_factory=dict)
    #: POST /admin/faults when the scenario is applied (docs/simulator.md, Faults).
    faults: dict[str, float | int | bool] = Field(default_factory=dict)
    #: POST /admin/config when the scenario is applied (run-time engine knobs).
    config: dict[str, float | int | bool] = Field(default_factory=dict)
    #: Stop the simulator when the scenario is applied: the engine is down.
    down: bool = False

    def runtime(self) -> Simulator:
        """Only what may change while the simulator runs (faults, engine knobs)."""
        return Simulator(faults=self.faults, config=self.config)

    @field_validator("flags")
    @classmethod
    def _no_lab_flags(cls, v: dict[str, Any]) -> dict[str, Any]:
        taken = {"host", "port", "format", "model"} & set(v)
        if taken:
            raise ValueError(f"set by the lab, not the scenario: {', '.join(sorted(taken))}")
        return v

    @field_validator("faults")
    @classmethod
    def _known_faults(cls, v: dict[str, Any]) -> dict[str, Any]:
        from exporter.simulator.faults import FaultError, Faults

        try:
            Faults().merged(v)
        except FaultError as exc:
            raise ValueError("; ".join(exc.messages)) from None
        return v


#: What the tiny model's chat template and the load generator's request number add to a
#: prompt of ``prompt_tokens`` (measured: 22; the margin keeps a request inside the window).
CHAT_OVERHEAD_TOKENS = 32
#: ``vllm serve`` options the lab sets (address, port, the model and its window).
VLLM_LAB_FLAGS = frozenset(("host", "port", "model", "served_model_name", "max_model_len"))


class Engine(StrictModel):
    """Which engine stands at the site: the simulator, or the real ``vllm serve``."""

    kind: Literal["simulator", "vllm"] = "simulator"
    #: ``vllm serve`` options by name (max_num_seqs: 2 -> --max-num-seqs 2), at launch.
    flags: dict[str, float | int | str | bool] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _flags(self) -> Engine:
        if self.kind == "simulator" and self.flags:
            raise ValueError("the simulator's launch options go in simulator.flags; "
                             "engine.flags are vllm serve's (kind: vllm)")
        taken = VLLM_LAB_FLAGS & set(self.flags)
        if taken:
            raise ValueError(f"set by the lab, not the scenario: {', '.join(sorted(taken))}")
        return self

    def serve_flags(self) -> list[str]:
        """The flags as ``vllm serve`` arguments (True: the bare option; False: left out)."""
        out: list[str] = []
        for name, value in self.flags.items():
            option = "--" + name.replace("_", "-")
            if value is True:
                out.append(option)
            elif value is not False:
                out += [option, str(value)]
        return out


class Load(StrictModel):
    """Background load on the engine (other users), sent by the lab straight to the site."""

    rate: Annotated[float, Field(ge=0, le=200)] = 2.0  # requests per second
    prompt_tokens: Annotated[int, Field(ge=1, le=100_000)] = 256
    max_tokens: Annotated[int, Field(ge=1, le=4096)] = 32
    #: Requests in flight at most; arrivals beyond it wait (bounds the lab's own load).
    concurrency: Annotated[int, Field(ge=1, le=256)] = 64
    #: A system prompt ahead of each user prompt, ``shared`` by every request (a prefix the
    #: engine caches) or ``unique`` (a per-request head before it, as a timestamp at the top
    #: of a system prompt makes: every request misses the cache).
    system_prompt_tokens: Annotated[int, Field(ge=0, le=100_000)] = 0
    system_prompt: Literal["shared", "unique"] = "shared"
    #: The users' sampling temperature (0: greedy); absent, the engine's default. A real
    #: vLLM's ngram drafts match a greedy answer and seldom a sampled one.
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None

    @property
    def tokens(self) -> int:
        """The prompt tokens of one request, its system prompt included."""
        return self.system_prompt_tokens + self.prompt_tokens


class CarrierPath(StrictModel):
    delay: Duration = DEFAULT_DELAY  # round trip added by the carrier
    jitter: Duration = 0.0  # +- uniform, of the round trip
    loss: Ratio = 0.0  # per packet, each way
    #: A share of the carrier's TCP packets dropped as they arrive at either end (the
    #: carrier's proxy, the client), echoes untouched: a stream that retransmits while ICMP
    #: is clean, as on carriers that prioritise ICMP. ``loss`` drops where the sender's own
    #: stack retries, which no segment counter sees (tests/test_probe_tcp_lab.py).
    stream_loss: Ratio = 0.0
    #: The first SYNs of every new connection to the carrier's entry dropped as they arrive
    #: (a SYN-flood guard, a full accept queue): each costs the client's kernel a retry a
    #: second or more later, so connections open late while echoes and streams are clean.
    syn_drops: Annotated[int, Field(ge=0, le=2)] = 0
    #: The route once the scenario applies; absent: the carrier's default route.
    hops: list[str] | None = None
    stall: Duration = 0.0  # a gap in each streamed answer, network side
    stall_after: Annotated[int, Field(ge=1)] = 3

    @field_validator("hops")
    @classmethod
    def _realizable(cls, v: list[str] | None) -> list[str] | None:
        if v is not None:
            if not v:
                raise ValueError("a route needs at least one hop")
            for hop in v:
                hop_networks(hop)
        return v

    @model_validator(mode="after")
    def _jitter_under_delay(self) -> CarrierPath:
        if self.jitter > self.delay:
            raise ValueError(f"jitter {self.jitter}s exceeds delay {self.delay}s")
        if self.delay + self.jitter > 1.0:
            # The lab's path check gives up on an echo after 1.5 s.
            raise ValueError("delay + jitter over 1s: echoes would time out as lost")
        return self

    @property
    def loss_percent(self) -> int:
        return round(self.loss * 100)

    @property
    def stream_loss_percent(self) -> int:
        return round(self.stream_loss * 100)


class Gpu(StrictModel):
    count: Annotated[int, Field(ge=0, le=16)] = 1
    throttle: list[Literal[metrics.GPU_CLOCK_EVENT_REASONS]] = Field(  # type: ignore[valid-type]
        default_factory=list)
    utilization: Ratio = 0.85
    dram_bw: Ratio = 0.5
    memory_used: Ratio = 0.8  # share of the memory in use
    #: XID events, [GPU index, XID code] each, raised in the middle of the diagnosis
    #: window (the runner writes them then): a count in the window is a verdict of its own.
    xids: list[tuple[Annotated[int, Field(ge=0)], Annotated[int, Field(ge=1)]]] = Field(
        default_factory=list)
    #: GPU 0's links: its PCIe link trained at this width (of 16), this many of its 18
    #: NVLinks down, and NVLink replays per second on its link 0.
    pcie_width: Literal[1, 2, 4, 8, 16] = 16
    nvlink_down: Annotated[int, Field(ge=0, le=18)] = 0
    nvlink_replays: Annotated[float, Field(ge=0, le=1000)] = 0.0

    @model_validator(mode="after")
    def _xids_on_a_gpu(self) -> Gpu:
        for index, _ in self.xids:
            if index >= self.count:
                raise ValueError(f"xids: GPU index {index} of {self.count} GPU(s)")
        return self

    def calm(self) -> Gpu:
        """The same state without its XIDs (written before they are raised)."""
        return self.model_copy(update={"xids": []})


class Host(StrictModel):
    """Real load in the engine's cgroup (a cgroup v2 group the lab puts the engine in, read
    by the exporter's host check) from the moment the scenario applies."""

    #: Busy loops beside the engine, capped together at a quarter of a CPU
    #: (tests/support/cgroups.py): more loops than the cap runs, so some always wait; 0,
    #: the engine in its group alone (the host check reading a clean engine).
    cpu_hog: Literal[0, 2, 3, 4, 5, 6, 7, 8] = 0
    #: A reader cycling through a file of this size (``64Mi`` to ``1Gi``) under a memory
    #: limit of a quarter of it: its pages are evicted and read back, which the kernel
    #: counts as memory stalls (no swap needed). Bytes; 0, none.
    memory_hog: Annotated[int, Field(ge=0, le=1 << 30)] = 0
    #: A reader bypassing the page cache at a read rate the kernel caps (4 MiB/s): IO waits.
    io_hog: bool = False

    @field_validator("memory_hog", mode="before")
    @classmethod
    def _size(cls, value: object) -> object:
        size = value
        if isinstance(value, str):
            units = {"Mi": 1 << 20, "Gi": 1 << 30}
            number, unit = value[:-2], value[-2:]
            if unit not in units or not number.isdigit():
                raise ValueError(f"a size like 128Mi or 1Gi, not {value!r}")
            size = int(number) * units[unit]
        if isinstance(size, int) and 0 < size < 64 << 20:
            raise ValueError(f"at least 64Mi (its limit a quarter of it), not {value}")
        return size


class Probes(StrictModel):
    """The lab's probes (one per carrier and the local one), as the scenario changes them."""

    #: Merged over the lab's probe timeouts (connect 2s, first_token 10s, total 20s): a
    #: client whose patience is shorter than a normal answer (``client_timeouts``).
    timeouts: dict[Literal["connect", "first_token", "total"], Duration] = Field(
        default_factory=dict)
    #: Instead of the lab's 1 s (benchmarks/diagnosis_latency.py runs the config default).
    interval: Duration | None = None


class Expected(StrictModel):
    layer: str
    cause: str
    scope: dict[str, str] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _vocabulary(self) -> Expected:
        if self.layer not in NAMES:
            raise ValueError(f"unknown layer {self.layer!r} (known: {', '.join(NAMES)})")
        if self.cause not in NAMES[self.layer]:
            raise ValueError(f"unknown cause {self.cause!r} for layer {self.layer} "
                             f"(known: {', '.join(NAMES[self.layer])})")
        extra = set(self.scope) - set(SCOPE_KEYS)
        if extra:
            raise ValueError(f"unknown scope keys {sorted(extra)} (known: {', '.join(SCOPE_KEYS)})")
        return self


class Scenario(StrictModel):
    description: str
    seed: int = 1
    baseline: Duration = 0.0
    settle: Duration
    #: The sources that can see this scenario (both read the same run).
    sources: list[Source] = Field(default_factory=lambda: list(SOURCES))
    engine: Engine = Engine()
    simulator: Simulator = Simulator()
    load: Load = Load()
    #: What runs during the baseline phase instead of the lab's usual load and a healthy
    #: simulator (its faults and run-time knobs): a known-good state the scenario changes.
    baseline_load: Load | None = None
    baseline_simulator: Simulator | None = None
    paths: dict[Literal["mobile", "unicom", "telecom"], CarrierPath] = Field(default_factory=dict)
    #: The scenario's phase is in a peak window (``peak_windows``) that opens on the first
    #: whole minute at least ``baseline`` after the lab is up; the baseline phase is off-peak
    #: and lasts until then (up to a minute longer than ``baseline``).
    peak: bool = False
    #: The real vLLM's API server process (its HTTP server, chat template, tokenizer and
    #: detokenizer) capped at this many CPUs by a cgroup's CPU quota when the scenario
    #: applies; its engine core keeps its own.
    api_server_cpus: Annotated[float, Field(gt=0, le=64)] | None = None
    gpu: Gpu = Gpu()
    #: Load on the engine's host; without it the exporter's host check is off (the lab's
    #: host is the test tier's, its pressure never a scenario's).
    host: Host | None = None
    probes: Probes = Probes()
    #: Merged into the generated exporter config (slo:, diagnosis:, alerting:).
    exporter: dict[Literal["slo", "diagnosis", "alerting"], dict[str, Any]] = Field(
        default_factory=dict)
    #: Primary verdict first, then the secondary ones in chain order; [] means healthy.
    expect: list[Expected]

    @field_validator("simulator")
    @classmethod
    def _simulator_knobs(cls, v: Simulator, info: ValidationInfo) -> Simulator:
        engine = info.data.get("engine")
        only = [k for k in ("flags", "faults", "config") if getattr(v, k)]
        if engine is not None and engine.kind == "vllm" and only:
            raise ValueError(
                f"{', '.join(only)}: simulator-only (knobs the real vLLM has no endpoint or "
                "option for); with engine.kind vllm only simulator.down (stop the engine) "
                "applies, and vllm serve's options go in engine.flags")
        return v

    @field_validator("load")
    @classmethod
    def _fits_the_model(cls, v: Load, info: ValidationInfo) -> Load:
        engine = info.data.get("engine")
        need = v.tokens + v.max_tokens + CHAT_OVERHEAD_TOKENS
        if engine is not None and engine.kind == "vllm" and need > MAX_MODEL_LEN:
            raise ValueError(
                f"prompt_tokens {v.prompt_tokens} + max_tokens {v.max_tokens} (+"
                f"{CHAT_OVERHEAD_TOKENS} of chat template) exceed the tiny model's "
                f"--max-model-len {MAX_MODEL_LEN}")
        return v

    @field_validator("baseline_simulator")
    @classmethod
    def _baseline_runtime(cls, v: Simulator | None, info: ValidationInfo) -> Simulator | None:
        if v is not None and (v.flags or v.down):
            raise ValueError("flags and down have no baseline of their own: the simulator "
                             "starts with simulator.flags, and stops when the scenario applies")
        engine = info.data.get("engine")
        if v is not None and engine is not None and engine.kind == "vllm" and (
                v.faults or v.config):
            raise ValueError("simulator-only: the real vLLM has no run-time knobs")
        return v

    @model_validator(mode="after")
    def _bounded(self) -> Scenario:
        if self.baseline + self.settle > 180:
            raise ValueError("baseline + settle over 3 minutes: the lab keeps scenarios short")
        if not self.sources:
            raise ValueError("sources: at least one of exporter, prometheus")
        if self.api_server_cpus is not None and self.engine.kind != "vllm":
            raise ValueError("api_server_cpus caps the real vLLM's API server (engine.kind "
                             "vllm); the simulator's is simulator.faults.frontend_delay")
        if self.peak and self.baseline <= 0:
            raise ValueError("peak needs a baseline: the off-peak phase the peak is compared with")
        return self

    def path(self, carrier: str) -> CarrierPath:
        return self.paths.get(carrier, CarrierPath())  # type: ignore[call-overload,no-any-return]


def load_scenario(path: str | Path) -> Scenario:
    """The scenario in ``path``, or ScenarioError with one line per problem."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ScenarioError([f"{path}: cannot read: {exc.strerror or exc}"]) from None
    try:
        data, lines = compose_named(text, str(path))
        if not isinstance(data, dict):
            raise ScenarioError([f"{path}: a scenario is a mapping of keys, got {type(data).__name__}"])
        return validate(Scenario, data, lines, str(path))
    except ConfigError as exc:
        raise ScenarioError(exc.messages) from None


def scenario_files(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.yaml"))
