"""`veriloop runs list | show` and `veriloop db upgrade | current`, for people and with --json."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from veriloop.cli import main
from veriloop.records import Attempt, Completion, Node, Run, RunStatus, Usage
from veriloop.store import TrajectoryStore, head_revision
from veriloop.store.engine import parse_url


def cli(capsys: pytest.CaptureFixture[str], url: str, *args: str) -> tuple[int, str, str]:
    code = main(["--database", url, *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def populate(store: TrajectoryStore) -> list[Run]:
    start = datetime(2026, 3, 1, tzinfo=UTC)
    plan = [("mucode", "mbpp"), ("best_of_n", "humaneval"), ("mucode", "humaneval")]
    runs = []
    for index, (agent, suite) in enumerate(plan):
        when = start + timedelta(days=index)
        runs.append(store.create_run(Run(id=f"{agent}-{index}", agent=agent, suite=suite, model="m", created_at=when)))
    run = runs[-1]
    root = Node(
        run_id=run.id,
        task_id="HumanEval/0",
        completion=Completion(text="x", usage=Usage(prompt_tokens=40, completion_tokens=2)),
        score=0.5,
    )
    store.add_nodes([root, Node(run_id=run.id, task_id="HumanEval/0", parent_id=root.id, depth=1, score=1.0)])
    store.add_attempt(Attempt(run_id=run.id, task_id="HumanEval/0", status="passed", score=1.0))
    store.finish_run(run.id)
    return runs


def test_runs_list_and_show(capsys: pytest.CaptureFixture[str], store: TrajectoryStore) -> None:
    url = store.url.render_as_string(hide_password=False)
    runs = populate(store)

    code, out, _ = cli(capsys, url, "runs", "list", "--json")
    assert code == 0
    assert [item["id"] for item in json.loads(out)] == [run.id for run in reversed(runs)]
    code, out, _ = cli(capsys, url, "runs", "list", "--agent", "mucode", "--suite", "humaneval", "--json")
    assert [item["id"] for item in json.loads(out)] == [runs[2].id]
    code, out, _ = cli(capsys, url, "runs", "list", "--limit", "1", "--status", "finished", "--json")
    assert [item["id"] for item in json.loads(out)] == [runs[2].id]

    code, out, _ = cli(capsys, url, "runs", "list")
    assert code == 0
    assert "best_of_n" in out and runs[1].id[:12] in out and "finished" in out

    code, out, _ = cli(capsys, url, "runs", "show", runs[2].id, "--json")
    summary = json.loads(out)
    assert code == 0
    assert summary["run"]["id"] == runs[2].id and summary["run"]["status"] == RunStatus.FINISHED.value
    assert (summary["tasks"], summary["tasks_passed"], summary["nodes"], summary["llm_calls"]) == (1, 1, 2, 1)
    assert summary["tokens"] == {"prompt": 40, "completion": 2, "total": 42}
    assert summary["per_task"] == [
        {"task_id": "HumanEval/0", "nodes": 2, "max_depth": 1, "best_score": 1.0, "attempts": 1, "status": "passed"}
    ]

    code, out, _ = cli(capsys, url, "runs", "show", runs[2].id[:10])  # a unique prefix, rendered for people
    assert code == 0
    assert runs[2].id in out and "HumanEval/0" in out and "42 (40 prompt, 2 completion)" in out


def test_unknown_run_is_one_line_and_nonzero(capsys: pytest.CaptureFixture[str], store: TrajectoryStore) -> None:
    url = store.url.render_as_string(hide_password=False)
    code, out, err = cli(capsys, url, "runs", "show", "no-such-run")
    assert code == 3
    assert out == ""
    assert err == "error: run 'no-such-run' not found\n"


def test_empty_store_lists_no_runs(capsys: pytest.CaptureFixture[str], store: TrajectoryStore) -> None:
    url = store.url.render_as_string(hide_password=False)
    assert cli(capsys, url, "runs", "list")[1].strip() == "no runs"
    assert json.loads(cli(capsys, url, "runs", "list", "--json")[1]) == []


def test_unmigrated_database_is_refused_until_db_upgrade(
    capsys: pytest.CaptureFixture[str], db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VERILOOP_STORE__CREATE_NEW_SQLITE", "false")
    code, out, err = cli(capsys, db_url, "runs", "list")
    assert code == 5 and out == ""
    assert err.startswith("error: database at ") and err.count("\n") == 1
    assert f"is not migrated (at revision none, code needs {head_revision()}); run `veriloop db upgrade`" in err

    code, out, _ = cli(capsys, db_url, "db", "current", "--json")
    assert code == 0 and json.loads(out)["up_to_date"] is False

    code, out, _ = cli(capsys, db_url, "db", "upgrade", "--json")
    assert code == 0
    done = json.loads(out)
    assert (done["from"], done["to"]) == (None, head_revision())
    assert done["url"] == parse_url(db_url).render_as_string(hide_password=True)  # never prints a password

    code, out, _ = cli(capsys, db_url, "db", "upgrade")
    assert code == 0 and f"already at revision {head_revision()}" in out
    code, out, _ = cli(capsys, db_url, "db", "current")
    assert code == 0 and f"revision {head_revision()} (code needs {head_revision()}; up to date)" in out
    assert cli(capsys, db_url, "runs", "list")[0] == 0


def test_default_home_database_is_created_on_first_use(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    home = tmp_path / "home"
    assert main(["--home", str(home), "db", "current", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["current"] is None
    assert not (home / "veriloop.db").exists()
    assert main(["--home", str(home), "runs", "list", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []
    assert (home / "veriloop.db").exists()


@pytest.mark.slow
def test_console_script_prints_no_traceback(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    script = "import sys; from veriloop.cli import main; sys.exit(main())"
    result = subprocess.run(
        [sys.executable, "-c", script, "--database", url, "runs", "show", "deadbeef"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 3
    assert result.stderr == "error: run 'deadbeef' not found\n"
