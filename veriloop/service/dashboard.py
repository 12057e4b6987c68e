"""The web dashboard: server-rendered pages (Jinja2, inline SVG charts, a little vanilla JS; no CDN).

Pages read the same store the CLI, the demo and the workers write, so a run started anywhere shows
up here; the run page follows a live run through `/api/runs/{id}/events` (server-sent events).

    /                         runs table with filters, and a form that queues a new run
    /runs/{id}                progress, pass rate per turn, pass@k, scores, error classes, slow/costly tasks
    /runs/{id}/tree/{task}    one task's search tree, nodes coloured by score
    /nodes/{id}               prompt, completion, code (diff against the parent, diagnostics on their lines),
                              execution output, verifier verdict and the spec guard's
    /runs/{id}/report         the run page as one file (HTML, or Markdown with ?format=md), plots inline
    /compare?a=ID&b=ID        two runs side by side: wins, losses, paired interval, McNemar p
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from veriloop.agents.base import AGENTS
from veriloop.config import Settings
from veriloop.errors import NotFoundError
from veriloop.records import RunStatus
from veriloop.service.agent_options import form_fields
from veriloop.service.auth import COOKIE
from veriloop.service.deps import settings_of, store_of
from veriloop.service.templating import ENV
from veriloop.service.views import (
    diff_lines,
    guard_verdict,
    layout_tree,
    overview,
    pin_diagnostics,
    run_ended,
    run_row,
    task_rows,
)
from veriloop.store import TrajectoryStore
from veriloop.store.figures import compare_runs
from veriloop.store.jobs import JobQueue
from veriloop.tasks import SUITES

router = APIRouter(include_in_schema=False)

_env = ENV

StoreDep = Annotated[TrajectoryStore, Depends(store_of)]
SettingsDep = Annotated[Settings, Depends(settings_of)]


def page(name: str, status: int = 200, **context: Any) -> HTMLResponse:
    return HTMLResponse(_env.get_template(name).render(**context), status_code=status)


def not_found(message: str) -> HTMLResponse:
    return page("error.html", 404, title="Not found", message=message)


@router.get("/", response_class=HTMLResponse)
def runs_page(
    store: StoreDep,
    agent: str | None = None,
    suite: str | None = None,
    status: str | None = None,
) -> HTMLResponse:
    statuses = [s.value for s in RunStatus]
    chosen = status if status in statuses else None
    runs = store.list_runs(agent=agent or None, suite=suite or None, status=chosen, limit=100)
    rows = [run_row(store, run) for run in runs]
    live = any(not run_ended(row.run) for row in rows)
    return page(
        "runs.html",
        title="Runs",
        rows=rows,
        live=live,
        agents=sorted(AGENTS),
        option_forms={agent: form_fields(agent) for agent in sorted(AGENTS)},
        suites=sorted(SUITES),
        statuses=statuses,
        filters={"agent": agent or "", "suite": suite or "", "status": chosen or ""},
    )


@router.get("/runs/{run_id}", response_class=HTMLResponse)
def run_page(run_id: str, store: StoreDep, settings: SettingsDep) -> HTMLResponse:
    try:
        run = store.get_run(run_id)
    except NotFoundError as exc:
        return not_found(str(exc))
    view = overview(store, run, settings)
    job = JobQueue(store).get(run.id)
    done = sum(1 for task in view.tasks if task.status in ("passed", "failed"))
    return page(
        "run.html",
        title=f"Run {run.id[:8]}",
        view=view,
        run=view.row.run,
        job=job,
        done=done,
        ended=run_ended(view.row.run),
    )


@router.get("/runs/{run_id}/report")
def report_page(
    run_id: str, store: StoreDep, settings: SettingsDep, format: Annotated[str, Query()] = "html"
) -> Response:
    """The run's report as one file: standalone HTML (default) or Markdown (`?format=md`), plots inline."""
    from veriloop.service.report import render_report

    if format not in ("html", "md"):
        return page("error.html", 400, title="Bad request", message=f"format must be html or md, not {format!r}")
    try:
        text = render_report(store, run_id, settings, "md" if format == "md" else "html")
    except NotFoundError as exc:
        return not_found(str(exc))
    if format == "md":
        return Response(text, media_type="text/markdown; charset=utf-8")
    return HTMLResponse(text)


