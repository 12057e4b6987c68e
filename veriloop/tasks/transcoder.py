"""TransCoder translation suites: per function, the human reference in each language and its test program.

Two suites, each read from `paths.data_dir` when that folder has it (the layout of shared/data), else
from its repository's archive at a pinned commit, downloaded once into `cache/suites/` (`archive.py`):

* ``transcoder``: the UniTrans-cleaned set (568 functions; C++, Java, Python). References are the
  detokenised functions of `testable_samples.jsonl` (descriptive names such as ``addOne``); test
  programs are UniTrans's fixed copies of TransCoder's GeeksforGeeks scripts. Source:
  github.com/yz1019117968/FSE-24-UniTrans @e0bbac5, `cleaned_data/` (no licence file; derived from
  CC BY-SA 2.0 data).
* ``transcoder-gfg``: TransCoder's original scripts (852 ids; C, C++, Java, Python, Go, Rust). The
  reference of each language is the script's own ``f_gold``; C and Rust scripts are repaired so they
  build with stable toolchains (see `_repair`). Source: github.com/facebookresearch/CodeGen @e3e8855,
  `data/transcoder_evaluation_gfg/<lang>/<ID>.<ext>` (CC BY-SA 2.0).

A task is one function in every language it has; the direction is chosen by whoever translates it
(`translation(task, "cpp", "python")`, the f2strans agent's `--from/--to`). The task's own
`prompt/language/tests/reference` fields hold the C++ -> Python direction so generic tools see a
sensible default. A candidate fills the script's ``TOFILL`` slot after its function is renamed to
``f_filled`` (`fill_slot`); a script prints ``#Results: passed, total``.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass
from pathlib import Path

import httpx

from veriloop.config import Settings
from veriloop.errors import ConfigError
from veriloop.records import Task
from veriloop.tasks.archive import fetch_folder
from veriloop.tasks.base import Suite

EXTENSIONS = {"cpp": "cpp", "java": "java", "python": "py", "c": "c", "go": "go", "rust": "rs"}
UNITRANS_LANGUAGES = ("cpp", "java", "python")
SLOT = "f_filled"
DEFAULT_SOURCE, DEFAULT_TARGET = "cpp", "python"


@dataclass(frozen=True)
class Translation:
    """One direction of one task: what to translate and how the target is judged."""

    task_id: str
    source_language: str
    target_language: str
    source: str
    source_name: str
    reference: str
    reference_name: str
    tests: str


CODEGEN_COMMIT = "e3e8855c4abbd7d19c8fec36b49d7e7fe7479dbf"
GFG_ARCHIVE_URL = f"https://github.com/facebookresearch/CodeGen/archive/{CODEGEN_COMMIT}.tar.gz"
"""TransCoder's GfG scripts for a user without the data folder (CC BY-SA 2.0); the whole repository
(about 10 MB) is fetched once and only `data/transcoder_evaluation_gfg` kept."""
UNITRANS_COMMIT = "e0bbac5c307a85ff21fd9479374cfa4e1a032f43"
UNITRANS_ARCHIVE_URL = f"https://github.com/yz1019117968/FSE-24-UniTrans/archive/{UNITRANS_COMMIT}.tar.gz"
"""UniTrans's cleaned set for a user without the data folder; about 2 MB, fetched once."""


def _instead(folder: str) -> str:
    return (
        f"set paths.data_dir (VERILOOP_PATHS__DATA_DIR) to a folder holding {folder}, "
        "or run a TransCoder file with --suite FILE"
    )


def gfg_scripts(settings: Settings, transport: httpx.BaseTransport | None = None) -> Path:
    """The `transcoder_evaluation_gfg` folder: the data folder's copy, else CodeGen's, cached."""
    if settings.paths.data_dir is not None:
        local = settings.paths.data_dir / "transcoder_test_set" / "transcoder_evaluation_gfg"
        if local.is_dir():
            return local
    target = settings.paths.cache_dir / "suites" / "transcoder-gfg" / f"codegen-{CODEGEN_COMMIT[:7]}"
    return fetch_folder(
        GFG_ARCHIVE_URL,
        "data/transcoder_evaluation_gfg/",
        tuple(f"{language}/" for language in EXTENSIONS),
        target,
        what="TransCoder's GfG test set",
        instead=_instead("transcoder_test_set/transcoder_evaluation_gfg/<lang>/<ID>.<ext>"),
        transport=transport,
    )


