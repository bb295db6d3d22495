"""The public surface: `__all__` is sorted and is exactly the public names; public classes
are re-homed to `torchtriage` so tracebacks and reprs print `torchtriage.X`."""

from __future__ import annotations

import inspect
import types

import torchtriage


def _public_names():
    return {name for name, value in vars(torchtriage).items()
            if not name.startswith("_") and not isinstance(value, types.ModuleType)}


def test_all_is_sorted():
    assert torchtriage.__all__ == sorted(torchtriage.__all__)


def test_all_equals_the_public_names():
    assert set(torchtriage.__all__) == _public_names()
    assert len(torchtriage.__all__) == len(set(torchtriage.__all__))


def test_public_classes_live_in_torchtriage():
    wrong = {name: obj.__module__ for name in torchtriage.__all__
             if inspect.isclass(obj := getattr(torchtriage, name)) and obj.__module__ != "torchtriage"}
    assert wrong == {}


def test_report_namespace():
    import torchtriage.report as report

    assert report.__all__ == sorted(report.__all__)
    for name in report.__all__:
        assert callable(getattr(report, name)), name
    assert report.render_html.__name__ == "render_html"
