"""The dashboard's run, compare and report pages label every figure and show intervals and provenance.

Runs are stored in a real SQLite store; the pages are fetched through the real app (no job loop).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from veriloop.config import load_settings
from veriloop.records import Attempt, ExecResult, ExecStatus, Node, Run, RunStatus
from veriloop.service.app import create_app
from veriloop.service.views import overview
from veriloop.store import TrajectoryStore, upgrade_database
from veriloop.store.summary import Provenance, SuiteProvenance

PASSED, FAILED = ExecResult(status=ExecStatus.PASSED), ExecResult(status=ExecStatus.FAILED)


def stored_runs(store: TrajectoryStore) -> tuple[Run, Run]:
    """A: μCode-like, 3 public candidates a task, held-out verdicts t0 passed, t1 failed, t2 passed.
    B: direct-like, one held-out sample a task, t0 failed, t1 passed, t2 passed."""
    recorded = Provenance(
        veriloop_version="0.1.0",
        git_commit="0123456789abcdef",
        model="m",
        backend="embedded",
        checkpoint_hash="sha256:feedface",
        seeds={"seed": 5},
        prompt_hashes={"veriloop.agents.mucode.prompts": "ab" * 32},
        suite=SuiteProvenance(name="humaneval", version="v1", content_hash="sha256:c0ffee", tasks=3),
        sandbox={"backend": "bwrap", "version": "0.8.0"},
    )
    a = store.create_run(
        Run(agent="mucode", suite="humaneval", model="m", settings={"provenance": recorded.model_dump(mode="json")})
    )
    b = store.create_run(Run(agent="direct", suite="humaneval", model="m"))
    for index, (task, verdict) in enumerate((("t0", True), ("t1", False), ("t2", True))):
        samples = [
            Node(
                run_id=a.id,
                task_id=task,
                exec_result=PASSED if i < index else FAILED,
                metadata={"turn": 1, "tests": "public"},
            )
            for i in range(3)
        ]
        final = Node(
            run_id=a.id,
            task_id=task,
            parent_id=samples[0].id,
            depth=1,
            role="final",
            exec_result=PASSED if verdict else FAILED,
            metadata={"turn": 1, "tests": "public+private"},
        )
        store.add_nodes([*samples, final])
        store.add_attempt(Attempt(run_id=a.id, task_id=task, status="passed" if verdict else "failed"))
        other = Node(run_id=b.id, task_id=task, exec_result=FAILED if task == "t0" else PASSED)
        store.add_nodes([other])
        store.add_attempt(Attempt(run_id=b.id, task_id=task, status="failed" if task == "t0" else "passed"))
    return store.finish_run(a.id), store.finish_run(b.id)


@pytest.fixture
def pages(tmp_path: Path) -> Iterator[tuple[TestClient, Run, Run]]:
    url = f"sqlite:///{tmp_path / 'pages.db'}"
    upgrade_database(url)
    with TrajectoryStore(url) as store:
        a, b = stored_runs(store)
    settings = load_settings(paths={"home": tmp_path}, store={"url": url}, llm={"backend": "scripted"})
    with TestClient(create_app(settings, workers=0)) as client:
        yield client, a, b


def text_of(html: str) -> str:
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_run_page_headline_is_held_out_and_public_results_are_labelled(pages: tuple[TestClient, Run, Run]) -> None:
    client, a, _ = pages
    html = client.get(f"/runs/{a.id}").text
    text = text_of(html)
    assert "Pass rate · held-out tests" in text and "2/3 tasks passed · 95% Wilson CI [21%, 94%]" in text
    assert "Pass rate · public tests" in text and "feedback, not the verdict" in text
    assert "2/3 tasks · 95% Wilson CI [21%, 94%]; feedback" in text  # the public figure names its interval too
    assert "95% interval over tasks: bootstrap for pass@1, pass@2; Wilson for pass@3" in text
    assert "pass@k · held-out tests" in text and "pass@k · public tests" in text
    assert "Pass rate per turn · public tests" in text
    assert 'id="chart-passk-public"' in html and "pass@3" in text  # three public samples a task
    assert "One sample per task" in text  # held-out: one verdict a task, so no pass@k beyond 1
    provenance = text_of(html.split('id="provenance"')[1].split("</table>")[0])
    for fact in ("0123456789ab", "sha256:feedface", "seed=5", "humaneval v1", "bwrap 0.8.0"):
        assert fact in provenance


def test_compare_page_shows_wins_losses_interval_and_mcnemar(pages: tuple[TestClient, Run, Run]) -> None:
    client, a, b = pages
    text = text_of(client.get("/compare", params={"a": a.id, "b": b.id}).text)
    assert "Tasks both finished 3" in text and "A wins / B wins 1 / 1" in text
    assert "Difference A − B · held-out tests +0.0 pp" in text and "McNemar exact p 1" in text
    assert "95% paired bootstrap CI [" in text and "A wins" in text and "B wins" in text


def test_report_routes_serve_one_file_with_inline_svg(pages: tuple[TestClient, Run, Run]) -> None:
    client, a, _ = pages
    html = client.get(f"/runs/{a.id}/report").text
    assert html.startswith("<!doctype html>") and "<script" not in html and "<header>" not in html
    assert html.count("<svg") >= 5 and "Pass rate · held-out tests (headline)" in html
    markdown = client.get(f"/runs/{a.id}/report", params={"format": "md"})
    assert markdown.headers["content-type"].startswith("text/markdown")
    assert "| **Pass rate, held-out tests (headline)** | 67% (2/3 tasks) | Wilson [21%, 94%] |" in markdown.text
    assert "| pass@1 | 0.667 | Wilson [21%, 94%] | 3 |" in markdown.text  # one verdict a task: a proportion
    assert client.get(f"/runs/{a.id}/report", params={"format": "pdf"}).status_code == 400
    assert client.get("/runs/nope/report").status_code == 404


def test_api_figures_name_their_interval_and_a_run_without_provenance_says_so(
    pages: tuple[TestClient, Run, Run],
) -> None:
    client, a, b = pages
    shown = client.get(f"/api/runs/{a.id}").json()["summary"]
    held, public = shown["figures"]["held_out"], shown["figures"]["public"]
    assert (held["interval"], public["interval"]) == ("wilson", "wilson")
    assert [row["interval"] for row in public["pass_at_k"]] == ["bootstrap", "bootstrap", "wilson"]
    assert shown["provenance"] is not None and shown["provenance_note"] is None
    page = client.get(f"/api/runs/{b.id}/overview").json()
    assert page["provenance"] is None and page["provenance_note"] == "not recorded for this run"
    assert client.get(f"/api/runs/{a.id}/compare/{b.id}").json()["interval"] == "paired_bootstrap"
    text = text_of(client.get(f"/runs/{b.id}").text)
    assert "Provenance not recorded for this run." in text and "before provenance" not in text


class FinishesBetweenReads(TrajectoryStore):
    """A store whose run's last task passes, and the run ends, just after the page has read the attempts: a
    worker finishing the run while the page renders."""

    def list_attempts(self, run_id: str, task_id: str | None = None) -> list[Attempt]:
        attempts = super().list_attempts(run_id, task_id)
        for attempt in attempts:
            if attempt.status == "running":
                self.update_attempt(attempt.model_copy(update={"status": "passed"}))
                self.finish_run(run_id)
        return attempts


def test_a_run_that_ends_while_its_page_renders_is_never_shown_finished_with_tasks_left(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'race.db'}"
    upgrade_database(url)
    settings = load_settings(paths={"home": tmp_path}, store={"url": url}, llm={"backend": "scripted"})
    with FinishesBetweenReads(url) as store:
        run = store.create_run(Run(agent="direct", suite="humaneval", model="m"))
        store.set_run_status(run.id, RunStatus.RUNNING)
        store.add_attempt(Attempt(run_id=run.id, task_id="t0", status="running"))
        view = overview(store, store.get_run(run.id), settings)
        done = [task.task_id for task in view.tasks if task.status in ("passed", "failed")]
        assert (view.row.run.status, done) == (RunStatus.RUNNING, [])  # read before the run ended: consistently
        view = overview(store, store.get_run(run.id), settings)
        assert (view.row.run.status, [task.status for task in view.tasks]) == (RunStatus.FINISHED, ["passed"])