def unitrans_folder(settings: Settings, transport: httpx.BaseTransport | None = None) -> Path:
    """UniTrans's `cleaned_data` folder (samples and scripts): the data folder's copy, else the cached archive."""
    if settings.paths.data_dir is not None:
        local = settings.paths.data_dir / "transcoder_unitrans_cleaned"
        if (local / "testable_samples.jsonl").is_file():
            return local
    target = settings.paths.cache_dir / "suites" / "transcoder" / f"unitrans-{UNITRANS_COMMIT[:7]}"
    return fetch_folder(
        UNITRANS_ARCHIVE_URL,
        "cleaned_data/",
        ("testable_samples.jsonl", "transcoder_evaluation_gfg/"),
        target,
        what="UniTrans's cleaned TransCoder set",
        instead=_instead("transcoder_unitrans_cleaned/testable_samples.jsonl"),
        transport=transport,
    )


_PY_DEF = re.compile(r"^def\s+([A-Za-z_]\w*)\s*\(", re.MULTILINE)
_C_LIKE_DEF = re.compile(r"([A-Za-z_]\w*)\s*\(")
_NOT_NAMES = frozenset({"if", "for", "while", "switch", "return", "sizeof", "static", "fn", "func"})


def function_name(code: str, language: str) -> str:
    """The name of the first function defined in `code` (empty when none is recognisable)."""
    if language == "python":
        found = _PY_DEF.search(code)
        return found.group(1) if found else ""
    for match in _C_LIKE_DEF.finditer(code):
        if match.group(1) not in _NOT_NAMES:
            return match.group(1)
    return ""


def transcoder_task(suite: str, ident: str, functions: dict[str, str], tests: dict[str, str], dataset: str) -> Task:
    target = DEFAULT_TARGET if DEFAULT_TARGET in tests else sorted(tests)[0]
    source = DEFAULT_SOURCE if DEFAULT_SOURCE in functions else sorted(functions)[0]
    return Task(
        id=f"{suite}/{ident}",
        suite=suite,
        prompt=functions[source],
        language=target,
        entry_point=SLOT,
        tests=tests[target],
        reference=functions.get(target),
        metadata={
            "dataset": dataset,
            "function_id": ident,
            "functions": functions,
            "tests": tests,
            "names": {language: function_name(code, language) for language, code in functions.items()},
        },
    )


def load_unitrans(settings: Settings) -> Suite:
    """The UniTrans-cleaned TransCoder set: functions with at least one test program."""
    root = unitrans_folder(settings)
    samples = root / "testable_samples.jsonl"
    if not samples.is_file():
        raise ConfigError(f"{samples} is missing: {_instead('transcoder_unitrans_cleaned/testable_samples.jsonl')}")
    tasks = []
    for line in samples.read_text(encoding="utf-8").splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        functions = {lang: str(item[lang]) for lang in UNITRANS_LANGUAGES if item.get(lang)}
        tests = {}
        for lang in UNITRANS_LANGUAGES:
            script = root / "transcoder_evaluation_gfg" / lang / f"{item['id']}.{EXTENSIONS[lang]}"
            if script.is_file():
                tests[lang] = results_on_own_line(script.read_text(encoding="utf-8", errors="replace"))
        if tests and functions:
            tasks.append(transcoder_task("transcoder", str(item["id"]), functions, tests, "unitrans"))
    return Suite("transcoder", "unitrans@e0bbac5", tuple(tasks), source=str(root))


_C_STUB = re.compile(r"^.*\bf_filled\s*\([^;{]*\)\s*\{\s*\}\s*$")
_C_PRINTF = re.compile(r'printf\(\s*"#Results:"\s*,\s*" "\s*,\s*(\w+)\s*,\s*", "\s*,\s*len\((\w+)\)\s*\);')
_C_LEN = re.compile(r"\blen\((param\w*)\)")


def results_on_own_line(script: str) -> str:
    """Start the `#Results` line with a newline: functions that print without one would hide it from the judge."""
    return script.replace('"#Results', '"\\n#Results')


def _repair(language: str, script: str) -> str:
    """Make a GfG script build: C gets a slot, a working `#Results` printf and real array lengths
    (its `len(arr[])` measures a pointer); Rust loses the nightly-only `#![feature(main)]`/`#[main]`."""
    if language == "c":
        lines = ["//TOFILL" if _C_STUB.match(line) else line for line in script.splitlines()]
        text = "\n".join(lines) + "\n"
        text = _C_PRINTF.sub(r'printf("#Results: %d, %d\\n", \1, (int)(sizeof(\2) / sizeof(\2[0])));', text)
        return _C_LEN.sub(r"(int)(sizeof(\1) / sizeof(\1[0]))", text)
    if language == "rust":
        kept = [line for line in script.splitlines() if line.strip() not in ("#![feature(main)]", "#[main]")]
        return "\n".join(kept) + "\n"
    return script


