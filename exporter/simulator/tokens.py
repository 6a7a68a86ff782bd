"""The simulator's tokenizer and text generator: cheap, deterministic, documented.

A token is up to four characters of a whitespace-separated word: "tokenizer" is three tokens
("toke", "nize", "r"). That is close to the ~4 characters per token of English BPE, which is
all the latency model needs (prompt length drives prefill time and KV use). Generated tokens
are short words with a leading space, one token each, so re-tokenizing a completion gives
back its ``usage.completion_tokens``.
"""

from __future__ import annotations

import random

TOKEN_CHARS = 4

# Words of at most TOKEN_CHARS characters, so that each generated word is exactly one token.
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
