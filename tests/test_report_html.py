"""Renderers: golden text / JSON / HTML of fixed reports, the HTML page's structure and safety,
its charts and model tree, and `torchtriage report` re-rendering a saved JSON report."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import pytest
import torch

import torchtriage
from conftest import run_cli
from torchtriage import Finding, Report
from torchtriage._render._svg import MAX_POINTS, line_chart
from torchtriage.report import dump_json, load_json, render_html, render_json, render_text
from zoo.reports import REPORTS, nan_report

VOID = {"meta", "br", "hr", "img", "input", "link", "rect", "line", "circle", "polyline", "path"}


class _Checker(HTMLParser):
    """Records nesting errors, URLs in attributes, and the text of the page."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.tags: list[str] = []
        self.urls: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("href", "src", "xmlns", "action") or (value and re.search(r"(https?:|//)", value)):
                self.urls.append(f"{tag}.{name}={value}")
        if tag not in VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag, attrs):
        self.tags.append(tag)

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes <{self.stack[-1] if self.stack else None}>")
        else:
            self.stack.pop()

    def handle_data(self, data):
        self.text.append(data)


def _parse(page: str) -> _Checker:
    p = _Checker()
    p.feed(page)
    p.close()
    return p


@pytest.fixture(autouse=True)
def _english(monkeypatch, tmp_path):
    # Messages are global state; the text renderer shortens paths relative to the cwd.
    torchtriage.set_language("en")
    monkeypatch.chdir(tmp_path)
    yield
    torchtriage.set_language("en")


# ---------------------------------------------------------------------- golden files
@pytest.mark.parametrize("name", sorted(REPORTS))
def test_golden_renderings(name, expect_golden):
    report = REPORTS[name]()
    expect_golden(f"report_{name}.txt", render_text(report) + "\n")
    expect_golden(f"report_{name}.json", render_json(report) + "\n")
    expect_golden(f"report_{name}.html", render_html(report))


def test_golden_chinese(expect_golden):
    torchtriage.set_language("zh")
    report = nan_report()
    expect_golden("report_nan_zh.txt", render_text(report) + "\n")
    expect_golden("report_nan_zh.html", render_html(report))


# ---------------------------------------------------------------------- page structure
@pytest.mark.parametrize("name", sorted(REPORTS))
def test_page_is_well_formed_and_self_contained(name):
    page = render_html(REPORTS[name]())
    p = _parse(page)
    assert p.errors == [] and p.stack == []
    assert p.urls == []
    assert "script" not in p.tags and "link" not in p.tags and "iframe" not in p.tags
    assert not re.search(r"https?://|url\(|@import", page)


def test_text_from_the_report_is_escaped():
    page = render_html(nan_report())
    assert "h = torch.exp(self.fc(x)) &lt;b&gt;" in page
    assert "<b>" not in page
    mixed = render_html(REPORTS["mixed"]())
    assert "(8x3 and 4x2) in &lt;root&gt;" in mixed and "3 features &amp; more" in mixed


def test_empty_report_says_nothing_was_found():
    page = render_html(Report())
    text = " ".join(_parse(page).text)
    assert "Nothing found" in text
    assert "No finding: nothing looked wrong in what torchtriage watched." in text
    assert "Training curves" not in text and "<svg" not in page and 'class="tree"' not in page


def test_primary_first_then_others_then_infos():
    page = render_html(nan_report())
    order = [page.index(s) for s in ("numerical.forward_producer", "gradient.exploding", "silent.frozen_params")]
    assert order == sorted(order)
    assert re.search(r'<section class="card error primary"><p class="head">.*numerical\.forward_producer', page)
    # infos are folded: a closed <details>
    assert '<details class="card info"><summary>' in page


def test_evidence_tensor_table_flags_nonfinite_counts():
    page = render_html(nan_report())
    row = re.search(r'<tr><td class="mono">output</td>(.*?)</tr>', page).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    assert cells == ["[8, 16]", "float32", "cpu", "True", "128", "0", "3", "0", "-2.5", "87.25"]
    assert '<td class="num bad">3</td>' in row


def test_live_tensor_summary_renders_as_tensor_row():
    t = torch.tensor([[1.0, float("nan")], [float("-inf"), 4.0]])
    f = Finding("numerical", "numerical.test", "x", evidence={"x": torchtriage.summarize(t)})
    page = render_html(Report((f,)))
    row = re.search(r'<tr><td class="mono">x</td>(.*?)</tr>', page).group(1)
    assert re.findall(r"<td[^>]*>(.*?)</td>", row) == ["[2, 2]", "float32", "cpu", "True", "4", "1", "0", "1",
                                                       "1", "4"]