def gold_function(script: str) -> str:
    """The `f_gold` function of a GfG script: from its first line to the slot marker."""
    lines = script.splitlines()
    start = next((i for i, line in enumerate(lines) if re.search(r"\bf_gold\b", line)), None)
    end = next((i for i, line in enumerate(lines) if "TOFILL" in line), None)
    if start is None or end is None or end <= start:
        return ""
    return "\n".join(lines[start:end]).strip("\n")


def load_gfg(settings: Settings) -> Suite:
    """TransCoder's original GfG scripts in six languages; references are each script's `f_gold`."""
    root = gfg_scripts(settings)
    scripts: dict[str, dict[str, Path]] = {}
    for lang, extension in EXTENSIONS.items():  # top level only: `rust/src/` holds raw c2rust output
        for path in sorted((root / lang).glob(f"*.{extension}")):
            scripts.setdefault(path.stem, {})[lang] = path
    tasks = []
    for ident in sorted(scripts):
        functions, tests = {}, {}
        for lang, path in sorted(scripts[ident].items()):
            script = results_on_own_line(_repair(lang, path.read_text(encoding="utf-8", errors="replace")))
            gold = gold_function(script)
            if gold:
                functions[lang], tests[lang] = gold, script
        if tests:
            tasks.append(transcoder_task("transcoder-gfg", ident, functions, tests, "codegen-gfg"))
    return Suite("transcoder-gfg", "codegen@e3e8855", tuple(tasks), source=str(root))


# --------------------------------------------------------------------------- directions and the slot


def languages_of(task: Task) -> tuple[set[str], set[str]]:
    """(languages with a reference function, languages with a test program)."""
    return set(task.metadata.get("functions", {})), set(task.metadata.get("tests", {}))


def has_direction(task: Task, source: str, target: str) -> bool:
    functions, tests = languages_of(task)
    return source in functions and target in tests and target in functions and source != target


def translation(task: Task, source: str, target: str) -> Translation:
    """The `source -> target` view of a task; a ConfigError when the task lacks either side."""
    functions: dict[str, str] = task.metadata.get("functions", {})
    tests: dict[str, str] = task.metadata.get("tests", {})
    names: dict[str, str] = task.metadata.get("names", {})
    if source == target:
        raise ConfigError(f"translating {source} to itself is not a translation")
    if source not in functions:
        raise ConfigError(f"task {task.id} has no {source} function (it has: {', '.join(sorted(functions))})")
    if target not in tests or target not in functions:
        raise ConfigError(f"task {task.id} has no {target} test program and reference")
    return Translation(
        task_id=task.id,
        source_language=source,
        target_language=target,
        source=functions[source],
        source_name=names.get(source, ""),
        reference=functions[target],
        reference_name=names.get(target, ""),
        tests=tests[target],
    )


def _python_entry(code: str, preferred: list[str]) -> str | None:
    try:
        tree = ast.parse(code)
        defined = [node.name for node in tree.body if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)]
    except SyntaxError:  # renamed anyway, so the feedback is the syntax error and not a missing f_filled
        defined = _PY_DEF.findall(code)
    for name in preferred:
        if name in defined:
            return name
    return defined[-1] if defined else None


_DEF_LINE = re.compile(
    r"^[ \t]*(?:[\w:<>\[\],*&]+[ \t]+)+\**([A-Za-z_]\w*)\s*\([^;{]*\)\s*(?:const\s*)?(?:->[^{]*)?\{?\s*$", re.MULTILINE
)


def fill_slot(code: str, item: Translation) -> str:
    """The candidate as the script expects it: its entry function renamed `f_filled`.

    The entry is the function named like the target reference or the source (else `f_gold`, else
    the last function defined); every use of that name is renamed, so recursion keeps working.
    Java candidates lose `import`/`package` lines, since the slot sits inside the test class.
    """
    preferred = [SLOT, item.reference_name, item.source_name, "f_gold"]
    preferred = [name for name in preferred if name]
    if item.target_language == "java":
        code = "\n".join(line for line in code.splitlines() if not re.match(r"\s*(import|package)\s", line))
    if item.target_language == "python":
        entry = _python_entry(code, preferred)
    else:
        entry = next((name for name in preferred if re.search(rf"\b{re.escape(name)}\s*\(", code)), None)
        if entry is None:
            found = [m.group(1) for m in _DEF_LINE.finditer(code) if m.group(1) not in _NOT_NAMES]
            entry = found[-1] if found else None
    if entry is None or entry == SLOT:
        return code
    return re.sub(rf"\b{re.escape(entry)}\b", SLOT, code)
