"""The family set of an exposition: name -> (type, label names), as a test compares them.

Names and types come from the ``# TYPE`` lines, label names (``le`` left out) from the samples
of each family. ``_created`` families are not counted: prometheus_client writes a
``<name>_created`` gauge beside each counter and histogram in the 0.0.4 text format, which
is metadata of that family, not a family of its own.
"""

from __future__ import annotations

import re

FamilySet = dict[str, tuple[str, frozenset[str]]]

_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="(?:[^"\\]|\\.)*"')
_SUFFIXES = {"histogram": ("_bucket", "_sum", "_count"), "summary": ("_sum", "_count")}


def family_set(text: str, prefix: str = "") -> FamilySet:
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind.strip()
    created = {
        n for n, k in types.items()
        if k == "gauge" and n.endswith("_created")
        and any(t.startswith(n.removesuffix("_created")) and t != n for t in types)
    }
    sample_family: dict[str, str] = {}
    for name, kind in types.items():
        sample_family[name] = name
        for suffix in _SUFFIXES.get(kind, ()):
            sample_family[name + suffix] = name
    labels: dict[str, set[str]] = {n: set() for n in types}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        end = min((i for i in (line.find("{"), line.find(" ")) if i >= 0), default=len(line))
        family = sample_family.get(line[:end])
        if family is not None and line[end:end + 1] == "{":
            labels[family].update(n for n in _LABEL.findall(line[end:]) if n != "le")
    return {
        n: (k, frozenset(labels[n])) for n, k in types.items()
        if n.startswith(prefix) and n not in created
    }


def diff(got: FamilySet, want: FamilySet) -> list[str]:
    """Human-readable differences, empty when equal."""
    out = [f"missing {n} ({want[n][0]})" for n in sorted(set(want) - set(got))]
    out += [f"extra {n} ({got[n][0]})" for n in sorted(set(got) - set(want))]
    for n in sorted(set(got) & set(want)):
        if got[n][0] != want[n][0]:
            out.append(f"{n}: type {got[n][0]}, want {want[n][0]}")
        if got[n][1] != want[n][1]:
            out.append(f"{n}: labels {sorted(got[n][1])}, want {sorted(want[n][1])}")
    return out
