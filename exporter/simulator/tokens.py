"""The simulator's tokenizer and text generator: cheap, deterministic, documented.

A token is up to four characters of a whitespace-separated word: "tokenizer" is three tokens
("toke", "nize", "r"). That is close to the ~4 characters per token of English BPE, which is
all the latency model needs (prompt length drives prefill time and KV use). Generated tokens
are short words with a leading space, one token each, so re-tokenizing a completion gives
back its ``usage.completion_tokens``.
"""

from __future__ import annotations

import random

# Filler words are at most TOKEN_CHARS long, so each generated word is exactly one token.
from exporter.probing.prompts import WORDS

TOKEN_CHARS = 4


def tokenize(text: str) -> list[str]:
    """Token pieces of ``text``; their count is the prompt length the engine model sees."""
    pieces: list[str] = []
    for word in text.split():
        pieces.extend(word[i : i + TOKEN_CHARS] for i in range(0, len(word), TOKEN_CHARS))
    return pieces


def count_tokens(text: str) -> int:
    return len(tokenize(text))


class Words:
    """The words one request generates, reproducible from its seed."""

    def __init__(self, seed: int) -> None:
        self._rng = random.Random(seed)

    def next(self) -> str:
        return " " + self._rng.choice(WORDS)
