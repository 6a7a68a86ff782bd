"""The package layout holds what docs/architecture.md promises: small modules, no circles."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "exporter"
MAX_LINES = 450


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def imports_of(path: Path) -> set[str]:
    """Every exporter module ``path`` imports, at top level or inside functions."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                found.add(sub if sub in MODULES else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in MODULES}


def graph() -> dict[str, set[str]]:
    return {name: imports_of(path) - {name} for name, path in MODULES.items()}


def find_cycle(edges: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        stack.pop()
        state[node] = 2
        return []

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return []


def test_no_module_import_circle() -> None:
    assert find_cycle(graph()) == []


def test_no_package_import_circle() -> None:
    """Folders too: e.g. config/ never imports checks/ while checks/ import config/."""

    def package(module: str) -> str:
        path = MODULES[module]
        return module if path.name == "__init__.py" else module.rpartition(".")[0]

    edges: dict[str, set[str]] = {}
    for src, dsts in graph().items():
        for dst in dsts:
            a, b = package(src), package(dst)
            # A package and its own subpackages are one room seen from outside.
            if a != b and not a.startswith(b + ".") and not b.startswith(a + "."):
                edges.setdefault(a, set()).add(b)
    assert find_cycle(edges) == []


#: Where a reader meets the chain's and the alerts' types side by side: one name, one class.
ONE_NAMESPACE = ("exporter/diagnosis", "exporter/monitoring", "exporter/metrics")


def test_no_class_name_is_defined_twice() -> None:
    seen: dict[str, list[str]] = {}
    for folder in ONE_NAMESPACE:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    seen.setdefault(node.name, []).append(str(path.relative_to(ROOT)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}


@pytest.mark.parametrize("module", sorted(MODULES), ids=str)
def test_module_size(module: str) -> None:
    path = MODULES[module]
    rel = str(path.relative_to(ROOT))
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES, f"{rel}: {lines} lines > {MAX_LINES}"


#: How code would name the folder beside the checkout, assembled so that this file, which
#: looks for them, does not hold them itself (a scan of the tree would list it).
_SIBLING = "sha" + "red"
#: As a path: joined to another, or the start of one ("shared" alone is also a word: a
#: shared system prompt).
OUTSIDE = (f'/ "{_SIBLING}"', f'"{_SIBLING}/', "parent" + ".parent" * 2, f"../{_SIBLING}")


def test_nothing_reads_outside_the_repository() -> None:
    """A clone alone must work: no code names the folder beside the checkout."""
    offenders = []
    for folder in ("exporter", "tests", "benchmarks"):
        for path in (ROOT / folder).rglob("*.py"):
            text = path.read_text()
            if any(name in text for name in OUTSIDE):
                offenders.append(str(path.relative_to(ROOT)))
    assert offenders == []


def test_the_users_diagnosis_doc_is_read_in_minutes() -> None:
    # The chain for users; the lab, the generator and the internals are in docs/dev/.
    assert len((ROOT / "docs" / "diagnosis.md").read_text().splitlines()) <= 250


def test_running_it_for_real_leads_to_the_deployment_guide() -> None:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Running it for real", 1)[1].split("\n## ", 1)[0]
    assert "(docs/deploying.md)" in section
    assert (ROOT / "docs" / "deploying.md").is_file()
