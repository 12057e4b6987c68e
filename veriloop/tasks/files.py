"""Task files and datasets as suites: `--suite FILE` (JSONL, JSON, Parquet) and `--suite hf:NAME[:SPLIT]`.

A source is read whole, converted by its format (detected from the first row, or named with
`FILE#FORMAT`), and validated against the task schema before anything else happens: one bad row
fails the whole file with every problem listed by row number and field, so a run never starts on
(and the store never receives) part of a broken file.

Suite identity: the name is the file's stem (or the dataset's last name part), the version is the
format plus a content hash, and the key stored on a run is the absolute path (or `hf:` plus the
absolute folder), so the run can be resumed or rerun from any working directory. Task ids are the
rows' ids; ids without a `/` get the suite name as prefix (`mytasks/t1`), since task ids are unique
across the whole store.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from veriloop.config import Settings
from veriloop.errors import ConfigError, NotFoundError
from veriloop.tasks.base import Suite
from veriloop.tasks.formats import Context, Format, detect, get_format
from veriloop.tasks.schema import TaskSpec, to_task

SUFFIXES = (".jsonl", ".json", ".parquet")
MAX_REPORTED = 20
"""Problems listed in a validation error (the count says how many there were in all)."""


class TaskFileError(ConfigError):
    """A task file failed validation; `problems` holds one line per bad field, `row N, field F: message`."""

    def __init__(self, source: str, problems: Sequence[str], rows: int) -> None:
        self.problems = list(problems)
        shown = "\n  ".join(self.problems[:MAX_REPORTED])
        more = f"\n  ... and {len(self.problems) - MAX_REPORTED} more" if len(self.problems) > MAX_REPORTED else ""
        super().__init__(
            f"{source}: {len(self.problems)} problem(s) in {rows} row(s); nothing was loaded\n  {shown}{more}"
        )


@dataclass(frozen=True)
class Source:
    """A parsed `--suite` value that names a file or a dataset."""

    kind: str  # "file" or "hf"
    location: str
    split: str | None = None
    format: str | None = None

    @property
    def key(self) -> str:
        """The canonical `--suite` value: stored on runs, resolvable from any working directory."""
        tail = f"#{self.format}" if self.format else ""
        if self.kind == "file":
            return f"{self.location}{tail}"
        split = f":{self.split}" if self.split else ""
        return f"hf:{self.location}{split}{tail}"


def is_task_source(spec: str) -> bool:
    """Whether a `--suite` value names a task file or dataset (rather than a registered suite)."""
    head = spec.partition("#")[0]
    if spec.startswith("hf:"):
        return True
    path = Path(head).expanduser()
    return path.suffix.lower() in SUFFIXES or path.is_file()


def parse_source(spec: str, format: str | None = None) -> Source:
    """`FILE[#FORMAT]` or `hf:NAME[:SPLIT][#FORMAT]`; a local path is made absolute."""
    head, _, fragment = spec.partition("#")
    chosen = format or fragment or None
    if chosen is not None:
        get_format(chosen)
    if head.startswith("hf:"):
        name = head[3:]
        split: str | None = None
        if ":" in name:
            name, split = name.rsplit(":", 1)
        if not name:
            raise ConfigError("hf: needs a dataset name or a folder written by save_to_disk")
        local = Path(name).expanduser()
        location = str(local.resolve()) if local.exists() else name
        return Source("hf", location, split or None, chosen)
    path = Path(head).expanduser()
    if not path.is_file():
        raise NotFoundError(f"task file {head} does not exist")
    return Source("file", str(path.resolve()), None, chosen)


def suite_key(spec: str) -> str:
    """The value a run stores for `--suite spec`: unchanged for registered suites, canonical for files and datasets."""
    return parse_source(spec).key if is_task_source(spec) else spec


# --------------------------------------------------------------------------- reading rows


def _jsonl(raw: bytes, where: str) -> list[tuple[int, Any]]:
    rows = []
    for number, line in enumerate(raw.decode("utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rows.append((number, json.loads(line)))
        except json.JSONDecodeError as exc:
            raise TaskFileError(where, [f"row {number}: not valid JSON ({exc.msg})"], number) from None
    return rows


def _json(raw: bytes, where: str) -> list[tuple[int, Any]]:
    try:
        data = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        # a JSONL file named .json: fall back to one object per line
        if raw.lstrip().startswith(b"{") and b"\n" in raw.strip():
            return _jsonl(raw, where)
        raise TaskFileError(where, [f"not valid JSON ({exc})"], 0) from None
    if isinstance(data, dict) and isinstance(data.get("tasks"), list):
        data = data["tasks"]
    if isinstance(data, dict):
        data = [data]
    if not isinstance(data, list):
        raise TaskFileError(where, ['expected a list of task objects (or {"tasks": [...]})'], 0)
    return list(enumerate(data, start=1))


def _parquet(path: Path) -> list[tuple[int, Any]]:
    import pyarrow.parquet as pq  # type: ignore[import-untyped]

    try:
        table = pq.read_table(path)
    except Exception as exc:  # pyarrow raises several types for a broken file
        raise ConfigError(f"{path}: not a readable Parquet file ({exc})") from None
    return list(enumerate(table.to_pylist(), start=1))


def read_file(path: Path) -> tuple[list[tuple[int, Any]], str]:
    """(numbered rows, content hash) of a task file."""
    raw = path.read_bytes()
    digest = hashlib.sha256(raw).hexdigest()[:16]
    suffix = path.suffix.lower()
    if suffix == ".parquet" or raw[:4] == b"PAR1":
        return _parquet(path), digest
    if suffix == ".json":
        return _json(raw, str(path)), digest
    return _jsonl(raw, str(path)), digest


def read_dataset(source: Source) -> tuple[list[tuple[int, Any]], str, str | None]:
    """(numbered rows, fingerprint, split) of a `datasets` folder (save_to_disk) or hub dataset."""
    try:
        import datasets  # type: ignore[import-untyped]
    except ImportError:
        raise ConfigError("hf: suites need the `datasets` package (pip install datasets)") from None
    folder = Path(source.location)
    try:
        if folder.is_dir():
            loaded = datasets.load_from_disk(str(folder))
        else:
            loaded = datasets.load_dataset(source.location, split=source.split or "test")
    except FileNotFoundError as exc:
        raise NotFoundError(f"dataset {source.location}: {exc}") from None
    except Exception as exc:  # the hub client raises many types (offline, gated, unknown name)
        raise ConfigError(f"dataset {source.location} could not be loaded: {type(exc).__name__}: {exc}") from None
    if isinstance(loaded, datasets.DatasetDict):
        splits = list(loaded)
        split = source.split or ("test" if "test" in splits else splits[0] if len(splits) == 1 else None)
        if split is None or split not in loaded:
            raise ConfigError(f"dataset {source.location} has splits {', '.join(splits)}: name one as hf:NAME:SPLIT")
        loaded = loaded[split]
    else:
        split = source.split or (None if folder.is_dir() else "test")
    rows = list(enumerate((dict(row) for row in loaded), start=1))
    return rows, str(getattr(loaded, "_fingerprint", "") or ""), split


# --------------------------------------------------------------------------- validation


def _field(location: Sequence[int | str]) -> str:
    return ".".join(str(part) for part in location) or "(row)"


def convert_rows(
    rows: Sequence[tuple[int, Any]], fmt: Format, ctx: Context, settings: Settings, where: str
) -> list[tuple[int, TaskSpec]]:
    """Every row converted and validated; a TaskFileError listing each problem when any row is bad."""
    problems: list[str] = []
    converted: list[tuple[int, dict[str, Any]]] = []
    for number, row in rows:
        if not isinstance(row, dict):
            problems.append(f"row {number}: expected an object, got {type(row).__name__}")
            continue
        try:
            converted.append((number, fmt.convert(row, ctx)))
        except KeyError as exc:
            problems.append(f"row {number}, field {exc.args[0]!r}: missing")
        except (ValueError, TypeError, SyntaxError) as exc:
            problems.append(f"row {number}: {exc}")
    specs: list[tuple[int, TaskSpec]] = []
    seen: dict[str, int] = {}
    for number, data in converted:
        try:
            spec = TaskSpec.model_validate(data)
        except ValidationError as exc:
            for error in exc.errors():
                problems.append(f"row {number}, field {_field(error['loc'])!r}: {error['msg']}")
            continue
        if spec.id in seen:
            problems.append(f"row {number}, field 'id': {spec.id!r} repeats row {seen[spec.id]}")
            continue
        seen[spec.id] = number
        specs.append((number, spec))
    if problems:
        raise TaskFileError(where, problems, len(rows))
    if fmt.finish is not None:
        finished = fmt.finish([spec.model_dump() for _, spec in specs], settings)
        specs = [(number, TaskSpec.model_validate(row)) for (number, _), row in zip(specs, finished, strict=True)]
    return specs


def _suite_name(source: Source, split: str | None) -> str:
    if source.kind == "file":
        return Path(source.location).stem
    name = source.location.rstrip("/").rsplit("/", 1)[-1]
    return f"{name}-{split}" if split else name


def load_task_source(spec: str, settings: Settings, format: str | None = None) -> Suite:
    """The suite of a task file or dataset; raises TaskFileError (nothing loaded) when any row is bad."""
    source = parse_source(spec, format)
    if source.kind == "file":
        rows, digest = read_file(Path(source.location))
        split = None
        ctx = Context(path=Path(source.location))
    else:
        rows, digest, split = read_dataset(source)
        ctx = Context(path=Path(source.location) if Path(source.location).is_dir() else None)
    where = source.key
    if not rows:
        raise TaskFileError(where, ["no rows"], 0)
    fmt = get_format(source.format) if source.format else detect([row for _, row in rows[:1]])
    specs = convert_rows(rows, fmt, ctx, settings, where)
    name = _suite_name(source, split)
    tasks = tuple(to_task(task, name, task.id if "/" in task.id else f"{name}/{task.id}") for _, task in specs)
    version = f"{fmt.name};sha256:{digest}" if source.kind == "file" else f"{fmt.name};fingerprint:{digest}"
    return Suite(name, version, tasks, source=where)


def source_of_format(name: str) -> str:
    """Where files of a format come from (for `suites list`)."""
    return get_format(name).origin
