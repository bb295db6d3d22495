"""The HTML report as a fragment to embed in another page (a notebook's output cell).

The page's own CSS is reused, scoped under one wrapper class so that it styles the report and
nothing else of the notebook (`body`, `table`, `h2` rules would otherwise restyle the notebook
itself); chart ids get a per-fragment prefix so that two reports in one notebook stay distinct.
"""

from __future__ import annotations

import re
import uuid
from html import escape
from typing import TYPE_CHECKING

from .._catalogue import get_language, msg
from .._finding import Severity
from ._html import PAGE, charts_html, findings_html, meta_html, models_html

if TYPE_CHECKING:
    from .._findings import Report

SCOPE = "torchtriage-report"


def _page_css() -> str:
    page = PAGE
    css = page[page.index("<style>") + len("<style>"):page.index("</style>")]
    return css.replace("{{", "{").replace("}}", "}")


# A notebook's own stylesheet (JupyterLab's `.jp-RenderedHTMLCommon td { text-align: right }`,
# striped rows, floated `dt`) styles every table it renders; these resets come first and the
# page's rules follow, all under the fragment's id, which outranks the host's class selectors.
_RESETS = """
table, tr, th, td { border: none; background: none; max-width: none; }
table { margin: 6px 0; table-layout: auto; }
dl, dt, dd { float: none; margin: 0; padding: 0; }
.meta dt, .meta dd { flex: none; width: auto; min-width: max-content; }
"""


def _scope_selector(sel: str, scope: str) -> str:
    sel = sel.strip()
    if sel in (":root", "body", "html"):
        return scope
    return f"{scope} {sel}"


def scoped_css(css: str | None = None, scope: str = f".{SCOPE}") -> str:
    """The page's CSS with every rule prefixed by `scope` (at-rules dropped)."""
    css = _RESETS + _page_css() if css is None else css
    out: list[str] = []
    i, n = 0, len(css)
    while i < n:
        open_ = css.find("{", i)
        if open_ < 0:
            break
        head = css[i:open_].strip()
        if head.startswith("@"):
            # Skip the whole at-rule block (print styles do not apply in a notebook).
            depth, j = 1, open_ + 1
            while j < n and depth:
                depth += {"{": 1, "}": -1}.get(css[j], 0)
                j += 1
            i = j
            continue
        close = css.index("}", open_)
        sels = ", ".join(_scope_selector(s, scope) for s in head.split(",") if s.strip())
        out.append(f"{sels} {{{css[open_ + 1:close].strip()}}}")
        i = close + 1
    return "\n".join(out)


def render_fragment(report: Report) -> str:
    """The report as one `<div class="torchtriage-report" id="ttN-report">` with its own `<style>`,
    every rule scoped under that id."""
    counts = {s: sum(1 for f in report.findings if f.severity is s) for s in Severity}
    steps = report.meta.get("steps", 0)
    summary = msg("report.summary_line", errors=counts[Severity.ERROR], warnings=counts[Severity.WARNING],
                  infos=counts[Severity.INFO], steps=steps)
    body = "\n".join(part for part in (
        f"<h1>{escape(msg('report.title'))}</h1>", f'<p class="summary">{escape(summary)}</p>',
        meta_html(report), findings_html(report), charts_html(report),
        models_html(report)) if part)
    # Unique across kernels too: a saved notebook keeps earlier outputs next to new ones.
    prefix = f"tt{uuid.uuid4().hex[:8]}-"
    body = re.sub(r"\bchart(\d+)-([td])\b", rf"{prefix}chart\1-\2", body)
    lang = "zh-Hans" if get_language() == "zh" else "en"
    scope = f"#{prefix}report"
    return (f'<div class="{SCOPE}" id="{prefix}report" lang="{lang}"><style>{scoped_css(scope=scope)}\n'
            f"{scope} {{ background: #f6f7f9; padding: 12px 16px; border-radius: 6px; text-align: left; }}"
            f"</style>{body}</div>")
