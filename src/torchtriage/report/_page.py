"""`render_html`, the public entry to the HTML page (drawn by `_render/_html.py`)."""

from __future__ import annotations

from .._findings import Report
from .._render._html import render_page


def render_html(report: Report) -> str:
    """The report as one standalone HTML page (no script, no external resource).

    Arguments:
        report: a `Report` (from `session.report`, or `torchtriage.report.load_json(path)`).

    Returns:
        The page as a string; write it to a `.html` file and open it in any browser.

    Example:
        >>> from torchtriage.report import render_html
        >>> page = render_html(session.report)
        >>> open("report.html", "w", encoding="utf-8").write(page)
    """
    if not isinstance(report, Report):
        raise TypeError(f"render_html() takes a torchtriage Report, got {type(report).__name__}")
    return render_page(report)
