"""The public surface: `__all__` is sorted and is exactly the public names; public classes
are re-homed to `torchtriage` so tracebacks and reprs print `torchtriage.X`."""

from __future__ import annotations

import inspect
import types

import torchtriage


def _public_names():
    # Names resolve lazily (PEP 562): the public ones are those `dir()` lists plus what the
    # module namespace already holds, minus submodules.
    names = set(dir(torchtriage)) | set(vars(torchtriage))
    return {name for name in names
            if not name.startswith("_") and not isinstance(getattr(torchtriage, name), types.ModuleType)}


def test_every_public_name_resolves_and_unknown_names_raise():
    for name in torchtriage.__all__:
        assert getattr(torchtriage, name) is not None
    import pytest

    with pytest.raises(AttributeError, match="module 'torchtriage' has no attribute 'nope'"):
        torchtriage.nope  # noqa: B018


def test_all_lists_every_export():
    assert set(torchtriage.__all__) == set(torchtriage._EXPORTS)


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
