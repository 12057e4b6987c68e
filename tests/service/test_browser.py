"""The dashboard in a real browser: Playwright driving Debian's Chromium (`scripts/setup-browser.sh` installs it).

The pages are opened on a real run (the `direct` agent with the embedded model on two HumanEval
tasks, queued and executed by a worker loop once per session) and on a stored refinement tree
(parents, diagnostics, a guard rejection) that the tree and node pages need; each test checks what
a person sees and saves a screenshot under `artifacts/browser/` (or `$VERILOOP_ARTIFACTS_DIR`). The last test starts
`veriloop serve`, then `veriloop demo`, and watches the demo's run appear and finish in the page.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from veriloop.agents.mucode.state import MuCodeOptions
from veriloop.agents.runner import create_run
from veriloop.config import Settings, StoreSettings
from veriloop.records import (
    Attempt,
    Completion,
    Diagnostic,
    ExecResult,
    ExecStatus,
    Message,
    Node,
    Run,
    RunStatus,
    TestOutcome,
    Usage,
    VerifyResult,
    VerifyStatus,
)
from veriloop.service.executor import LocalExecutor
from veriloop.service.worker import work
from veriloop.store import TrajectoryStore
from veriloop.store.jobs import JobQueue
from veriloop.testing import CLI, ServedProcess, served

CHROMIUM = shutil.which("chromium")
REPO = Path(__file__).resolve().parents[2]
ARTIFACTS = Path(os.environ.get("VERILOOP_ARTIFACTS_DIR", REPO / "artifacts")) / "browser"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--headless",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]

pytestmark = pytest.mark.browser


@dataclass
class Dashboard:
    server: ServedProcess
    real_run: str
    tree_run: str
    tree_nodes: dict[str, str]


def refinement_tree(store: TrajectoryStore) -> tuple[str, dict[str, str]]:
    """A stored three-turn refinement of HumanEval/0 (as a refining agent stores it) plus HumanEval/1 solved."""
    run = store.create_run(
        Run(
            agent="refine-fixture",
            suite="humaneval",
            model="scripted",
            status=RunStatus.FINISHED,
            settings={"limit": 2, "task_ids": ["HumanEval/0", "HumanEval/1"]},
            finished_at=datetime.now(UTC) + timedelta(seconds=5.2),
        )
    )
    buggy = "def has_close_elements(numbers, threshold):\n    return False\n"
    closer = "def has_close_elements(numbers, threshold):\n    for a in numbers:\n        return a < threshold\n"
    fixed = (
        "def has_close_elements(numbers, threshold):\n    return any(abs(a - b) < threshold\n"
        "               for i, a in enumerate(numbers) for b in numbers[i + 1:])\n"
    )

    def node(code: str, score: float, parent: Node | None, turn: int, **extra: Any) -> Node:
        passed = score == 1.0
        return Node(
            run_id=run.id,
            task_id="HumanEval/0",
            parent_id=parent.id if parent else None,
            depth=parent.depth + 1 if parent else 0,
            role="refine" if parent else "generate",
            messages=[Message(role="user", content=f"Turn {turn}: fix has_close_elements.")],
            completion=Completion(
                text=f"```python\n{code}```",
                usage=Usage(prompt_tokens=40, completion_tokens=30),
                model="scripted",
                latency_s=0.4,
            ),
            code=code,
            score=score,
            metadata={"turn": turn},
            exec_result=ExecResult(
                status=ExecStatus.PASSED if passed else ExecStatus.FAILED,
                exit_code=0 if passed else 1,
                stdout="ran 7 checks\n",
                stderr="" if passed else "AssertionError: candidate([1.0, 2.8], 0.3)\n",
                wall_s=0.05,
                sandbox="bwrap",
                tests=[TestOutcome(name="check", passed=passed, message="" if passed else "assert failed")],
            ),
            **extra,
        )

    root = node(buggy, 0.0, None, 0)
    middle = node(
        closer,
        0.5,
        root,
        1,
        verify_result=VerifyResult(
            status=VerifyStatus.FAILED,
            errors=1,
            tool="nagini",
            version="1.2",
            duration_s=1.1,
            diagnostics=[Diagnostic(kind="postcondition", message="Postcondition might not hold.", line=3)],
        ),
    )
    rejected = node(
        closer.replace("threshold", "threshold * 0"),
        0.0,
        root,
        1,
        verify_result=VerifyResult(status=VerifyStatus.REJECTED, tool="nagini", reason="the spec was weakened"),
    )
    best = node(fixed, 1.0, middle, 2)
    other = node(fixed, 1.0, None, 0).model_copy(update={"task_id": "HumanEval/1"})
    store.add_nodes([root, middle, rejected, best, other])
    store.add_attempt(
        Attempt(
            run_id=run.id,
            task_id="HumanEval/0",
            status="passed",
            best_node_id=best.id,
            score=1.0,
            tokens=280,
            seconds=4.2,
        )
    )
    store.add_attempt(
        Attempt(
            run_id=run.id,
            task_id="HumanEval/1",
            status="passed",
            best_node_id=other.id,
            score=1.0,
            tokens=70,
            seconds=1.0,
        )
    )
    return run.id, {"root": root.id, "middle": middle.id, "rejected": rejected.id, "best": best.id}


@pytest.fixture(scope="session")
def dashboard(model_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Dashboard]:
    """A real direct run on the embedded model (2 tasks) and a stored refinement tree, served by `veriloop serve`."""
    home = tmp_path_factory.mktemp("dashboard")
    url = f"sqlite:///{home / 'dashboard.db'}"
    settings = model_settings.model_copy(update={"store": StoreSettings(url=url)})
    with TrajectoryStore.from_settings(settings) as store:
        run = create_run(store, settings, agent="direct", suite="humaneval", limit=2)
        JobQueue(store).enqueue(run.id)
        # Through the queue and a worker loop with the local executor, as `veriloop worker` runs it.
        report = asyncio.run(work(settings, LocalExecutor(), once=True))
        assert report.done == 1 and store.get_run(run.id).status is RunStatus.FINISHED
        tree_run, tree_nodes = refinement_tree(store)
    with served("--backend", "scripted", "--database", url, home=home, serve_args=["--workers", "0"]) as server:
        yield Dashboard(server=server, real_run=run.id, tree_run=tree_run, tree_nodes=tree_nodes)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    # Module scope: Playwright's sync API keeps an event loop marked running in this thread until it exits,
    # which would make every later test's asyncio.run() fail.
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    opened = browser.new_page(viewport={"width": 1280, "height": 900})
    yield opened
    opened.close()


def shoot(page: Any, name: str) -> Path:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    path = ARTIFACTS / f"{name}.png"
    page.screenshot(path=str(path), full_page=True)
    return path


def test_runs_table_lists_runs_and_filters(dashboard: Dashboard, page: Any) -> None:
    page.goto(dashboard.server.url + "/")
    table = page.locator("#runs")
    assert table.locator("tbody tr").count() == 2
    assert "refine-fixture" in table.inner_text()
    shoot(page, "runs")
    page.select_option("select[name=agent]", "direct")
    page.click("form.filters button[type=submit]")
    page.wait_for_url("**/?agent=direct**")
    rows = page.locator("#runs tbody tr")
    assert rows.count() == 1 and "direct" in rows.inner_text() and "finished" in rows.inner_text()


def test_run_page_shows_progress_charts_and_tasks(dashboard: Dashboard, page: Any) -> None:
    page.goto(f"{dashboard.server.url}/runs/{dashboard.real_run}")
    assert page.locator("#progress-text").inner_text() == "2/2"
    assert page.locator("#status").inner_text() == "finished"
    for heading in ("Pass rate per turn", "pass@k", "Score distribution", "Verifier and execution error classes"):
        assert page.get_by_role("heading", name=heading).is_visible()
    assert page.locator("#chart-passk text", has_text="pass@1").count() == 1
    tasks = page.locator("#tasks tbody").inner_text()
    assert "HumanEval/0" in tasks and "HumanEval/1" in tasks
    shoot(page, "run")


def test_tree_view_colours_nodes_and_opens_a_node(dashboard: Dashboard, page: Any) -> None:
    page.goto(f"{dashboard.server.url}/runs/{dashboard.tree_run}/tree/HumanEval/0")
    circles = page.locator("#tree circle")
    assert circles.count() == 4
    colours = {circles.nth(i).get_attribute("fill") for i in range(4)}
    assert "hsl(120, 70%, 45%)" in colours and "hsl(0, 70%, 45%)" in colours  # solved green, failed red
    shoot(page, "tree")
    page.locator(f'a.tree-node[data-node="{dashboard.tree_nodes["middle"]}"]').click()
    page.wait_for_url(f"**/nodes/{dashboard.tree_nodes['middle']}")
    assert "Postcondition might not hold." in page.locator("#code tr.diag").inner_text()


def test_node_page_shows_diff_diagnostics_and_guard(dashboard: Dashboard, page: Any) -> None:
    page.goto(f"{dashboard.server.url}/nodes/{dashboard.tree_nodes['middle']}")
    pinned = page.locator("#code tr.has-diag")
    assert pinned.count() == 1 and pinned.get_attribute("data-line") == "3"
    assert page.locator("#diff .add").count() == 2 and page.locator("#diff .del").count() == 1
    assert "AssertionError" in page.locator("#stderr").inner_text()
    shoot(page, "node-refined")
    page.goto(f"{dashboard.server.url}/nodes/{dashboard.tree_nodes['rejected']}")
    assert page.locator("#guard").inner_text() == "rejected"
    assert page.get_by_text("the spec was weakened").first.is_visible()


def test_node_page_of_the_real_run_shows_prompt_completion_and_tests(dashboard: Dashboard, page: Any) -> None:
    page.goto(f"{dashboard.server.url}/runs/{dashboard.real_run}")
    page.locator("#tasks tbody tr").first.locator("td").last.locator("a").click()
    page.wait_for_url("**/nodes/**")
    assert page.locator("#prompt").inner_text().startswith("USER\nComplete the following Python function.")
    assert page.locator("#completion").inner_text().strip()
    assert page.locator("#exec-status").inner_text() in ("passed", "failed", "runtime_error", "timeout")
    shoot(page, "node")


def test_compare_two_runs_on_one_suite(dashboard: Dashboard, page: Any) -> None:
    page.goto(f"{dashboard.server.url}/compare?a={dashboard.real_run}&b={dashboard.tree_run}")
    summary = page.locator("#compare-summary").inner_text()
    assert "direct" in summary and "refine-fixture" in summary and "100% (2/2)" in summary
    assert page.locator("#compare-tasks tbody tr").count() == 2
    shoot(page, "compare")


def test_queue_a_run_from_the_form_then_cancel_it(dashboard: Dashboard, page: Any) -> None:
    page.goto(dashboard.server.url + "/")
    page.select_option("#new-run select[name=agent]", "mucode")  # the form's inputs come from MuCodeOptions
    mucode = page.locator("fieldset[data-agent=mucode]")
    assert mucode.is_visible() and not page.locator("fieldset[data-agent=direct]").is_visible()
    assert mucode.locator("[data-option]").count() == len(MuCodeOptions.model_fields)
    assert mucode.locator("select[data-option=selection] option").all_inner_texts() == ["pt", "lv", "pt+lv", "random"]
    mucode.locator("input[data-option=turns]").fill("0")  # below its bound: the server refuses it, as the CLI does
    page.click("#new-run button[type=submit]")
    page.wait_for_selector("#new-run-msg:has-text('bad options')")
    assert "turns" in page.locator("#new-run-msg").inner_text()
    page.select_option("#new-run select[name=agent]", "direct")
    page.fill("#new-run input[name=limit]", "1")
    page.locator("fieldset[data-agent=direct] input[data-option=concurrency]").fill("1")
    page.click("#new-run button[type=submit]")
    page.wait_for_url("**/runs/**")
    assert page.locator("#status").inner_text() == "pending"  # this server has no job loop: the run waits
    assert page.locator("#progress-text").inner_text() == "0/1"
    page.click("#cancel")
    page.wait_for_selector("#status.cancelled")
    shoot(page, "run-cancelled")


@pytest.mark.slow
def test_serve_then_demo_shows_the_demo_run_live(tmp_path: Path, page: Any) -> None:
    """`veriloop serve`, then `veriloop demo` in another process on the same home: the page follows the run."""
    with served("--backend", "scripted", home=tmp_path, serve_args=["--workers", "0"]) as server:
        page.goto(server.url + "/")
        assert page.locator("#runs tbody").inner_text().startswith("No runs yet")
        demo = subprocess.Popen(
            [
                *CLI,
                "--home",
                str(tmp_path),
                "--backend",
                "scripted",
                "demo",
                "--limit",
                "3",
                "--no-treefinement",
                "--json",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=tmp_path,
        )
        try:
            page.wait_for_selector("#runs tbody tr td a", timeout=60_000)  # the page reloads when the run appears
            page.locator("#runs tbody tr td a").first.click()
            page.wait_for_selector("#status.finished", timeout=60_000)  # live events, then a reload at the end
            assert page.locator("#progress-text").inner_text() == "3/3"
            shoot(page, "demo-live")
        finally:
            _out, err = demo.communicate(timeout=120)
        assert demo.returncode == 0, err.decode()
