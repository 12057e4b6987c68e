"""`veriloop runs report RUN --format md|html`: the run page's figures and tables as one file.

The same view (`views.overview`) and the same SVG macros as the dashboard's run page, so a report
shows what the page shows, with the plots inline (no scripts, no links needed to read it).
"""

from __future__ import annotations

from typing import Literal

import veriloop
from veriloop.config import Settings
from veriloop.records import utcnow
from veriloop.service.templating import ENV
from veriloop.service.views import overview
from veriloop.store import TrajectoryStore

ReportFormat = Literal["md", "html"]


def render_report(store: TrajectoryStore, run_id: str, settings: Settings, fmt: ReportFormat = "md") -> str:
    """The report of one stored run (an id or unique prefix) as Markdown or a standalone HTML page."""
    run = store.get_run(run_id)
    view = overview(store, run, settings)
    template = ENV.get_template("report.html" if fmt == "html" else "report.md")
    return template.render(
        title=f"Run {run.id[:8]} report",
        run=view.row.run,
        view=view,
        version=veriloop.__version__,
        written=utcnow().strftime("%Y-%m-%d %H:%M UTC"),
    )
