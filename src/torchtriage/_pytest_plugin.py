"""pytest plugin (registered through the `pytest11` entry point).

Inert unless `--torchtriage` is given: then each test's call runs inside a discovering,
recording `Session`; a test that passed although its training code produced an error finding
fails with the report, and a test that failed gets the report as an extra output section.
Mark a test `@pytest.mark.torchtriage_off` to leave it alone.

The `triage` fixture works with or without the flag: it yields a `Session` (discover=True,
on_anomaly="record") that watches the models and optimizers the test builds, for assertions
such as `assert triage.report.ok, triage.report` or `triage.assert_ok()`. A failing assertion
shows the rendered report: `Report`'s repr is the text report, a comparison with a `Report`
on either side is explained by `pytest_assertrepr_compare`, and a failed test that used the
fixture gets the whole report as a "torchtriage" section (pytest shortens long reprs).
"""

from __future__ import annotations

import sys
from collections.abc import Generator, Iterator
from typing import Any

import pytest


def pytest_addoption(parser: Any) -> None:
    group = parser.getgroup("torchtriage")
    group.addoption("--torchtriage", action="store_true", default=False,
                    help="watch every test with torchtriage and fail tests whose run has an error finding")


def pytest_configure(config: Any) -> None:
    config.addinivalue_line("markers", "torchtriage_off: do not watch this test with --torchtriage")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: Any) -> Iterator[None]:
    if not item.config.getoption("--torchtriage", default=False) or item.get_closest_marker("torchtriage_off"):
        return (yield)
    from ._catalogue import msg
    from ._findings import Severity
    from ._session import Session
    from .report import render_text

    session = Session(discover=True, on_anomaly="record", report=False)
    # Inside a `triage` fixture's session this joins it; read the report of the one that is active.
    active = session.__enter__()
    try:
        result = yield
    except BaseException as exc:
        session.__exit__(type(exc), exc, exc.__traceback__)
        report = active.report
        if report.findings:
            item.add_report_section("call", "torchtriage", render_text(report))
        raise
    session.__exit__(None, None, None)
    report = active.report
    if any(f.severity is Severity.ERROR for f in report.findings):
        pytest.fail(msg("pytest.failed") + "\n" + render_text(report), pytrace=False)
    return result


_KEY = pytest.StashKey[Any]()


@pytest.fixture
def triage(request: Any) -> Iterator[Any]:
    """A `torchtriage.Session` watching what the test builds (discover=True, on_anomaly="record").

    Example:
        >>> def test_training_is_clean(triage):
        ...     model = build(); opt = torch.optim.SGD(model.parameters(), lr=0.1)
        ...     train(model, opt, steps=3)
        ...     triage.assert_ok()   # or: assert triage.report.ok, triage.report
    """
    from ._session import Session

    session = Session(discover=True, on_anomaly="record", report=False)
    active = session.__enter__()
    request.node.stash[_KEY] = active
    try:
        yield active
    finally:
        session.__exit__(None, None, None)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: Any, call: Any) -> Generator[None, Any, Any]:
    rep = yield
    session = item.stash.get(_KEY, None)
    if session is not None and call.when == "call" and rep.failed:
        from .report import render_text

        report = session.report
        if report.findings:
            rep.sections.append(("torchtriage report", render_text(report)))
    return rep


def pytest_assertrepr_compare(config: Any, op: str, left: Any, right: Any) -> list[str] | None:
    """`assert report == ...` / `assert ... in report` and similar: show the rendered report."""
    findings = sys.modules.get("torchtriage._findings")
    if findings is None:  # no Report exists yet: stay out of other projects' assertions
        return None
    reports = [x for x in (left, right) if isinstance(x, findings.Report)]
    if not reports:
        return None
    from .report import render_text

    lines = [f"{type(left).__name__} {op} {type(right).__name__} failed; the report:"]
    for report in reports:
        lines.extend(render_text(report).splitlines())
    return lines
