"""The parts a probe's first token and its time per output token are budgeted in: what
a verdict accounts for (``Cause.parts``) and what the page and the report stack."""

from __future__ import annotations

from enum import StrEnum


class BudgetPart(StrEnum):
    """The parts a client's mean first token is the sum of, in the order a request meets
    them. ``prefill`` is the engine's scheduled-to-first-token (its first decode step
    included) less any KV handover inside it; ``remainder`` is what none of the others
    accounts for (delivery, proxies, or a part no metric covers), negative when they add up
    to more than the client waited."""

    NETWORK = "network"
    FRONTEND = "frontend"
    QUEUE = "queue"
    KV_TRANSFER = "kv_transfer"
    PREFILL = "prefill"
    REMAINDER = "remainder"


class StreamPart(StrEnum):
    """The parts a client's mean time per output token is the sum of: the engine's own time
    per token (its decode of the probe's requests over their tokens, else its mean
    inter-token gap), and ``delivery``, the rest (the tokens' way out: the network's return
    path, the API server's detokenizing and streaming, a proxy's buffering), negative when
    the engine's time per token is more than the client saw."""

    ENGINE = "engine"
    DELIVERY = "delivery"