def test_json_round_trip_renders_the_same_page(tmp_path):
    report = nan_report()
    dump_json(report, tmp_path / "r.json")
    assert render_html(load_json(tmp_path / "r.json")) == render_html(report)


def test_render_html_rejects_non_reports():
    with pytest.raises(TypeError, match=r"^render_html\(\) takes a torchtriage Report, got dict$"):
        render_html({"findings": []})


# ---------------------------------------------------------------------- charts
def test_charts_mark_primary_step_nonfinite_points_and_choose_log_scale():
    page = render_html(nan_report())
    loss = page[page.index("<figcaption class=\"chart-title\">loss"):
                page.index("<figcaption class=\"chart-title\">grad_norm")]
    grad = page[page.index("<figcaption class=\"chart-title\">grad_norm"):]
    assert "log scale" not in loss and "log scale" in grad
    assert loss.count('<path class="bad"') == 2 and grad.count('<path class="bad"') == 1
    assert "<title>step 6: NaN</title>" in loss and "<title>step 6: +Inf</title>" in grad
    assert loss.count('<line class="mark"') == 1
    assert ("loss over 9 step(s): first 2.31, last NaN, finite min 1.38, finite max 2.31<br>"
            "2 non-finite value(s), first at step 6 (NaN)<br>1 step(s) without a value<br>"
            "step 6: primary finding") in loss


def test_chart_breaks_the_line_at_gaps():
    chart = line_chart("loss", [1.0, 2.0, None, 3.0, 4.0, float("nan"), 5.0])
    assert chart.count("<polyline") == 2 and chart.count('<circle class="dot"') == 1


def test_chart_skips_series_without_values_and_handles_constant_ones():
    assert line_chart("loss", [None, None]) == ""
    flat = line_chart("lr", [0.1] * 5)
    assert flat.count("<polyline") == 1 and "finite min 0.1, finite max 0.1" in flat
    only_bad = line_chart("loss", ["nan", "inf"])
    assert only_bad.count('<path class="bad"') == 2 and "<polyline" not in only_bad


def test_log_scale_is_refused_for_non_positive_values():
    assert "log scale" not in line_chart("x", [0.0, 1.0, 1000.0], log=True)
    assert "log scale" in line_chart("x", [1.0, 10.0, 20.0], log=True)
    assert "log scale" not in line_chart("x", [1.0, 10.0, 20.0])


def test_long_series_are_downsampled_but_keep_spikes():
    values = [1.0] * 10_000
    values[7777] = 50.0
    chart = line_chart("loss", values)
    points = re.search(r'<polyline class="line" points="([^"]+)"', chart).group(1).split()
    assert len(points) <= MAX_POINTS
    assert "finite max 50" in chart and "10000 steps drawn as" in chart
    top = min(float(p.split(",")[1]) for p in points)
    assert top < 30  # the spike reaches the top of the plot area


# ---------------------------------------------------------------------- model tree
def test_model_tree_marks_producer_and_propagating_modules():
    page = render_html(nan_report())
    tree = page[page.index('<ul class="tree">'):]
    assert re.search(r'<span class="mod named" title="blocks.0.act">act</span> <span class="cls">Exp</span> '
                     r'<span class="tag named">finding: numerical.forward_producer</span>', tree)
    for path in ("blocks.1", "blocks.1.fc", "head"):
        assert f'<span class="mod propagated" title="{path}">' in tree
    assert '<span class="mod" title="blocks.0.fc">fc</span>' in tree  # unmarked
    assert 'title="model">model</span> <span class="cls">TinyNet</span>' in tree


def test_model_tree_of_a_large_model_unfolds_only_the_path_to_marks():
    layout = {"": "Big", **{f"layers.{i}": "Block" for i in range(40)},
              **{f"layers.{i}.fc": "Linear" for i in range(40)}, "layers": "ModuleList"}
    f = Finding("numerical", "numerical.x", "m", module="layers.33.fc")
    page = render_html(Report((f,), meta={"models": {"net": layout}}))
    assert page.count("<details open>") == 3  # root, layers, layers.33
    assert '<span class="mod named" title="layers.33.fc">fc</span>' in page


