"""The shape of the two Python packages users install, and of the harness's, the demo's and the
end-to-end benchmark's: no import cycle (type-only imports count). Modules are cut by concern,
not by length (HA core keeps a platform in one file), so there is no line cap."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGES = {
    "voice_stack": REPO / "custom_components" / "voice_stack",
    "voice_stack_gateway": REPO / "gateway" / "src" / "voice_stack_gateway",
    "voice_stack_dev": REPO / "dev" / "voice_stack_dev",
    "voice_stack_dev.demo": REPO / "dev" / "voice_stack_dev" / "demo",
    "voice_stack_bench.e2e": REPO / "bench" / "voice_stack_bench" / "e2e",
}


def imports_of(path: Path, package: str) -> set[str]:
    """The package's own modules that a module imports, TYPE_CHECKING blocks included."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1:  # from .x import y / from . import x
                names = [node.module] if node.module else [a.name for a in node.names]
                found.update(name.split(".")[0] for name in names if name)
            elif node.module and node.module.startswith(f"{package}."):
                found.add(node.module.removeprefix(f"{package}.").split(".")[0])
    return found


def graph(root: Path, package: str) -> dict[str, set[str]]:
    modules = {p.stem: p for p in root.glob("*.py")}
    return {
        name: imports_of(path, package) & modules.keys() - {name} for name, path in modules.items()
    }


def find_cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as a path of modules, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_the_checker_finds_a_cycle() -> None:
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_no_import_cycle(package: str) -> None:
    edges = graph(PACKAGES[package], package)
    assert len(edges) > 5, "the package was not found"
    assert find_cycle(edges) is None, " -> ".join(find_cycle(edges) or [])
