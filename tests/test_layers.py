"""The layers stay one-way (DESIGN.md, CONTRIBUTING.md): every `veriloop.*` import, read from the source with `ast`
(module level, inside functions and under TYPE_CHECKING alike), points down the list or across to a sibling, and no
two siblings import each other. A new top-level package must be placed in `LAYERS` before this test passes."""

from __future__ import annotations

import ast
from collections import defaultdict
from functools import cache
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "veriloop"

LAYERS: list[tuple[str, set[str]]] = [
    ("face", {"cli", "service", "bench", "__main__"}),
    ("methods", {"agents", "training"}),
    ("machinery", {"judge", "search", "tasks", "verifiers", "llm", "client"}),
    ("ground", {"sandbox", "kernels", "store"}),
    ("core", {"records", "errors", "config", "registry", "testing", "__init__", "_astguard"}),
]
"""Top to bottom. An import may point to its own layer or any layer below it, never above. `client` is the old path
of the judge's client, a re-export of `judge.client`, so it sits beside `judge`."""

RANK = {name: len(LAYERS) - i for i, (_, names) in enumerate(LAYERS) for name in names}
LAYER_OF = {name: layer for layer, names in LAYERS for name in names}

TEST_DOUBLE_USERS = {"bench"}
"""`veriloop.testing` holds test doubles: besides the tests, only the benchmark harness (smoke runs) uses them."""


def _top(relative: Path) -> str:
    return relative.parts[0].removesuffix(".py")


def _targets(node: ast.AST, module: list[str]) -> list[str]:
    """Dotted `veriloop.*` names an import statement reaches (relative imports resolved against `module`)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            base = ".".join([*module[: len(module) - node.level], *([base] if base else [])])
        return [base, *(f"{base}.{alias.name}" for alias in node.names)]
    return []


@cache
def import_edges() -> dict[tuple[str, str], list[str]]:
    """(importing top-level package, imported top-level package) -> where, for every cross-package import."""
    edges: dict[tuple[str, str], list[str]] = defaultdict(list)
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        module = ["veriloop", *relative.with_suffix("").parts]
        if module[-1] == "__init__":
            module = module[:-1]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for name in _targets(node, module):
                parts = name.split(".")
                if len(parts) > 1 and parts[0] == "veriloop" and parts[1] != _top(relative):
                    edges[(_top(relative), parts[1])].append(f"{relative}:{getattr(node, 'lineno', 0)}")
    return edges


def test_every_top_level_module_has_a_layer() -> None:
    found = {_top(path.relative_to(PACKAGE)) for path in PACKAGE.rglob("*.py")}
    assert found - set(RANK) == set(), "place each new package or module in a layer in LAYERS (and CONTRIBUTING.md)"


def test_no_import_points_up_a_layer() -> None:
    upward = {
        f"{a} ({LAYER_OF[a]}) -> {b} ({LAYER_OF[b]})": where
        for (a, b), where in import_edges().items()
        if a in RANK and b in RANK and RANK[b] > RANK[a]
    }
    assert upward == {}


def test_siblings_never_import_each_other_both_ways() -> None:
    edges = import_edges()
    both = {
        f"{a} <-> {b}": edges[(a, b)] + edges[(b, a)]
        for (a, b) in edges
        if a < b and (b, a) in edges and LAYER_OF.get(a) == LAYER_OF.get(b)
    }
    assert both == {}


def test_test_doubles_stay_out_of_production_layers() -> None:
    users = {a: where for (a, b), where in import_edges().items() if b == "testing" and a not in TEST_DOUBLE_USERS}
    assert users == {}


def test_the_checker_sees_imports_inside_functions() -> None:
    """The sample_data import this test once caught was inside a function: make sure such imports are read."""
    tree = ast.parse("def f():\n    from veriloop.agents import direct\n    import veriloop.store\n")
    names = [name for node in ast.walk(tree) for name in _targets(node, ["veriloop", "training", "x"])]
    assert "veriloop.agents.direct" in names and "veriloop.store" in names
    relative = ast.parse("from ..agents import direct\n").body[0]
    assert _targets(relative, ["veriloop", "training", "x"])[0] == "veriloop.agents"
