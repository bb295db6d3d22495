"""One implementation of each piece of frame machinery (issue 16): the patch facility, the stack
walker, the finding builder, the non-finite predicate, the model's device."""

from __future__ import annotations

import sys

import torch
import torch.nn as nn

import torchtriage
from torchtriage._findings import Category, Severity, Stage, from_catalogue
from torchtriage._frames import UserFrame, find_frame, user_frame_from_stack
from torchtriage._nonfinite._trace import nonfinite
from torchtriage._params import model_device
from torchtriage._patching import Patches, wrapper


class _Base:
    def hello(self) -> str:
        return "base"


class _Child(_Base):
    pass


def test_patches_restore_in_reverse_and_delete_an_inherited_attribute_again():
    patches = Patches()
    patches.patch(_Child, "hello", lambda self: "first")
    patches.patch(_Child, "hello", lambda self: "second")
    assert _Child().hello() == "second" and patches.patched(_Child, "hello")
    patches.restore_all()
    assert "hello" not in vars(_Child)  # inherited before: deleted, not copied onto the class
    assert _Child().hello() == "base" and not patches.patched(_Child, "hello")


def test_a_patch_restored_sooner_leaves_the_others():
    patches = Patches()
    restore = patches.patch(_Base, "hello", lambda self: "patched")
    patches.patch(_Child, "hello", lambda self: "child")
    restore()
    assert _Base().hello() == "base" and _Child().hello() == "child"
    restore()  # twice: nothing left to restore
    patches.restore_all()
    assert _Child().hello() == "base" and "hello" not in vars(_Child)


def test_session_patch_restores_an_inherited_attribute_by_deleting_it():
    with torchtriage.watch(nn.Linear(2, 2), report=False) as session:
        restore = session.patch(_Child, "hello", lambda self: "watched")
        assert _Child().hello() == "watched"
        restore()
        assert "hello" not in vars(_Child) and _Child().hello() == "base"
        session.patch(_Child, "hello", lambda self: "until exit")
    assert "hello" not in vars(_Child) and _Child().hello() == "base"


def test_wrapper_keeps_the_name_and_hands_over_the_original():
    seen = []

    def around(original, *args, **kwargs):
        seen.append(args)
        return original(*args, **kwargs) + 1

    def add(a, b):
        return a + b

    wrapped = wrapper(add, around)
    assert wrapped(1, b=2) == 4 and seen == [(1,)] and wrapped.__name__ == "add"


def _outer_marker():
    return _inner()


def _inner():
    return find_frame(lambda f: f.f_code.co_name == "_outer_marker", sys._getframe(0))


def test_find_frame_walks_outward_within_depth_and_stop():
    assert _outer_marker().f_code.co_name == "_outer_marker"
    here = sys._getframe(0)
    assert find_frame(lambda f: f is here, sys._getframe(0), depth=1) is here
    assert find_frame(lambda f: f.f_code.co_name == "_outer_marker", sys._getframe(0)) is None
    assert find_frame(lambda f: True, None) is None
    assert find_frame(lambda f: True, here, stop=here) is None


def test_user_frame_from_stack_names_this_line():
    frame = user_frame_from_stack(1)
    assert frame is not None and frame.file == __file__
    assert frame.function == "test_user_frame_from_stack_names_this_line"
    assert frame.source == "frame = user_frame_from_stack(1)"


def test_from_catalogue_fills_the_texts_and_the_users_line():
    frame = UserFrame("train.py", 12, "main", "loss = crit(out, y)")
    f = from_catalogue(Category.DATA, "data.id_column", "leakage.id.message", fields={"column": "row_id"},
                       cause_key="leakage.id.cause", next_key="leakage.id.next", frame=frame,
                       evidence={"column": "row_id"}, source_line=True, severity="info", stage="data")
    from torchtriage._catalogue import msg

    assert (f.message, f.cause, f.next_check) == (msg("leakage.id.message", column="row_id"),
                                                  msg("leakage.id.cause", column="row_id"),
                                                  msg("leakage.id.next", column="row_id"))
    assert (f.file, f.line, f.severity, f.stage) == ("train.py", 12, Severity.INFO, Stage.DATA)
    assert dict(f.evidence) == {"column": "row_id", "source_line": "loss = crit(out, y)"}
    g = from_catalogue(Category.DATA, "data.id_column", "leakage.id.message", fields={"column": "c"},
                       cause="given text")
    assert (g.cause, g.next_check, g.file, g.line, dict(g.evidence)) == ("given text", "", None, None, {})


def test_nonfinite_any_kind_and_the_trip_rule():
    masked = torch.tensor([0.0, -float("inf")])
    assert nonfinite(masked) and not nonfinite(masked, any_kind=False)  # -Inf: a mask, not a trip
    assert nonfinite(torch.tensor([1.0, float("nan")]), any_kind=False)
    assert nonfinite(torch.tensor([float("inf")]), any_kind=False)
    assert not nonfinite(torch.ones(3))
    assert nonfinite(torch.tensor([complex(0, float("inf"))]), any_kind=False)


def test_model_device_parameters_then_buffers_then_cpu():
    assert model_device(nn.Linear(2, 2)) == torch.device("cpu")
    assert model_device(nn.Sequential()) == torch.device("cpu")
    only_buffers = nn.BatchNorm1d(3, affine=False).to(torch.float64)
    assert model_device(only_buffers) == torch.device("cpu")
    meta = nn.Module()
    meta.register_buffer("b", torch.empty(2, device="meta"))
    assert model_device(meta) == torch.device("meta")
