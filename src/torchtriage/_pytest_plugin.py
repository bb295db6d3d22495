"""pytest plugin (registered through the `pytest11` entry point); inert unless `--torchtriage`
is given: then each test runs inside a `torchtriage.watch` session that discovers models and
optimizers, and a test whose training code produced an error finding fails with the report."""

from __future__ import annotations

from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("torchtriage")
    group.addoption("--torchtriage", action="store_true", default=False,
                    help="watch every test with torchtriage and fail tests whose run has an error finding")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item: Any) -> Any:
    if not item.config.getoption("--torchtriage", default=False) or item.get_closest_marker("torchtriage_off"):
        yield
        return
    from ._findings import Severity
    from ._session import Session

    session = Session(discover=True, on_anomaly="record", report=False)
    with session:
        outcome = yield
    report = session.report
    errors = [f for f in report.findings if f.severity is Severity.ERROR]
    if errors and outcome.excinfo is None:
        from .report import render_text

        pytest.fail("torchtriage found an error in this test's training code:\n" + render_text(report),
                    pytrace=False)


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "torchtriage_off: do not watch this test with --torchtriage")
