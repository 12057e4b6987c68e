"""Verification and translation formats: DafnyBench (fill in the hints) and TransCoder (translate a function)."""

from __future__ import annotations

import json
from pathlib import Path, PurePath
from typing import Any

from veriloop.tasks.formats import Context, Format, Row
from veriloop.tasks.formats.codegen import task_row

# --------------------------------------------------------------------------- DafnyBench


def _dafnybench_detect(row: Row) -> bool:
    return "ground_truth" in row and "hints_removed" in row


def _dafnybench_convert(row: Row, _: Context) -> dict[str, Any]:
    name = PurePath(str(row.get("test_file") or row.get("test_ID") or "")).stem.removesuffix("_no_hints")
    if not name:
        raise KeyError("test_file")
    program = str(row["hints_removed"])
    return {
        "id": f"dafnybench/{name}",
        "prompt": program,
        "language": "dafny",
        "spec": program,
        "reference": str(row["ground_truth"]),
        "verifier": "dafny",
        "mode": "hints",
        "metadata": {"test_id": row.get("test_ID")},
    }


DAFNYBENCH = Format(
    "dafnybench",
    _dafnybench_detect,
    _dafnybench_convert,
    "DafnyBench (Loughridge et al. 2024): test.json of github.com/sun-wendy/DafnyBench (Apache-2.0), "
    "HF `wendy-sun/DafnyBench`",
)


# --------------------------------------------------------------------------- TransCoder

LANGUAGES = ("cpp", "java", "python", "c", "go", "rust")


def _transcoder_detect(row: Row) -> bool:
    return "id" in row and "prompt" not in row and sum(language in row for language in LANGUAGES) >= 2


def _scripts(row: Row, ctx: Context) -> dict[str, str]:
    """Test programs: the row's `tests` object, else `transcoder_evaluation_gfg/<lang>/<id>.<ext>` beside the file."""
    from veriloop.tasks.transcoder import EXTENSIONS, results_on_own_line

    given = row.get("tests")
    if isinstance(given, str):
        given = json.loads(given)
    if isinstance(given, dict) and given:
        return {str(lang): results_on_own_line(str(text)) for lang, text in given.items() if text}
    scripts: dict[str, str] = {}
    if ctx.path is not None:
        folder = Path(ctx.path).parent / "transcoder_evaluation_gfg"
        for lang, ext in EXTENSIONS.items():
            script = folder / lang / f"{row['id']}.{ext}"
            if script.is_file():
                scripts[lang] = results_on_own_line(script.read_text(encoding="utf-8", errors="replace"))
    return scripts


def _transcoder_convert(row: Row, ctx: Context) -> dict[str, Any]:
    from veriloop.tasks.transcoder import transcoder_task

    functions = {language: str(row[language]) for language in LANGUAGES if row.get(language)}
    tests = _scripts(row, ctx)
    if not tests:
        raise KeyError("tests")
    return task_row(transcoder_task("transcoder", str(row["id"]), functions, tests, "file"))


TRANSCODER = Format(
    "transcoder",
    _transcoder_detect,
    _transcoder_convert,
    "TransCoder test set (github.com/facebookresearch/CodeGen, data/transcoder_evaluation_gfg, CC BY-SA 2.0) or "
    "UniTrans's cleaned copy: rows {id, cpp, java, python, tests?}; test programs from `tests` or "
    "transcoder_evaluation_gfg/<lang>/<id>.<ext> beside the file",
)
