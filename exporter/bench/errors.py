"""bench's one error type, in a module of its own so every bench module can raise it
without importing the flag parser."""

from __future__ import annotations


class BenchError(Exception):
    """A bad flag or input: one line for the user, exit 2."""