def test_findings_for_another_model_do_not_mark_this_one():
    f = Finding("numerical", "numerical.x", "m", module="fc", evidence={"model": "teacher"})
    page = render_html(Report((f,), meta={"models": {"student": {"": "S", "fc": "Linear"},
                                                     "teacher": {"": "T", "fc": "Linear"}}}))
    assert page.count('class="mod named"') == 2  # the legend's sample + teacher.fc
    student = page[page.index('title="student"'):page.index('title="teacher"')]
    assert "named" not in student


# ---------------------------------------------------------------------- torchtriage report
def test_cli_report_prints_text_and_writes_html(tmp_path):
    dump_json(nan_report(), tmp_path / "r.json")
    out = tmp_path / "r.html"
    proc = run_cli("report", str(tmp_path / "r.json"), "--html", str(out), "--text", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[:3] == [
        "== torchtriage report ==", "-- Primary --",
        "✗ [numerical] blocks.0.act (Exp) produced +Inf from finite inputs at step 6"]
    assert "      output: float32[8, 16] cpu +Inf=3 finite min=-2.5 max=87.25" in proc.stdout.splitlines()
    assert proc.stderr == f"HTML report written to {out}\n"
    assert out.read_text(encoding="utf-8") == render_html(nan_report())


def test_cli_report_in_chinese_to_stdout(tmp_path):
    dump_json(nan_report(), tmp_path / "r.json")
    proc = run_cli("report", "r.json", "--html", "-", "--lang", "zh", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("<!DOCTYPE html>\n<html lang=\"zh-Hans\">")
    assert "<h2>首要问题</h2>" in proc.stdout


@pytest.mark.parametrize("content, expected", [
    (None, r"torchtriage: error: report 'r\.json' not found \(working directory: .*\)"),
    ("not json", r"torchtriage: error: report 'r\.json' is not JSON: Expecting value: line 1 column 1 \(char 0\)"),
    ("[1, 2]", r"torchtriage: error: report 'r\.json' is not a torchtriage report: expected a JSON object, got list"),
    ('{"schema": "other/9"}', r"torchtriage: error: report 'r\.json' is not a torchtriage report: "
                              r"report schema 'other/9' is not supported; expected 'torchtriage\.report/1'"),
    ('{"schema": "torchtriage.report/1", "findings": [{"category": "nope", "code": "c", "message": "m"}]}',
     r"torchtriage: error: report 'r\.json' is not a torchtriage report: Finding\.category='nope' is not valid; "
     r"accepted: 'shape', .*"),
    ('{"schema": "torchtriage.report/1", "findings": {}}',
     r"torchtriage: error: report 'r\.json' is not a torchtriage report: 'findings' must be a list of objects"),
])
def test_cli_report_bad_input_is_one_line_and_exit_2(tmp_path, content, expected):
    if content is not None:
        (tmp_path / "r.json").write_text(content, encoding="utf-8")
    proc = run_cli("report", "r.json", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stdout == ""
    assert len(proc.stderr.splitlines()) == 1
    assert re.fullmatch(expected, proc.stderr.strip())


def test_cli_report_unwritable_html_path(tmp_path):
    dump_json(Report(), tmp_path / "r.json")
    proc = run_cli("report", "r.json", "--html", str(tmp_path / "no" / "r.html"), cwd=tmp_path)
    assert proc.returncode == 2
    assert (proc.stderr
            == f"torchtriage: error: --html {tmp_path / 'no' / 'r.html'}: folder {tmp_path / 'no'} does not exist\n")


def test_json_golden_is_the_public_schema():
    data = json.loads(render_json(nan_report()))
    assert data["schema"] == "torchtriage.report/1" and data["primary"] == 0
    assert data["series"]["loss"][6] == "nan" and data["series"]["grad_norm"][6] == "inf"


def test_run_writes_html_with_the_model_tree(tmp_path):
    (tmp_path / "train.py").write_text(
        "import torch, torch.nn as nn\n"
        "model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for _ in range(2):\n"
        "    loss = model(torch.randn(4, 4)).pow(2).mean()\n"
        "    opt.zero_grad(); loss.backward(); opt.step()\n", encoding="utf-8")
    proc = run_cli("run", "--html", "r.html", "--checks", "", "train.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert _parse(page).errors == []
    assert "Nothing found" in page and "<dd class=\"mono\">2</dd>" in page
    assert '<span class="mod" title="model">model</span> <span class="cls">Sequential</span>' in page
