"""The engine's prefix cache: which full prompt blocks need no recompute."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable


class PrefixCache:
    """LRU of prompt-block hashes. A block's hash covers every block before it (vLLM's
    chained block hash), so a hit always means the whole prefix up to it matches."""

    def __init__(self, block_size: int, capacity_blocks: int) -> None:
        self.block_size = block_size
        self.capacity = capacity_blocks
        self._blocks: OrderedDict[int, None] = OrderedDict()

    def _hashes(self, tokens: list[str]) -> Iterable[int]:
        parent = 0
        for start in range(0, len(tokens) - self.block_size + 1, self.block_size):
            parent = hash((parent, tuple(tokens[start : start + self.block_size])))
            yield parent

    def lookup(self, tokens: list[str]) -> int:
        """Cached tokens at the start of ``tokens``; the last token is always computed (its
        logits give the next token), as in vLLM."""
        hit = 0
        for h in self._hashes(tokens[:-1]):
            if h not in self._blocks:
                break
            self._blocks.move_to_end(h)
            hit += self.block_size
        return hit

    def insert(self, tokens: list[str]) -> None:
        for h in self._hashes(tokens):
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity:
            self._blocks.popitem(last=False)