@router.get("/runs/{run_id}/tree/{task_id:path}", response_class=HTMLResponse)
def tree_page(run_id: str, task_id: str, store: StoreDep) -> HTMLResponse:
    try:
        run = store.get_run(run_id)
        nodes = store.get_tree(run.id, task_id)
    except NotFoundError as exc:
        return not_found(str(exc))
    if not nodes:
        return not_found(f"run {run.id[:8]} has no nodes for task {task_id}")
    placed = layout_tree(nodes)
    width = max((p.x for p in placed), default=0) + 1
    depth = max((p.y for p in placed), default=0) + 1
    attempts = store.list_attempts(run.id, task_id)
    best = attempts[-1].best_node_id if attempts else None
    return page(
        "tree.html",
        title=f"Tree {task_id}",
        run=run,
        task_id=task_id,
        placed=placed,
        width=width,
        depth=depth,
        best=best,
        attempt=attempts[-1] if attempts else None,
    )


@router.get("/nodes/{node_id}", response_class=HTMLResponse)
def node_page(node_id: str, store: StoreDep) -> HTMLResponse:
    try:
        node = store.get_node(node_id)
    except NotFoundError as exc:
        return not_found(str(exc))
    parent = store.get_node(node.parent_id) if node.parent_id else None
    children = [other for other in store.get_tree(node.run_id, node.task_id) if other.parent_id == node.id]
    diagnostics = node.verify_result.diagnostics if node.verify_result else []
    lines, loose = pin_diagnostics(node.code or "", diagnostics)
    diff = diff_lines(parent.code or "", node.code or "") if parent is not None and parent.code is not None else None
    return page(
        "node.html",
        title=f"Node {node.id[:8]}",
        node=node,
        parent=parent,
        children=children,
        lines=lines,
        loose=loose,
        diff=diff,
        guard=guard_verdict(node),
    )


@router.get("/compare", response_class=HTMLResponse)
def compare_page(
    store: StoreDep,
    a: Annotated[str | None, Query()] = None,
    b: Annotated[str | None, Query()] = None,
) -> HTMLResponse:
    runs = store.list_runs(limit=100)
    context: dict[str, Any] = {"title": "Compare runs", "runs": runs, "a": a or "", "b": b or "", "pair": None}
    if a and b:
        try:
            left, right = store.get_run(a), store.get_run(b)
        except NotFoundError as exc:
            return page("compare.html", 404, error=str(exc), **context)
        if left.suite != right.suite:
            context["error"] = (
                f"the runs are on different suites ({left.suite} and {right.suite}); only tasks both ran are compared"
            )
        left_tasks = {row.task_id: row for row in task_rows(store, left)}
        right_tasks = {row.task_id: row for row in task_rows(store, right)}
        ids = sorted(set(left_tasks) | set(right_tasks))
        comparison = compare_runs(store, left.id, right.id)
        outcomes = {pair.task_id: pair.outcome for pair in comparison.tasks}
        context["pair"] = {
            "left": run_row(store, left),
            "right": run_row(store, right),
            "stats": comparison,
            "rows": [
                (task_id, left_tasks.get(task_id), right_tasks.get(task_id), outcomes.get(task_id)) for task_id in ids
            ],
        }
    return page("compare.html", **context)


@router.get("/login", response_class=HTMLResponse)
def login_page(next: str = "/") -> HTMLResponse:
    return page("login.html", title="Sign in", next=next if next.startswith("/") else "/")


@router.post("/login")
async def login(request: Request) -> Response:
    """Keep the token in an HTTP-only cookie; the middleware checks it on every later request.

    The form is parsed here (URL-encoded) so the service needs no multipart package.
    """
    form = parse_qs((await request.body()).decode("utf-8", "replace"))
    token = (form.get("token") or [""])[0]
    target = (form.get("next") or ["/"])[0]
    response = RedirectResponse(target if target.startswith("/") and not target.startswith("//") else "/", 303)
    response.set_cookie(COOKIE, token, httponly=True, samesite="strict")
    return response
