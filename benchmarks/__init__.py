"""Benchmarks: each module generates its own input, prints a ratio to a named reference and
exits non-zero when a target is missed (docs/benchmarks.md). Run them from the repository
root as modules, e.g. ``.venv/bin/python -m benchmarks.engine_parse``; helpers they share with
the tests are imported from the ``tests.support`` package."""
