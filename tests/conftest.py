"""Fixtures shared by every test area, and the one hook that turns markers into skips.

Markers do the skipping: a test marked `bwrap`, `dafny`, `nagini`, `data`, `docker`, `postgres`, `browser`,
`gpu`, `llama_server` or `model` (or using a fixture that implies one, see `FIXTURE_MARKERS`) is skipped at
collection, with the reason, when that part is missing here. `slow` never skips: deselect it with `-m "not slow"`
(`make unit`). PostgreSQL is never skipped under `VERILOOP_REQUIRE_POSTGRES=1` (CI): its fixtures fail instead.

One converted-model home per session: the first test that needs the embedded model converts the
bundled GGUF into a fresh, empty home (about 15 s), and every later test reuses that folder. The
conversion is itself under test, and the user's ~/.local/share/veriloop is never touched.
"""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import torch

from veriloop.config import Settings, load_settings
from veriloop.testing import ModelConversion

torch.set_num_threads(1)
# Tests run on the 135M SmolLM2 unless they name another model: the default Qwen2.5-Coder models are
# for solving and take minutes to load; the tests of the Qwen models name them (tests/llm/test_qwen_models.py).
os.environ["VERILOOP_LLM__MODEL"] = "smollm2-135m-instruct"

FIXTURE_MARKERS = {
    "bwrap_cold": "bwrap",
    "bwrap_warm": "bwrap",
    "docker_sandbox": "docker",
    "dafny": "dafny",
    "nagini": "nagini",
    "data_dir": "data",
    "postgres_base_url": "postgres",
    "postgres_url": "postgres",
    "model_conversion": "model",
    "model_home": "model",
    "model_folder": "model",
    "model_settings": "model",
    "base_model": "model",
}
"""Fixtures that need a part: a test using one carries the part's marker (so `-m` and skips see it)."""

SANDBOX_PARAM_MARKERS = {"bwrap_cold": "bwrap", "bwrap_warm": "bwrap", "docker": "docker"}
"""The sandbox tests' indirect `sandbox` parameter names a backend; its value implies a marker."""


def _which(tool: str, how: str) -> str | None:
    return None if shutil.which(tool) else f"{tool} is not on PATH ({how})"


@cache
def _bwrap() -> str | None:
    if shutil.which("bwrap") is None:
        return "bubblewrap (bwrap) is not installed; scripts/setup-sandbox.sh installs it"
    return None if Path("/sys/fs/cgroup").exists() else "no cgroup file system for bwrap's limits"


@cache
def _nagini() -> str | None:
    from veriloop.verifiers.nagini import default_python

    python = default_python(load_settings())
    return None if python.exists() else f"Nagini's virtualenv ({python}) is missing (scripts/setup-verifiers.sh)"


@cache
def _data(*subpaths: str) -> str | None:
    folder = load_settings().paths.data_dir
    if folder is None or not folder.is_dir():
        return "the benchmark data folder is not configured (VERILOOP_PATHS__DATA_DIR=../shared/data)"
    missing = [p for p in subpaths if not (folder / p).exists()]
    return f"{', '.join(missing)} is missing from the data folder {folder}" if missing else None


@cache
def _docker() -> str | None:
    from veriloop.sandbox.docker import engine_available

    why = engine_available()
    return None if why is None else f"no Docker engine: {why}"


@cache
def _postgres() -> str | None:
    """A server is named, or a private cluster can be made; under VERILOOP_REQUIRE_POSTGRES=1 never skip (fail)."""
    if os.environ.get("VERILOOP_TEST_POSTGRES_URL") or os.environ.get("VERILOOP_REQUIRE_POSTGRES") == "1":
        return None
    if any(Path("/usr/lib/postgresql").glob("*/bin/initdb")):
        return None
    return "no PostgreSQL: set VERILOOP_TEST_POSTGRES_URL or install Debian's postgresql"


@cache
def _gpu() -> str | None:
    return None if torch.cuda.is_available() else "needs a CUDA device"


@cache
def _model(*names: str) -> str | None:
    """The bundled models a test names (SmolLM2 when it names none) must be installed."""
    from veriloop.llm.models import BUNDLED, SMOLLM2

    for name in names or (SMOLLM2.name,):
        if not BUNDLED[name].installed():
            return f"the bundled model {name} is not installed (make setup)"
    return None


