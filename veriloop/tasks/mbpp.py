"""MBPP (Austin et al. 2021) with μCode's public/private tests.

Data: `data_dir/mbpp/mbpp.jsonl` when the data folder is set, else `MBPP_URL` (google-research's copy),
downloaded once into the cache folder.

Splits are MBPP's own, by task id: `mbpp` is the test split (11-510, 500 problems) and
`mbpp-train` the training split (601-974, 374 problems; 1-10 are few-shot prompts and 511-600
validation, both left out).

Public and private tests follow μCode's environments:

* test split: public = `test_setup_code` + the first assert; private = the other asserts plus
  `challenge_test_list`;
* train split: public = every assert of `test_list`; private = `challenge_test_list`.

`Task.tests` holds all of them (setup, public and private), so an attempt passes only when both
pass. The prompt is the description plus the public tests, which name the function to write.
"""

from __future__ import annotations

import ast
import hashlib
import json
from pathlib import Path
from typing import Any

import httpx

from veriloop.config import Settings
from veriloop.errors import UnavailableError
from veriloop.records import Task
from veriloop.tasks.base import Suite

TEST_IDS = range(11, 511)
TRAIN_IDS = range(601, 975)


MBPP_URL = "https://raw.githubusercontent.com/google-research/google-research/master/mbpp/mbpp.jsonl"
"""Where MBPP comes from for a user without the data folder (CC-BY-4.0); fetched once into the cache."""


def download(url: str, target: Path, transport: httpx.BaseTransport | None = None) -> Path:
    """Fetch `url` into `target` (atomically); a clear UnavailableError when the machine is offline."""
    try:
        with httpx.Client(transport=transport, follow_redirects=True, timeout=60.0) as client:
            response = client.get(url)
            response.raise_for_status()
    except httpx.HTTPError as exc:
        raise UnavailableError(
            f"MBPP is not in the cache and {url} could not be fetched ({exc}); download mbpp.jsonl yourself and set "
            "paths.data_dir (VERILOOP_PATHS__DATA_DIR) to a folder holding mbpp/mbpp.jsonl"
        ) from None
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = target.with_suffix(".part")
    temp.write_bytes(response.content)
    temp.replace(target)
    return target


def data_file(settings: Settings, transport: httpx.BaseTransport | None = None) -> Path:
    """`data_dir/mbpp/mbpp.jsonl` when the data folder has it, else the cached download of MBPP_URL."""
    folder = settings.paths.data_dir
    if folder is not None:
        path = Path(folder) / "mbpp" / "mbpp.jsonl"
        if path.is_file():
            return path
    cached = settings.paths.cache_dir / "suites" / "mbpp" / "mbpp.jsonl"
    return cached if cached.is_file() else download(MBPP_URL, cached, transport)


def entry_point(row: dict[str, Any]) -> str | None:
    """The function the asserts call that the reference solution defines."""
    defined = {node.name for node in ast.walk(ast.parse(row["code"])) if isinstance(node, ast.FunctionDef)}
    for node in ast.walk(ast.parse(row["test_list"][0])):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in defined:
            return node.func.id
    return None


def mbpp_task(row: dict[str, Any], *, train: bool) -> Task:
    """One MBPP problem with the public/private split of the test (or train) environment."""
    setup = row["test_setup_code"].strip()
    asserts: list[str] = list(row["test_list"])
    public_asserts = asserts if train else asserts[:1]
    private_asserts = ([] if train else asserts[1:]) + list(row["challenge_test_list"])
    head = f"{setup}\n" if setup else ""
    public = head + "\n".join(public_asserts) + "\n"
    return Task(
        id=f"MBPP/{row['task_id']}",
        suite="mbpp",
        prompt=f"{row['text']}\n\n" + "\n".join(public_asserts) + "\n",
        language="python",
        entry_point=entry_point(row),
        tests=head + "\n".join([*public_asserts, *private_asserts]) + "\n",
        public_tests=public,
        reference=row["code"].replace("\r\n", "\n"),
        metadata={"split": "train" if train else "test", "private_tests": len(private_asserts)},
    )


def _load(name: str, ids: range, settings: Settings) -> Suite:
    path = data_file(settings)
    raw = path.read_bytes()
    rows = [json.loads(line) for line in raw.decode("utf-8").splitlines() if line.strip()]
    tasks = tuple(mbpp_task(row, train=ids is TRAIN_IDS) for row in rows if row["task_id"] in ids)
    return Suite(name, f"mbpp.jsonl sha256:{hashlib.sha256(raw).hexdigest()[:12]}", tasks, source=str(path))


def load_mbpp(settings: Settings) -> Suite:
    """MBPP's test split (task ids 11-510)."""
    return _load("mbpp", TEST_IDS, settings)


def load_mbpp_train(settings: Settings) -> Suite:
    """MBPP's training split (task ids 601-974)."""
    return _load("mbpp-train", TRAIN_IDS, settings)
