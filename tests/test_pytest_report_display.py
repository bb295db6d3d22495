"""A failing assertion on a report shows the report (issue 18): `repr(Report)` is the text
report, `triage.assert_ok()` fails with it, a failed test that used the `triage` fixture
gets it as a "torchtriage report" section, and comparisons involving a `Report` are
explained by the plugin's `pytest_assertrepr_compare`."""

from __future__ import annotations

from torchtriage import Finding, Report
from torchtriage.report import render_text

BROADCAST = '''
import torch
import torch.nn as nn


def train():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 4), torch.randn(16)
    for _ in range(2):
        loss = nn.functional.mse_loss(model(x), y)  # (16, 1) vs (16,)
        opt.zero_grad()
        loss.backward()
        opt.step()


def test_assert_ok(triage):
    train()
    triage.assert_ok()


def test_assert_idiom(triage):
    train()
    assert triage.report.ok, triage.report


def test_compare(triage):
    train()
    assert triage.report == type(triage.report)()


def test_clean_assert_ok(triage):
    torch.manual_seed(0)
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1))
    loss.backward()
    opt.step()
    triage.assert_ok()
'''

# fnmatch reads [..] as a character class: ? stands for each bracket
HEAD = "✗ ?silent? prediction ?16, 1? and target ?16? broadcast to ?16, 16? in mse_loss"


def test_repr_and_str_of_a_report_are_the_text_report():
    report = Report((Finding("numerical", "numerical.x", "loss became NaN", stage="loss", step=1),))
    assert repr(report) == str(report) == render_text(report)
    assert repr(Report()) == "== torchtriage report ==\nNo finding: nothing looked wrong in what torchtriage watched."


def test_failing_assertions_show_the_rendered_report(pytester):
    pytester.makepyfile(test_train=BROADCAST)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rN")
    result.assert_outcomes(passed=1, failed=3)
    out = result.stdout.str()
    # assert_ok(): the whole report is the AssertionError's message
    result.stdout.fnmatch_lines(["*def test_assert_ok(triage):*",
                                 "E       AssertionError: torchtriage found a problem in this test's training code:",
                                 "E       == torchtriage report ==",
                                 "E       -- Primary --",
                                 f"E       {HEAD}*",
                                 "*1 error(s), 0 warning(s), 0 info(s) over 2 step(s)"], consecutive=False)
    # `assert triage.report.ok, triage.report`: the report's repr is the report (pytest
    # shortens it), and the failed test gets the whole report as a section
    result.stdout.fnmatch_lines(["*def test_assert_idiom(triage):*",
                                 "E       AssertionError: == torchtriage report ==*",
                                 "*- torchtriage report -*",
                                 "== torchtriage report ==",
                                 "-- Primary --",
                                 HEAD + "*"], consecutive=False)
    # a comparison with a Report: the plugin's explanation
    result.stdout.fnmatch_lines(["*def test_compare(triage):*",
                                 "E       *assert Report == Report failed; "
                                 "the report:",  # "AssertionError: " only when not on CI
                                 "E         == torchtriage report ==",
                                 "E         -- Primary --",
                                 f"E         {HEAD}*"], consecutive=False)
    assert "Report(findings=(Finding(" not in out
