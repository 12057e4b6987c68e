"""The Jinja environment the dashboard pages and `veriloop runs report` share: one set of filters and
SVG chart macros, so a report file draws exactly what the run page draws."""

from __future__ import annotations

from pathlib import Path

from jinja2 import Environment, FileSystemLoader, select_autoescape
from markupsafe import Markup

from veriloop.service.views import score_colour
from veriloop.store.stats import INTERVAL_NAMES
from veriloop.store.summary import CheckFigures, PassAtK, TurnRate

TEMPLATES = Path(__file__).resolve().parent / "templates"


def pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def interval(low: float | None, high: float | None, method: str | None = None) -> str:
    """A 95% interval as shown beside a figure: '[12%, 40%]', or with its method named, 'Wilson [12%, 40%]'."""
    if low is None or high is None:
        return ""
    shown = f"[{100 * low:.0f}%, {100 * high:.0f}%]"
    return f"{interval_name(method)} {shown}" if method else shown


def interval_name(method: str | None) -> str:
    """How a figure's interval method is named when shown: 'Wilson', 'bootstrap', 'paired bootstrap'."""
    return INTERVAL_NAMES.get(method or "", method or "")


def interval_summary(rows: list[PassAtK]) -> str:
    """Which interval each pass@k row has: 'bootstrap', or 'Wilson for pass@1; bootstrap for pass@2, pass@4'."""
    by_method: dict[str, list[str]] = {}
    for row in rows:
        by_method.setdefault(interval_name(row.interval), []).append(f"pass@{row.k}")
    if len(by_method) == 1:
        return next(iter(by_method))
    return "; ".join(f"{name} for {', '.join(ks)}" for name, ks in by_method.items())


def signed(value: float | None) -> str:
    """A difference of rates in percentage points, with its sign."""
    return "-" if value is None else f"{100 * value:+.1f} pp"


def p_value(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g}" if value >= 0.001 else f"{value:.1e}"


def figure_text(figures: CheckFigures) -> str:
    """'40% Wilson [12%, 72%], 2/5 tasks' for a check's pass rate."""
    found = f"{pct(figures.pass_rate)} {interval(figures.low, figures.high, figures.interval)}".strip()
    return f"{found}, {figures.tasks_passed}/{figures.tasks} tasks"


def turn_items(rows: list[TurnRate]) -> list[tuple[str, float, str]]:
    return [(f"turn {r.turn}", r.pass_rate, f"{100 * r.pass_rate:.0f}%") for r in rows]


def passk_items(rows: list[PassAtK]) -> list[tuple[str, float, str]]:
    return [(f"pass@{r.k}", r.value, f"{pct(r.value)} {interval(r.low, r.high)} ({r.tasks})") for r in rows]


def error_items(counts: dict[str, int]) -> list[tuple[str, int, str]]:
    return [(name, count, str(count)) for name, count in counts.items()]


def md_cell(value: object) -> str:
    """Text safe inside a Markdown table cell."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def one_line(value: object) -> Markup:
    """Markup (an inline SVG) on one line, so a Markdown renderer keeps it one HTML block."""
    return Markup(" ".join(line.strip() for line in str(value).splitlines() if line.strip()))


def make_environment() -> Environment:
    env = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]), trim_blocks=True)
    env.filters["pct"] = pct
    env.filters["secs"] = lambda value: "-" if value is None else f"{value:.1f} s"
    env.filters["short"] = lambda value: (value or "")[:8]
    env.filters["score"] = lambda value: "-" if value is None else f"{value:.2f}"
    env.filters["signed"] = signed
    env.filters["p_value"] = p_value
    env.filters["figure"] = figure_text
    env.filters["turn_items"] = turn_items
    env.filters["passk_items"] = passk_items
    env.filters["error_items"] = error_items
    env.filters["md"] = md_cell
    env.filters["one_line"] = one_line
    env.globals["colour"] = score_colour
    env.globals["interval"] = interval
    env.filters["interval_name"] = interval_name
    env.filters["interval_summary"] = interval_summary
    return env


ENV = make_environment()
