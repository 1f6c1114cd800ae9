"""The codebase reads as layers: no module of a part imports, however indirectly, a
module that imports it (imports inside functions and under TYPE_CHECKING count), and
nothing outside a part (its tests aside) reaches into its private modules."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PARTS = ("spaces", "search", "evaluators", "latency_models", "experiments")


def _imports(part: str) -> dict[str, set[str]]:
    """Module (dotted, inside the part: ``_config``, ``cli.lut``) -> the modules of the
    same part it imports anywhere in its file."""
    names = {}
    for path in sorted((ROOT / part).rglob("*.py")):
        rel = path.relative_to(ROOT / part).with_suffix("")
        names[".".join(rel.parts)] = path
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        if name.endswith("__init__") or name.endswith("__main__"):
            continue
        package = name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            if node.level:
                base = package[: len(package) - node.level + 1]
                target = ".".join([*base, *(node.module.split(".") if node.module else [])])
            elif node.module and node.module.startswith(f"frontier.{part}."):
                target = node.module.removeprefix(f"frontier.{part}.")
            else:
                continue
            candidates = [target] if node.module else []
            candidates += [f"{target}.{a.name}".strip(".") for a in node.names]
            found |= {c for c in candidates if c in names and not c.endswith("__init__")}
        graph[name] = found - {name}
    return graph


def _cycle(graph: dict[str, set[str]]) -> list[str]:
    """One import cycle of ``graph`` (the modules in order), or []."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str]:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        state[node] = 2
        path.pop()
        return []

    for node in sorted(graph):
        if node not in state and (found := visit(node)):
            return found
    return []


@pytest.mark.parametrize("part", PARTS)
def test_no_import_cycle_inside_a_part(part: str) -> None:
    cycle = _cycle(_imports(part))
    assert not cycle, f"{part}: " + " -> ".join(cycle)


def test_the_checker_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) == []


def test_nothing_outside_a_part_imports_its_private_modules() -> None:
    private = re.compile(
        r"from frontier\.(\w+)\._\w+|import frontier\.(\w+)\._\w+"
        r"|from frontier\.(\w+) import (?:[\w, ]+, )?_[a-z]\w*"
    )
    offenders = []
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in (".venv", "build") or "site-packages" in rel.parts:
            continue
        for m in private.finditer(path.read_text()):
            part = m.group(1) or m.group(2) or m.group(3)
            own = rel.parts[0] == part or rel.parts[:2] == ("tests", part)
            if not own:
                offenders.append(f"{rel}: {m.group(0)}")
    assert not offenders, "\n".join(offenders)
