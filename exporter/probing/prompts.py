"""Prompts for probes and bench runs, sized in tokens.

A prompt that starts with a unique nonce shares no cacheable block with any earlier one, so
a prefix cache cannot hide prefill from TTFT (vLLM hashes full KV blocks chained from the
first). The ``cached`` profile does the opposite on purpose: a fixed prefix with the nonce
at the end, to measure the prefix-cache path.

Sizes are approximate: filler words are short common English words, one token each in BPE
vocabularies and in the simulator's tokenizer; ``usage.prompt_tokens`` has the exact count.
"""

from __future__ import annotations

import random
import secrets
from typing import Literal

Profile = Literal["short", "long_context", "cached"]

#: Short common English words: one token each in BPE vocabularies, and (at most four
#: characters) in the simulator's tokenizer, which generates its text from them too.
WORDS = (
    "the", "a", "of", "to", "and", "in", "is", "it", "that", "was", "for", "on", "are",
    "with", "as", "at", "be", "this", "have", "from", "or", "one", "had", "by", "word",
    "but", "not", "what", "all", "were", "we", "when", "your", "can", "said", "use", "each",
    "she", "do", "how", "if", "will", "up", "out", "many", "then", "them", "some", "so",
    "make", "like", "him", "into", "time", "has", "look", "two", "more", "go", "see", "way",
    "who", "may", "down", "side", "been", "now", "find", "any", "new", "work", "part",
    "take", "get", "made", "live", "back", "only", "most", "very", "know", "just", "also",
    "well", "good", "much", "over", "such", "long", "read", "line", "near", "far", "slow",
)

SHORT_TASK = "Write a short paragraph about a lighthouse keeper and the sea."
LONG_TASK = "Reply with one word."
CACHED_TASK = "Summarize the text above in one sentence."
#: Seed of the cached profile's prefix: the same text in every process and every release.
CACHED_PREFIX_SEED = 20240601
#: Roughly what the nonce and task sentence add, so long prompts land near their size.
_OVERHEAD_TOKENS = 16


def nonce() -> str:
    return secrets.token_hex(8)


def filler(tokens: int, rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(tokens, 0)))


def sized_prompt(tokens: int, unique: str, rng: random.Random) -> str:
    """About ``tokens`` tokens, opening with ``unique`` so no earlier prefix matches."""
    body = filler(tokens - _OVERHEAD_TOKENS, rng)
    return f"[{unique}] {body} {SHORT_TASK}".replace("  ", " ")


def probe_prompt(profile: Profile, prompt_tokens: int, unique: str) -> str:
    """The prompt text a probe sends; ``unique`` is a fresh nonce per request."""
    if profile == "short":
        return f"[{unique}] {SHORT_TASK}"
    if profile == "long_context":
        body = filler(prompt_tokens - _OVERHEAD_TOKENS, random.Random(unique))
        return f"[{unique}] {body} {LONG_TASK}"
    prefix = filler(prompt_tokens - _OVERHEAD_TOKENS, random.Random(CACHED_PREFIX_SEED))
    return f"{prefix} [{unique}] {CACHED_TASK}"


def probe_max_tokens(profile: Profile, configured: int) -> int:
    # long_context measures prefill: one output token makes E2E ~= TTFT.
    return 1 if profile == "long_context" else configured
