"""Fixtures for training tests: demo-sized trajectories in a session home, one torch thread."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

from veriloop.bench._sample_data import SampleRuns, make_sample_runs
from veriloop.config import Settings, load_settings


@pytest.fixture(scope="session")
def demo_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("training-demo")


@pytest.fixture(scope="session")
def demo_settings(demo_home: Path) -> Settings:
    return load_settings(paths={"home": demo_home}, llm={"torch_threads": 1})


@pytest.fixture(scope="session")
def demo_runs(demo_settings: Settings) -> SampleRuns:
    """Five HumanEval tasks answered twice (reference bodies, `return None`) by the direct agent."""
    return make_sample_runs(demo_settings, limit=5)


@pytest.fixture(autouse=True)
def _one_thread() -> Iterator[None]:
    """Two shared cores: training tests use one intra-op thread."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def base_model(model_folder: Path) -> Path:
    """The embedded default model as a folder (the session's shared conversion)."""
    return model_folder


@pytest.fixture(scope="session")
def exports(demo_runs: SampleRuns, demo_settings: Settings, demo_home: Path) -> dict[str, Path]:
    """The demo runs exported once per kind (JSONL) for the trainers."""
    from veriloop.store import TrajectoryStore
    from veriloop.store.exports import export

    folder = demo_home / "exports"
    paths = {}
    with TrajectoryStore.from_settings(demo_settings) as store:
        for kind in ("sft", "preference", "verifier", "prm"):
            paths[kind] = folder / f"{kind}.jsonl"
            export(store, kind, demo_runs.runs, paths[kind])
    return paths
