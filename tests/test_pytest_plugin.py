"""The pytest plugin end to end, in a subprocess pytest (`pytester`, requested in conftest.py):
inert without `--torchtriage`; with it, an error finding fails a passing test and is attached
to a failing one; `torchtriage_off`; the `triage` fixture."""

from __future__ import annotations

import pytest

TRAINING = '''
import pytest
import torch
import torch.nn as nn
import torchtriage


def train(steps=2, bad=False):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(torch.randn(8, 4)), torch.randn(8, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    session = torchtriage.current_session()
    if bad and session is not None:
        # Stands in for a check that found an error in this training code.
        session.add(torchtriage.Finding("numerical", "numerical.fake", "loss became NaN at step 1",
                                        stage="loss", step=1))
    return session


def test_clean():
    train()


def test_bad():
    train(bad=True)


@pytest.mark.torchtriage_off
def test_bad_but_off():
    assert train(bad=True) is None


def test_bad_and_failing():
    train(bad=True)
    assert False, "the test's own failure"


def test_session_sees_steps_and_model():
    session = train(steps=3)
    if session is not None:
        print("STEPS", session.report.meta["steps"], sorted(session.report.meta["models"]))
'''


@pytest.fixture
def project(pytester):
    pytester.makepyfile(test_training=TRAINING)
    return pytester


def test_inert_without_the_flag(project):
    result = project.runpytest_subprocess("-q", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=4, failed=1)  # only the test that fails by itself
    result.stdout.fnmatch_lines(["E       AssertionError: the test's own failure", "*", "*",
                                 "FAILED test_training.py::test_bad_and_failing - AssertionError*"])
    result.stdout.no_fnmatch_line("*torchtriage found*")


def test_flag_fails_tests_with_an_error_finding(project):
    result = project.runpytest_subprocess("-q", "-p", "no:cacheprovider", "--torchtriage", "-s")
    result.assert_outcomes(passed=3, failed=2)
    result.stdout.fnmatch_lines([
        "*torchtriage found an error in this test's training code:",
        "== torchtriage report ==",
        "-- Primary --",
        "✗ [numerical] loss became NaN at step 1",
        "    where: step=1  stage=loss",
    ])
    # The failing test keeps its own failure and gets the report as a section.
    result.stdout.fnmatch_lines(["*AssertionError: the test's own failure*",
                                 "*- Captured torchtriage call -*",
                                 "✗ [numerical] loss became NaN at step 1"])
    result.stdout.fnmatch_lines(["*STEPS 3 ?'model'?"])
    result.stdout.fnmatch_lines(["FAILED test_training.py::test_bad - Failed: torchtriage found an error*",
                                 "FAILED test_training.py::test_bad_and_failing - AssertionError*"],
                                consecutive=False)


def test_triage_fixture(pytester):
    pytester.makepyfile(test_fixture='''
import torch
import torch.nn as nn
import torchtriage


def test_watch(triage):
    assert torchtriage.current_session() is triage
    net = nn.Linear(3, 1)
    opt = torch.optim.Adam(net.parameters())
    for _ in range(2):
        opt.zero_grad()
        net(torch.randn(5, 3)).pow(2).mean().backward()
        opt.step()
    report = triage.report
    assert report.ok and report.meta["steps"] == 2
    assert report.meta["models"] == {"net": {"": "Linear"}}
    assert triage.optimizers == [opt]


SEEN = []


def test_fixture_session_is_closed_after(triage):
    SEEN.append(triage)


def test_no_session_left():
    from torchtriage._session import _active

    assert SEEN and SEEN[0] not in _active
''')
    for flags in ((), ("--torchtriage",)):
        result = pytester.runpytest_subprocess("-q", "-p", "no:cacheprovider", *flags)
        result.assert_outcomes(passed=3)


def test_plugin_is_registered_by_its_entry_point(pytestconfig):
    # This very run loaded it through `pytest11` and it stays off without the flag.
    assert pytestconfig.pluginmanager.hasplugin("torchtriage")
    assert pytestconfig.getoption("--torchtriage") is False
