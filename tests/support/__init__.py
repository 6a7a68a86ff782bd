"""Test support: helpers, fakes and subprocess entry points the tests (and benchmarks) share.

Nothing here is collected as a test. Everything a test reads lives inside this repository:
``ROOT`` is the repository root and ``FIXTURES`` its ``tests/fixtures``.
"""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures"
