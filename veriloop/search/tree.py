"""A stored search tree as a `networkx` graph, for analysis and for the dashboard's tree view."""

from __future__ import annotations

from typing import Any

import networkx as nx  # type: ignore[import-untyped]

from veriloop.records import Node
from veriloop.store import TrajectoryStore


def node_attributes(node: Node) -> dict[str, Any]:
    """What a graph node carries: enough to draw and colour a tree without re-reading the store."""
    result = node.verify_result
    return {
        "depth": node.depth,
        "role": node.role,
        "score": node.score,
        "code": node.code,
        "status": result.status.value if result is not None else None,
        "verified": result.verified if result is not None else None,
        "errors": result.errors if result is not None else None,
        "tokens": node.completion.usage.total_tokens if node.completion is not None else 0,
        "search": node.metadata.get("search"),
        "search_id": node.metadata.get("search_id"),
        "level": node.metadata.get("level"),
        "feedback": node.metadata.get("feedback"),
        "metadata": node.metadata,
    }


def build_tree(nodes: list[Node]) -> nx.DiGraph:
    """Edges run parent -> child; nodes whose parent is not in `nodes` are roots."""
    graph = nx.DiGraph()
    for node in nodes:
        graph.add_node(node.id, **node_attributes(node))
    for node in nodes:
        if node.parent_id is not None and node.parent_id in graph:
            graph.add_edge(node.parent_id, node.id)
    return graph


def load_tree(store: TrajectoryStore, run_id: str, task_id: str, *, search_id: str | None = None) -> nx.DiGraph:
    """Every stored node of one task in one run (optionally one search of it) as a directed tree."""
    nodes = store.get_tree(run_id, task_id)
    if search_id is not None:
        nodes = [node for node in nodes if node.metadata.get("search_id") == search_id]
    return build_tree(nodes)


def roots(graph: nx.DiGraph) -> list[str]:
    return [node for node in graph.nodes if graph.in_degree(node) == 0]
