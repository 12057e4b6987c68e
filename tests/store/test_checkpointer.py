"""LangGraph checkpoints live in the store's database: a graph interrupted in one process resumes in another."""

from __future__ import annotations

import operator
from pathlib import Path
from typing import Annotated, TypedDict

import pytest
from langchain_core.runnables import RunnableConfig
from langgraph.graph import END, START, StateGraph

from veriloop.agents.checkpoint import open_checkpointer, thread_id
from veriloop.config import load_settings
from veriloop.errors import ConfigError
from veriloop.store import TrajectoryStore


class Counter(TypedDict):
    steps: Annotated[list[str], operator.add]


def _graph() -> StateGraph[Counter]:
    graph = StateGraph(Counter)
    graph.add_node("first", lambda state: {"steps": ["first"]})
    graph.add_node("second", lambda state: {"steps": ["second"]})
    graph.add_edge(START, "first")
    graph.add_edge("first", "second")
    graph.add_edge("second", END)
    return graph


async def test_an_interrupted_graph_resumes_from_the_store_database(
    store: TrajectoryStore, db_url: str, tmp_path: Path
) -> None:
    settings = load_settings(paths={"home": tmp_path}, store={"url": db_url})  # the migrated store's database
    config: RunnableConfig = {"configurable": {"thread_id": thread_id("run", "task")}}
    async with open_checkpointer(settings) as saver:
        interrupted = _graph().compile(checkpointer=saver, interrupt_before=["second"])
        assert await interrupted.ainvoke(Counter(steps=[]), config) == {"steps": ["first"]}
    async with open_checkpointer(settings) as saver:  # a fresh connection, as after a restart
        resumed = _graph().compile(checkpointer=saver)
        assert await resumed.ainvoke(None, config) == {"steps": ["first", "second"]}


async def test_unsupported_databases_are_refused(tmp_path: Path) -> None:
    settings = load_settings(paths={"home": tmp_path}, store={"url": "mysql://localhost/x"})
    with pytest.raises(ConfigError, match="no LangGraph saver"):
        async with open_checkpointer(settings):
            pass
