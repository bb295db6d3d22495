"""The HTML report in a real browser (issue 18): Debian's chromium, headless, driven by
playwright (`make browser` installs it; CI runs it). Assertions are on the rendered DOM: the
primary card, the charts with the failing step marked, the model tree marking the right
module of the right model, no console errors, CJK glyphs drawn for `--lang zh`; one
screenshot per golden report."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess

import pytest

from conftest import GOLDEN, run_cli

CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"]

if not os.path.exists(CHROMIUM):
    pytest.skip(f"{CHROMIUM} is not installed: run `make browser` (as root) for the browser tests",
                allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (the dev extra)")


@pytest.fixture(scope="module")
def browser():
    pw = sync_api.sync_playwright().start()
    b = pw.chromium.launch(executable_path=CHROMIUM, args=FLAGS, headless=True)
    try:
        yield b
    finally:
        b.close()
        pw.stop()


class Opened:
    def __init__(self, page, problems):
        self.page = page
        self.problems = problems

    def texts(self, selector):
        return [t.strip() for t in self.page.locator(selector).all_inner_texts()]

    def attrs(self, selector, name):
        return self.page.eval_on_selector_all(selector, f"els => els.map(e => e.getAttribute({name!r}))")


@pytest.fixture
def open_page(browser, tmp_path):
    pages = []

    def open_(path, *, shot=None):
        page = browser.new_page(viewport={"width": 1200, "height": 900})
        pages.append(page)
        problems: list[str] = []
        page.on("console", lambda m: problems.append(f"console {m.type}: {m.text}")
                if m.type in ("error", "warning") else None)
        page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        page.on("request", lambda r: problems.append(f"request: {r.url}") if not r.url.startswith("file:") else None)
        page.goto(f"file://{path}")
        page.wait_for_load_state("load")
        if shot:
            page.screenshot(path=str(tmp_path / shot), full_page=True)
        return Opened(page, problems)

    yield open_
    for p in pages:
        p.close()


def _png_size(path):
    with open(path, "rb") as fh:
        head = fh.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def test_nan_report_primary_card_charts_and_tree(open_page, tmp_path):
    view = open_page(GOLDEN / "report_nan.html", shot="report_nan.png")
    page = view.page
    primary = page.locator("section.card.primary")
    assert primary.count() == 1 and primary.is_visible()
    assert view.texts("section.card.primary .head .badge") == ["ERROR", "numerical"]
    assert view.texts("section.card.primary .head")[0] == (
        "ERRORnumericalblocks.0.act (Exp) produced +Inf from finite inputs at step 6 numerical.forward_producer")
    assert primary.bounding_box()["y"] < 400  # above the fold, first thing after the header
    # both curves drawn, each with the dashed marker at the failing step and its label
    charts = page.locator("figure.chart")
    assert view.texts("figure.chart figcaption") == ["loss", "grad_norm"]
    for i in range(2):
        chart = charts.nth(i)
        mark = chart.locator("svg line.mark")
        assert mark.count() == 1  # a vertical line: zero width, so check its height below
        assert chart.locator("svg text.mark-label").text_content().strip() == "step 6"
        assert chart.locator("svg polyline, svg path").count() >= 1
        assert mark.bounding_box()["height"] > 100  # spans the plot, not a zero-size element
    # the tree: the producer red, the modules that only passed it on orange, nothing else
    assert view.attrs("ul.tree .mod.named", "title") == ["embed", "blocks.0.act"]
    assert view.attrs("ul.tree .mod.propagated", "title") == ["blocks.1", "blocks.1.fc", "head"]
    act = page.locator('.mod.named[title="blocks.0.act"]')
    assert act.is_visible()  # its ancestors are unfolded
    color = act.evaluate("e => getComputedStyle(e).color")
    assert color == "rgb(176, 0, 32)"  # --err
    assert view.problems == []
    assert _png_size(tmp_path / "report_nan.png")[0] == 1200


@pytest.mark.parametrize("name", ["empty", "mixed"])
def test_other_golden_reports_render_cleanly(open_page, tmp_path, name):
    view = open_page(GOLDEN / f"report_{name}.html", shot=f"report_{name}.png")
    page = view.page
    if name == "empty":
        assert page.locator("section.card.ok").is_visible()
        assert page.locator("section.card.primary").count() == 0
    else:
        assert view.texts("section.card.primary .head")[0] == (
            "ERRORshapemat1 and mat2 shapes cannot be multiplied (8x3 and 4x2) in <root> shape.matmul")
    assert page.locator("figure.chart").count() == 0
    assert view.problems == []
    width, height = _png_size(tmp_path / f"report_{name}.png")
    assert width == 1200 and height > 200


def _has_cjk_font():
    fc = shutil.which("fc-list")
    if fc is None:
        return False
    out = subprocess.run([fc, ":lang=zh", "family"], capture_output=True, text=True, timeout=30).stdout
    return bool(out.strip())


def test_chinese_report_draws_cjk_glyphs(open_page, tmp_path):
    view = open_page(GOLDEN / "report_nan_zh.html", shot="report_nan_zh.png")
    page = view.page
    assert page.locator("html").get_attribute("lang") == "zh-Hans"
    assert view.texts("h1") == ["torchtriage 诊断报告"]
    assert view.texts("main > h2")[:2] == ["首要问题", "其他发现"]
    family = page.evaluate("getComputedStyle(document.body).fontFamily")
    assert "Noto Sans CJK SC" in family and "WenQuanYi Micro Hei" in family and "Microsoft YaHei" in family
    assert view.problems == []
    if not _has_cjk_font():
        pytest.skip("no CJK font installed (make browser installs fonts-wqy-microhei): glyphs not checked")
    # Missing glyphs are all drawn as the same box; real glyphs differ from one another.
    page.evaluate("""() => { for (const [id, ch] of [["g1", "诊"], ["g2", "断"]]) {
        const s = document.createElement("span"); s.id = id; s.textContent = ch;
        s.style.cssText = "font-size: 48px; display: inline-block; background: #fff"; document.body.prepend(s); } }""")
    a = page.locator("#g1").screenshot()
    b = page.locator("#g2").screenshot()
    assert a != b


def test_two_models_tree_marks_the_module_in_the_model_that_produced_it(open_page, tmp_path):
    script = tmp_path / "distill.py"
    script.write_text('''\
import torch
import torch.nn as nn


class LogFeatures(nn.Module):
    def forward(self, x):
        return torch.log(x)  # 0 after the ReLU: -inf


torch.manual_seed(0)
teacher = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
student = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), LogFeatures(), nn.Linear(16, 1))
opt = torch.optim.SGD(student.parameters(), lr=0.01)
for step in range(3):
    x = torch.randn(32, 8)
    pred = student(x)
    with torch.no_grad():
        target = teacher(x)
    loss = nn.functional.mse_loss(pred, target)
    opt.zero_grad()
    loss.backward()
    opt.step()
''', encoding="utf-8")
    proc = run_cli("run", "--html", "r.html", "distill.py", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    view = open_page(tmp_path / "r.html", shot="two_models.png")
    trees = view.page.locator("ul.tree")
    assert trees.count() == 2
    roots = [t.split("\n")[0] for t in view.texts("ul.tree")]
    assert roots == ["student Sequential", "teacher Sequential"]
    student, teacher = trees.nth(0), trees.nth(1)
    assert student.locator(".mod.named").evaluate_all("els => els.map(e => e.title)") == ["2"]
    assert student.locator(".mod.named + .cls").inner_text() == "LogFeatures"
    assert student.locator(".mod.propagated").evaluate_all("els => els.map(e => e.title)") == ["3"]
    assert teacher.locator(".mod.named, .mod.propagated").count() == 0  # teacher's "2" is another Linear
    assert view.page.locator("figure.chart svg line.mark").count() == 3  # loss, grad_norm, lr (issue 19)
    assert view.problems == []