@cache
def _llama_server() -> str | None:
    from veriloop.llm.llama_server import BUILD_COMMAND, find_llama_server

    if find_llama_server(load_settings().paths.cache_dir) is None:
        return f"no llama-server here: build and cache it once with `{BUILD_COMMAND}` (6 to 20 minutes)"
    return None


REQUIREMENTS: dict[str, Callable[..., str | None]] = {
    "bwrap": _bwrap,
    "dafny": lambda: _which("dafny", "scripts/setup-verifiers.sh installs Debian's dafny"),
    "nagini": _nagini,
    "data": _data,
    "docker": _docker,
    "postgres": _postgres,
    "browser": lambda: _which("chromium", "scripts/setup-browser.sh installs Debian's chromium"),
    "gpu": _gpu,
    "model": _model,
    "llama_server": _llama_server,
}
"""Marker -> why the part is missing here (None when present). `data` takes optional paths inside the data folder."""


LONG_FILES_FIRST = ("tests/service/test_compose_stack.py",)
"""Test files `--dist loadfile` hands out before every other: each is one long test (the Compose stack builds its
images: about 15 min), which would otherwise start last (xdist sends the files with the most tests first) and run
alone at the end while the other worker has nothing left."""


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # type: ignore[import-untyped]

    class LongFilesFirst(LoadFileScheduling):  # type: ignore[misc]
        def _assign_work_unit(self, node: Any) -> None:
            for scope in reversed(LONG_FILES_FIRST):
                if scope in self.workqueue:
                    self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    return LongFilesFirst(config, log)


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects, so implied markers count there too
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Add the markers fixtures imply, then skip each test whose marked parts are missing, with the reason."""
    for item in items:
        implied = {FIXTURE_MARKERS[name] for name in getattr(item, "fixturenames", ()) if name in FIXTURE_MARKERS}
        callspec = getattr(item, "callspec", None)
        if callspec is not None and callspec.params.get("sandbox") in SANDBOX_PARAM_MARKERS:
            implied.add(SANDBOX_PARAM_MARKERS[callspec.params["sandbox"]])
        for name in sorted(implied - {mark.name for mark in item.iter_markers()}):
            item.add_marker(name)
        for name, check in REQUIREMENTS.items():
            for mark in item.iter_markers(name):
                reason = check(*mark.args)
                if reason is not None:
                    item.add_marker(pytest.mark.skip(reason=f"[{name}] {reason}"))
                    break


@pytest.fixture(scope="session")
def model_conversion(tmp_path_factory: pytest.TempPathFactory) -> ModelConversion:
    """Convert the embedded model into a new home whose cache starts empty."""
    from veriloop.llm.embedded import default_model_dir, ensure_default_model

    home = tmp_path_factory.mktemp("veriloop-model-home")
    settings = load_settings(paths={"home": home})
    folder = default_model_dir(settings)
    assert not folder.exists(), "the session's model cache starts empty"
    started = time.perf_counter()
    assert ensure_default_model(settings) == folder
    return ModelConversion(home, folder, time.perf_counter() - started)


@pytest.fixture(scope="session")
def model_home(model_conversion: ModelConversion) -> Path:
    """A veriloop home holding the converted embedded model."""
    return model_conversion.home


@pytest.fixture
def scratch_model_home(tmp_path: Path, model_home: Path) -> Path:
    """A home of this test's own that reads the session's converted model.

    What a test trains lands under its tmp_path, deleted when it passes; in the session home it would stay
    until the session ends (gigabytes of weights and optimiser state per training).
    """
    home = tmp_path / "home"
    home.mkdir()
    (home / "cache").symlink_to(model_home / "cache", target_is_directory=True)
    return home


@pytest.fixture(scope="session")
def model_folder(model_conversion: ModelConversion) -> Path:
    """The converted embedded model as a Hugging Face folder."""
    return model_conversion.folder


@pytest.fixture(scope="session")
def model_settings(model_home: Path) -> Settings:
    return load_settings(paths={"home": model_home}, llm={"backend": "embedded", "torch_threads": 1})
