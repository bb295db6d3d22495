"""The HTML rendering: one self-contained page (one template string, inline CSS, inline SVG;
no script, no external resource), readable offline, printable, and stable for golden tests.

Layout: summary → primary finding (where, your line, cause, next check, evidence) → other
findings → informational ones (folded) → training curves from `report.series` → model tree
from `report.meta["models"]`. Every text that comes from the report is `html.escape`d.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from typing import TYPE_CHECKING, Any

from .._catalogue import get_language, msg
from .._finding import Finding, Severity
from ._svg import fmt, line_chart
from ._tree import render_tree

if TYPE_CHECKING:
    from .._findings import Report

PAGE = """<!DOCTYPE html>
<html lang="{lang}">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta name="generator" content="torchtriage">
<title>{title}</title>
<style>
:root {{ color-scheme: light; --err: #b00020; --err-bg: #fdecee; --warn: #8a4f00; --warn-bg: #fff3dc;
  --info: #1f5fa8; --info-bg: #e9f1fb; --ok: #1b6e2d; --ok-bg: #e8f5eb; --ink: #1d1f23; --muted: #555b66;
  --line: #d5d9e0; }}
* {{ box-sizing: border-box; }}
body {{ font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Noto Sans", "Noto Sans CJK SC",
  "Source Han Sans SC", "PingFang SC", "Hiragino Sans GB", "Microsoft YaHei", "WenQuanYi Micro Hei",
  "WenQuanYi Zen Hei", "Droid Sans Fallback", sans-serif;
  color: var(--ink); background: #f6f7f9; margin: 0; }}
main {{ max-width: 1120px; margin: 0 auto; padding: 24px 20px 48px; }}
h1 {{ font-size: 1.5rem; margin: 0 0 4px; }}
h2 {{ font-size: 1.15rem; margin: 28px 0 10px; }}
code, pre, .mono {{ font-family: ui-monospace, "SFMono-Regular", Menlo, Consolas, "DejaVu Sans Mono",
  "Noto Sans Mono CJK SC", "WenQuanYi Micro Hei Mono", monospace; font-size: 0.9em; }}
.summary {{ color: var(--muted); margin: 0 0 8px; }}
.meta {{ display: flex; flex-wrap: wrap; gap: 4px 18px; margin: 0; color: var(--muted); font-size: 0.9em; }}
.meta div {{ display: flex; gap: 6px; }} .meta dt {{ font-weight: 600; }} .meta dd {{ margin: 0; }}
.card {{ background: #fff; border: 1px solid var(--line); border-left: 6px solid var(--info); border-radius: 6px;
  padding: 14px 18px; margin: 12px 0; }}
.card.error {{ border-left-color: var(--err); }} .card.warning {{ border-left-color: var(--warn); }}
.card.ok {{ border-left-color: var(--ok); background: var(--ok-bg); }}
.card.primary {{ box-shadow: 0 1px 4px rgba(0,0,0,.12); }}
.head {{ font-size: 1.05rem; font-weight: 600; margin: 0 0 8px; }}
details.card > summary {{ cursor: pointer; }} details.card > summary .head {{ display: inline; }}
.badge {{ display: inline-block; font-size: 0.78rem; font-weight: 700; text-transform: uppercase;
  letter-spacing: .03em; border-radius: 4px; padding: 1px 7px; margin-right: 6px; vertical-align: 2px; }}
.badge.error {{ color: #fff; background: var(--err); }} .badge.warning {{ color: #fff; background: var(--warn); }}
.badge.info {{ color: #fff; background: var(--info); }}
.badge.cat {{ color: var(--ink); background: #e6e8ec; text-transform: none; }}
.code {{ color: var(--muted); font-weight: 400; font-size: 0.85em; }}
table {{ border-collapse: collapse; margin: 6px 0; }}
th, td {{ text-align: left; padding: 3px 10px 3px 0; vertical-align: top; }}
table.kv th {{ color: var(--muted); font-weight: 600; white-space: nowrap; width: 9em; }}
table.ev {{ width: 100%; font-size: 0.9em; }} table.ev th {{ border-bottom: 1px solid var(--line); color: var(--muted); }}
table.ev td {{ border-bottom: 1px solid #eef0f3; }}
table.ev.named td:first-child {{ width: 14em; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; }}
td.bad {{ color: var(--err); font-weight: 700; background: var(--err-bg); }}
pre.src {{ background: #f1f3f6; border: 1px solid var(--line); border-radius: 4px; padding: 6px 10px; margin: 4px 0;
  white-space: pre-wrap; }}
.next {{ background: var(--info-bg); border-radius: 4px; padding: 6px 10px; }}
.charts {{ display: flex; flex-wrap: wrap; gap: 16px; }}
figure.chart {{ background: #fff; border: 1px solid var(--line); border-radius: 6px; margin: 0; padding: 10px 12px;
  max-width: 100%; }}
figure.chart svg {{ max-width: 100%; height: auto; display: block; }}
.chart-title {{ font-weight: 600; }} .chart-notes {{ color: var(--muted); font-size: 0.85em; margin: 4px 0 0; }}
svg .plot {{ fill: #fbfcfd; stroke: var(--line); }} svg .grid {{ stroke: #e7eaee; }} svg .axis {{ stroke: #8a909a; }}
svg .tick, svg .axis-label, svg .mark-label {{ font-size: 11px; fill: var(--muted); }}
svg .line {{ fill: none; stroke: var(--info); stroke-width: 1.8; }} svg .dot {{ fill: var(--info); }}
svg .bad {{ stroke: var(--err); stroke-width: 2.2; }}
svg .mark {{ stroke: var(--err); stroke-width: 1.4; stroke-dasharray: 5 4; }} svg .mark-label {{ fill: var(--err); }}
.legend {{ font-size: 0.9em; color: var(--muted); margin: 0 0 6px; }}
.legend span {{ margin-right: 16px; }}
ul.tree, ul.tree ul {{ list-style: none; margin: 0; padding-left: 18px; }}
ul.tree {{ padding-left: 0; font-size: 0.92em; background: #fff; border: 1px solid var(--line); border-radius: 6px;
  padding: 10px 14px; }}
ul.tree summary {{ cursor: pointer; }}
.mod {{ font-family: ui-monospace, Menlo, Consolas, "DejaVu Sans Mono", monospace; }}
.cls {{ color: var(--muted); }}
.mod.named {{ color: var(--err); font-weight: 700; background: var(--err-bg); padding: 0 3px; border-radius: 3px; }}
.mod.propagated {{ color: var(--warn); font-weight: 700; background: var(--warn-bg); padding: 0 3px;
  border-radius: 3px; }}
.tag {{ font-size: 0.8em; border-radius: 3px; padding: 0 5px; }}
.tag.named {{ color: #fff; background: var(--err); }} .tag.propagated {{ color: #fff; background: var(--warn); }}
.note {{ color: var(--muted); font-size: 0.85em; }}
@media print {{ body {{ background: #fff; }} details > summary {{ list-style: none; }} }}
</style>
</head>
<body>
<main>
<header>
<h1>{title}</h1>
<p class="summary">{summary}</p>
{meta}
</header>
{findings}
{charts}
{models}
</main>
</body>
</html>
"""  # noqa: E501 (the page's CSS, a rule set per line: the golden files compare the page byte for byte)

_TENSOR_COLUMNS = ("shape", "dtype", "device", "contiguous", "numel", "nan", "posinf", "neginf", "min", "max")
_TENSOR_HEADERS = ("shape", "dtype", "device", "contiguous", "numel", "NaN", "+Inf", "-Inf", "min", "max")
_HIDDEN_EVIDENCE = ("source_line",)
_META_SHOWN = ("script", "argv", "exit_code", "steps", "torch", "seconds")


def _tensor_dict(value: Any) -> dict[str, Any] | None:
    """A tensor summary as a dict (a `TensorSummary` or its JSON form), else None."""
    if hasattr(value, "to_dict") and hasattr(value, "numel"):
        value = value.to_dict()
    if isinstance(value, Mapping) and "shape" in value and "dtype" in value:
        return dict(value)
    return None


def _plain(value: Any) -> str:
    if isinstance(value, float):
        return fmt(value) if value != value or value in (float("inf"), float("-inf")) else f"{value:.6g}"
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return ", ".join(value)
    if isinstance(value, (Mapping, list, tuple)):
        try:
            return json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError):
            return str(value)
    return str(value)


def _tensor_cells(d: Mapping[str, Any]) -> str:
    cells = []
    for col in _TENSOR_COLUMNS:
        v = d.get(col)
        if col == "shape" and isinstance(v, (list, tuple)):
            text = "[" + ", ".join(str(s) for s in v) + "]"
        elif col == "dtype" and isinstance(v, str):
            text = v.replace("torch.", "")
        elif col in ("min", "max"):
            text = (fmt(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool)
                    else _plain(v) if v is not None else "–")
        elif v is None:
            text = "–"
        else:
            text = str(v)
        cls = []
        if col in ("numel", "nan", "posinf", "neginf", "min", "max"):
            cls.append("num")
        if col in ("nan", "posinf", "neginf") and isinstance(v, int) and v > 0:
            cls.append("bad")
        attr = f' class="{" ".join(cls)}"' if cls else ""
        cells.append(f"<td{attr}>{escape(text)}</td>")
    return "".join(cells)


def _evidence(f: Finding) -> str:
    ev = f.evidence if isinstance(f.evidence, Mapping) else {}
    tensors: list[tuple[str, dict[str, Any]]] = []
    others: list[tuple[str, Any]] = []
    for key, value in ev.items():
        if key in _HIDDEN_EVIDENCE:
            continue
        t = _tensor_dict(value)
        if t is not None:
            tensors.append((str(key), t))
        elif isinstance(value, (list, tuple)) and value and all(_tensor_dict(v) is not None for v in value):
            tensors.extend((f"{key}[{i}]", _tensor_dict(v)) for i, v in enumerate(value))  # type: ignore[misc]
        else:
            others.append((str(key), value))
    if not tensors and not others:
        return ""
    out = [f"<h3 class=\"head\">{escape(msg('report.evidence'))}</h3>"]
    if tensors:
        head = "".join(f"<th>{escape(h)}</th>" for h in (msg("html.tensor"), *_TENSOR_HEADERS))
        rows = "".join(f'<tr><td class="mono">{escape(k)}</td>{_tensor_cells(d)}</tr>' for k, d in tensors)
        out.append(f'<table class="ev"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>')
    if others:
        head = f"<th>{escape(msg('html.name'))}</th><th>{escape(msg('html.value'))}</th>"
        rows = "".join(f'<tr><td class="mono">{escape(k)}</td><td class="mono">{escape(_plain(v))}</td></tr>'
                       for k, v in others)
        out.append(f'<table class="ev named"><thead><tr>{head}</tr></thead><tbody>{rows}</tbody></table>')
    return "".join(out)


def _where_rows(f: Finding) -> str:
    rows = []
    module = None if f.module is None else (f.module or msg("report.root_module"))
    for key, value in (("report.step", f.step), ("report.stage", f.stage.value if f.stage else None),
                       ("report.module", module), ("report.op", f.op), ("report.parameter", f.parameter)):
        if value is not None:
            rows.append(f'<tr><th>{escape(msg(key))}</th><td class="mono">{escape(str(value))}</td></tr>')
    if f.file:
        where = f"{f.file}:{f.line}" if f.line is not None else f.file
        src = f.evidence.get("source_line") if isinstance(f.evidence, Mapping) else None
        cell = f'<code>{escape(where)}</code>'
        if src:
            cell += f'<pre class="src">{escape(str(src))}</pre>'
        rows.append(f"<tr><th>{escape(msg('report.line'))}</th><td>{cell}</td></tr>")
    if f.cause:
        rows.append(f"<tr><th>{escape(msg('report.cause'))}</th><td>{escape(f.cause)}</td></tr>")
    if f.next_check:
        rows.append(f'<tr><th>{escape(msg("report.next"))}</th><td><div class="next">'
                    f'{escape(f.next_check)}</div></td></tr>')
    if f.count > 1:
        rows.append(f"<tr><th>{escape(msg('html.seen'))}</th>"
                    f"<td>{escape(msg('report.count', count=f.count))}</td></tr>")
    return f'<table class="kv">{"".join(rows)}</table>' if rows else ""


def _heading(f: Finding) -> str:
    sev = f.severity.value
    return (f'<span class="badge {sev}">{escape(sev)}</span><span class="badge cat">{escape(f.category.value)}</span>'
            f'{escape(f.message)} <span class="code">{escape(f.code)}</span>')


def render_finding(f: Finding, *, primary: bool = False, folded: bool = False) -> str:
    """One finding as a card; `folded` puts the details inside a closed `<details>`."""
    sev = f.severity.value
    body = _where_rows(f) + _evidence(f)
    if folded:
        return (f'<details class="card {sev}"><summary><p class="head">{_heading(f)}</p></summary>'
                f"{body}</details>")
    cls = f"card {sev}" + (" primary" if primary else "")
    return f'<section class="{cls}"><p class="head">{_heading(f)}</p>{body}</section>'


def findings_html(report: Report) -> str:
    if not report.findings:
        return (f'<section class="card ok"><p class="head">{escape(msg("html.no_finding_title"))}</p>'
                f"<p>{escape(msg('report.empty'))}</p></section>")
    primary = report.primary
    issues = [f for f in report.findings if f.severity is not Severity.INFO and f is not primary]
    infos = [f for f in report.findings if f.severity is Severity.INFO]
    out = []
    if primary is not None:
        out.append(f"<h2>{escape(msg('report.primary'))}</h2>")
        out.append(render_finding(primary, primary=True))
    if issues:
        out.append(f"<h2>{escape(msg('report.also'))}</h2>")
        out.extend(render_finding(f) for f in issues)
    if infos:
        out.append(f"<h2>{escape(msg('report.infos'))}</h2>")
        out.extend(render_finding(f, folded=True) for f in infos)
    return "\n".join(out)


def charts_html(report: Report) -> str:
    series = report.series if isinstance(report.series, Mapping) else {}
    primary = report.primary
    mark = primary.step if primary is not None else None
    charts = []
    steps = report.meta.get("series_steps") if isinstance(report.meta, Mapping) else None
    steps = steps if isinstance(steps, Mapping) else {}
    # two runs' curves in one chart (`torchtriage diff`, issue 28): meta["series_pairs"]
    pairs = report.meta.get("series_pairs") if isinstance(report.meta, Mapping) else None
    paired: dict[str, str] = {}
    for pair in (pairs.values() if isinstance(pairs, Mapping) else ()):
        if isinstance(pair, (list, tuple)) and len(pair) == 2 and pair[0] in series and pair[1] in series:
            paired[pair[0]], paired[pair[1]] = pair[1], ""
    for i, (name, values) in enumerate(series.items()):
        if name in paired and isinstance(values, (list, tuple)):
            if paired[name]:
                chart = line_chart(f"{name} — {paired[name]}", values, mark_step=mark, chart_id=f"chart{i}",
                                   overlay=(paired[name], series[paired[name]]))
                if chart:
                    charts.append(chart)
            continue
        if isinstance(values, (list, tuple)) and values:
            chart = line_chart(str(name), values, mark_step=mark, chart_id=f"chart{i}", steps=steps.get(name))
            if chart:
                charts.append(chart)
    if not charts:
        return ""
    return f"<h2>{escape(msg('html.charts'))}</h2><div class=\"charts\">{''.join(charts)}</div>"


def models_html(report: Report) -> str:
    models = report.meta.get("models") if isinstance(report.meta, Mapping) else None
    if not isinstance(models, Mapping) or not models:
        return ""
    trees = []
    for label, paths in models.items():
        if isinstance(paths, Mapping):
            tree = render_tree(str(label), paths, report.findings)
            if tree:
                trees.append(tree)
    if not trees:
        return ""
    legend = (f'<p class="legend"><span><span class="mod named">module</span> '
              f'{escape(msg("html.legend_finding"))}</span>'
              f'<span><span class="mod propagated">module</span> {escape(msg("html.legend_propagated"))}</span></p>')
    return f"<h2>{escape(msg('html.model'))}</h2>{legend}{''.join(trees)}"


def meta_html(report: Report) -> str:
    meta = report.meta if isinstance(report.meta, Mapping) else {}
    items = []
    for key in _META_SHOWN:
        value = meta.get(key)
        if value is None or value == "" or value == []:
            continue
        text = " ".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value)
        items.append(f"<div><dt>{escape(key)}</dt><dd class=\"mono\">{escape(text)}</dd></div>")
    return f'<dl class="meta">{"".join(items)}</dl>' if items else ""


def render_page(report: Report) -> str:
    """The report as one standalone HTML page (public, with its argument checked, as
    `torchtriage.report.render_html`)."""
    counts = {s: sum(1 for f in report.findings if f.severity is s) for s in Severity}
    steps = report.meta.get("steps", 0) if isinstance(report.meta, Mapping) else 0
    summary = msg("report.summary_line", errors=counts[Severity.ERROR], warnings=counts[Severity.WARNING],
                  infos=counts[Severity.INFO], steps=steps)
    return PAGE.format(
        lang="zh-Hans" if get_language() == "zh" else "en",
        title=escape(msg("report.title")),
        summary=escape(summary),
        meta=meta_html(report),
        findings=findings_html(report),
        charts=charts_html(report),
        models=models_html(report),
    )
