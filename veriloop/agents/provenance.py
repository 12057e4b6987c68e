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
from veriloop.config import Settings
from veriloop.errors import VeriloopError
from veriloop.llm.models import BundledModel, bundled
from veriloop.records import Task
from veriloop.store.summary import Provenance, SuiteProvenance
from veriloop.tasks import Suite

SECRET_KEYS = frozenset({"api_key", "api_token", "password", "token"})
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".gguf", ".pt")


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


def model_files(settings: Settings) -> list[Path]:
    """The files whose bytes are the model: a bundled model's GGUF part(s), else the folder's weights."""
    llm = settings.llm
    if llm.backend != "embedded":
        return []  # a served model: only its id is known here
    model = bundled(llm.model)
    if model is not None:
        return model.part_paths() if model.installed() else []  # the converted folder derives from them
    scheme, sep, rest = llm.model.partition(":")
    folder = Path(llm.model).expanduser()
    if sep and scheme == "checkpoint":
        from veriloop.training.checkpoints import resolve_checkpoint

        folder = resolve_checkpoint(rest, settings)
    if not folder.is_dir():
        return [folder] if folder.is_file() else []
    return [path for path in folder.iterdir() if path.name.endswith(WEIGHT_SUFFIXES)]


def gguf_hash(model: BundledModel, settings: Settings) -> str | None:
    """sha256 of a multi-part model's whole GGUF: the checked value its converted folder records, else the parts'
    bytes hashed in order (the same digest as the joined file's), remembered per part sizes and mtimes."""
    folder = settings.paths.cache_dir / "models" / model.name
    with contextlib.suppress(OSError, ValueError):
        recorded = json.loads((folder / "veriloop-source.json").read_text()).get("sha256")
        if isinstance(recorded, str) and recorded:
            return "sha256:" + recorded
    parts = model_files(settings)
    if not parts:
        return None
    key = (";".join(str(path.resolve()) for path in parts), sum(p.stat().st_size for p in parts), 0)
    if key not in _HASHES:
        digest = hashlib.sha256()
        for path in parts:
            with path.open("rb") as handle:
                for block in iter(lambda handle=handle: handle.read(1 << 22), b""):  # type: ignore[misc]
                    digest.update(block)
        _HASHES[key] = digest.hexdigest()
    return "sha256:" + _HASHES[key]


def checkpoint_hash(settings: Settings) -> str | None:
    """The weights' hash: a bundled multi-part GGUF's own SHA-256 (the release's), else over the weight files."""
    try:
        model = bundled(settings.llm.model) if settings.llm.backend == "embedded" else None
        if model is not None and len(model.parts) > 1:
            return gguf_hash(model, settings)
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
    """The configured sandbox backend and what it runs on, as the backend itself reports it without starting."""
    from veriloop.sandbox import SANDBOXES

    backend = settings.sandbox.backend
    try:
        version = SANDBOXES.load(backend).installed_version(settings)
    except (VeriloopError, OSError):  # an unknown name, a missing package, a probe that failed: nothing to record
        version = ""
    return {"backend": backend, "version": version, "python": sys.executable}


def verifier_versions(settings: Settings, tasks: tuple[Task, ...] | list[Task]) -> dict[str, str]:
    """Versions of the verifiers the slice's tasks go to ('' when the tool is not installed), each as its verifier
    reads it."""
    from veriloop.verifiers.base import VERIFIERS
    from veriloop.verifiers.target import proof_verifier

    proved = {task.language for task in tasks if task.language != "python" or task.spec}  # Python: specs only
    wanted = {name for name in map(proof_verifier, proved) if name is not None}
    found: dict[str, str] = {}
    for name in sorted(wanted):
        try:
            found[name] = VERIFIERS.load(name).installed_version(settings)
        except (VeriloopError, OSError):
            found[name] = ""
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
