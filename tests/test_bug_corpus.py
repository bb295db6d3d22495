"""Real training loops with one real bug each (`tests/bugs/`, copied from `tests/corpus/` and
mutated the way users write the bug): each runs under the default checks and must get the
expected finding as the report's primary one (code, severity, module / parameter, the user's
line marked `# <- bug` in the case's file), and nothing else loud. A gap of today's checks is an
`xfail(strict=True)` whose reason says what is missing: it flips when the check is fixed.

Modes: "watch" is `torchtriage.watch(models, optimizers)` around the loop, the objects built
before the session (as a user wraps an existing loop); "discover" is the session of
`torchtriage run`, which sees the script build its data, models and optimizers (splits made
with `random_split` are only seen this way, and so is the line that built an optimizer).
"""

from __future__ import annotations

import dataclasses
import functools
import gc
import json
import re
import warnings
from pathlib import Path

import pytest
import torch

import bugs
import torchtriage
from conftest import run_cli
from torchtriage import Severity, TriageInternalWarning
from torchtriage._session import Session


@dataclasses.dataclass(frozen=True)
class Expect:
    code: str
    severity: str
    module: str | None = None  # None: not asserted (the finding is not about one module)
    parameter: str | None = None
    line: bool = True  # the finding names the `# <- bug` line of the case's bug file
    mode: str = "watch"
    mentions: tuple[str, ...] = ()  # words the message, cause or next check must hold
    gap: str | None = None  # why today's primary finding is not the expected one
    noise: str | None = None  # why today's report holds more loud findings than the bug's


W, E = "warning", "error"
EXPECT: dict[str, Expect] = {
    "mnist_no_zero_grad": Expect("silent.zero_grad_missing", E, parameter="conv1.weight"),
    "quickstart_softmax_before_ce": Expect("silent.probabilities_to_cross_entropy", E, module="linear_relu_stack.5"),
    "dqn_mse_broadcast": Expect("silent.loss_broadcast", E),
    "vae_log_of_negative": Expect("numerical.nonfinite_loss", E),
    "nanogpt_eval_left_on": Expect("silent.eval_mode_while_training", W, module=""),
    "glue_param_group_missing": Expect("gradient.not_in_optimizer", E, module="classifier",
                                       parameter="classifier.weight", mode="discover"),
    "cifar10_stale_optimizer": Expect("gradient.optimizer_stale", E, mode="discover"),
    "transfer_frozen_head": Expect("gradient.loss_no_grad_fn", E),
    "mnist_rnn_bn_batch_of_one": Expect("shape.batchnorm_one_sample", E, module="batchnorm"),
    "gan_fake_not_detached": Expect("gradient.backward_twice", E, mentions=("gen_imgs",)),
    "fabric_log_softmax_dim0": Expect("silent.softmax_over_batch", W, module=""),
    "wordlm_retain_graph": Expect("silent.loss_graph_kept", W),
    "dcgan_int_labels": Expect("dtype.loss_target", E, module="BCELoss"),
    "reinforce_loss_rebuilt": Expect("gradient.cut_to_python", E, module="affine1", parameter="affine1.weight"),
    "mnist_test_in_train": Expect("data.heldout_trained", E, mode="discover"),
    "text_ngrams_valid_in_train": Expect("data.heldout_trained", E, mode="discover"),
    "kd_student_under_no_grad": Expect("gradient.loss_no_grad_fn", E),
    "ppo_minibatch_of_one": Expect("numerical.nonfinite_loss", E),
    "transformer_lm_loss_accumulated": Expect("silent.loss_graph_kept", W),
    "transformer_lm_mask_short_batch": Expect(
        "shape.size", E, module="transformer_encoder.layers.0.self_attn"),
    "resnet_lr_floor_division": Expect("gradient.lr_zero", W, mode="discover"),
    "resnet_eval_left_on": Expect("silent.eval_mode_while_training", W, module=""),
    "ner_num_labels_too_small": Expect("data.target_range", E, module="CrossEntropyLoss"),
    "lightning_ae_zero_std": Expect("numerical.nonfinite_data", E),
    "mingpt_adder_softmax_dim": Expect("silent.attention_sees_future", E, module="transformer.h.0.attn",
                                       mentions=("softmax",)),
}


# The same case in the other mode, where the answer differs from the case's own mode.
OTHER_MODE: dict[str, str | None] = {
    # (session 12: a no_grad op that gives the leaf back, an init's fill_, cuts nothing: fixed)
    "transfer_frozen_head": None,
    "mnist_test_in_train": None,
    "cifar10_stale_optimizer": None,
    "glue_param_group_missing": None,
    # the same answer in both modes (consequences folded, graphs read from autograd): kept as tests
    "ppo_minibatch_of_one": None,
    "gan_fake_not_detached": None,
    "kd_student_under_no_grad": None,
    "lightning_ae_zero_std": None,
    "wordlm_retain_graph": None,
}


def test_every_case_has_an_expectation_and_a_header():
    assert sorted(EXPECT) == bugs.CASES
    for name in bugs.CASES:
        doc = bugs.load(name).__doc__ or ""
        for field in ("Source: ", "commit ", "Mutation: ", "Expected: "):
            assert field in doc, f"{name}: the header must say {field.strip()!r}"
        bugs.bug_line(name)


def _loud(report):
    return [f for f in report if f.severity is not Severity.INFO]


def _other(mode: str) -> str:
    return "discover" if mode == "watch" else "watch"


@functools.cache
def _run(name: str, mode: str | None = None):
    mode = mode or EXPECT[name].mode
    mod = bugs.load(name)
    for need in getattr(mod, "NEEDS", ()):
        pytest.importorskip(need)
    torch.manual_seed(0)
    raised = None
    # Reference cycles are collected when the collector happens to run, which depends on what
    # ran before in this process: with the collector off, a graph that only a cycle keeps alive
    # is alive at every check, so the answer does not depend on test order.
    gc.collect()
    gc.disable()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            if mode == "watch":
                models, optimizers, train = mod.build()
                with torchtriage.watch(models, optimizers, on_anomaly="record", report=False) as s:
                    train()
            else:
                with Session(discover=True, on_anomaly="record", report=False) as s:
                    mod.build()[2]()
        except Exception as e:  # the user's own error, re-raised after the report
            raised = (type(e), str(e))  # not the exception: its traceback would keep the frames alive
        finally:
            gc.enable()
    internal = [str(w.message) for w in caught if issubclass(w.category, TriageInternalWarning)]
    return s.report, raised, internal


def _mark(name: str, field: str):
    reason = getattr(EXPECT[name], field)
    return pytest.param(name, marks=pytest.mark.xfail(strict=True, reason=reason)) if reason else name


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=r)) if r else n
                                  for n, r in OTHER_MODE.items()])
def test_bug_in_the_other_mode(name):
    report, _, internal = _run(name, _other(EXPECT[name].mode))
    assert not internal, internal
    _primary_matches(name, report.primary)


def _primary_matches(name: str, f) -> None:
    want = EXPECT[name]
    assert f is not None, f"{name}: no finding at all"
    assert (f.code, f.severity.value) == (want.code, want.severity), f"{name}: primary {f.code} ({f.severity})"
    if want.module is not None:
        assert f.module == want.module, f"{name}: module {f.module!r}"
    if want.parameter is not None:
        assert f.parameter == want.parameter, f"{name}: parameter {f.parameter!r}"
    text = " ".join((f.message, f.cause or "", f.next_check or ""))
    for word in want.mentions:
        assert word in text, f"{name}: {word!r} not in {text!r}"
    if want.line:
        assert (Path(f.file or "").resolve(), f.line) == (bugs.bug_file(name).resolve(), bugs.bug_line(name)), \
            f"{name}: line {f.file}:{f.line}"


@pytest.mark.parametrize("name", [_mark(n, "gap") for n in EXPECT])
def test_bug_is_the_primary_finding(name):
    report, _, internal = _run(name)
    assert not internal, internal
    _primary_matches(name, report.primary)


@pytest.mark.parametrize("name", [_mark(n, "noise") for n in EXPECT if not EXPECT[n].gap or EXPECT[n].noise])
def test_one_bug_one_loud_finding(name):
    """A consequence of the first anomaly (NaN parameters, a failing backward) is not a second problem."""
    report, _, _ = _run(name)
    loud = _loud(report)
    assert [f.code for f in loud] == [EXPECT[name].code], str(report)


def test_the_users_error_is_reraised():
    """Cases whose bug raises: the user's exception still propagates after the report."""
    _, raised, _ = _run("mnist_rnn_bn_batch_of_one")
    assert raised is not None and raised[0] is ValueError and "Expected more than 1 value per channel" in raised[1]


CLI_SCRIPT = """\
import gc
import sys
gc.disable()  # as in _run: what only a reference cycle keeps alive is seen whatever the collector's timing
sys.path.insert(0, {tests!r})
from bugs import {name}
{name}.build()[2]()
"""


@pytest.mark.parametrize("name", ["dqn_mse_broadcast", "cifar10_stale_optimizer", "mnist_rnn_bn_batch_of_one",
                                  "vae_log_of_negative"])
def test_bug_through_the_cli(tmp_path, name):
    """`torchtriage run` on the unchanged loop: the same primary finding in the JSON report and
    nothing else loud, the script's exit status (1 when it raised), the primary on stderr."""
    script = tmp_path / "train.py"
    script.write_text(CLI_SCRIPT.format(tests=str(Path(__file__).parent), name=name), encoding="utf-8")
    out = tmp_path / "report.json"
    p = run_cli("run", "--json", str(out), str(script), cwd=tmp_path, timeout=120)
    assert p.returncode == (1 if name == "mnist_rnn_bn_batch_of_one" else 0), p.stderr[-2000:]
    data = json.loads(out.read_text(encoding="utf-8"))
    first = data["findings"][0]
    assert (first["code"], first["severity"]) == (EXPECT[name].code, EXPECT[name].severity), first
    assert (Path(first["file"]).resolve(), first["line"]) == (bugs.bug_file(name).resolve(), bugs.bug_line(name))
    assert "-- Primary --" in p.stderr and first["code"].split(".")[0] in p.stderr
    loud = [f["code"] for f in data["findings"] if f["severity"] != "info"]
    assert loud == [EXPECT[name].code], loud


def _frames(stderr: str) -> list[str]:
    """The traceback's `File ...` lines. `nn.Module._call_impl` runs its hooked path (another
    line of the same frame) while any module hook is registered, as `run`'s discovery hooks are
    in the first steps: its line number is left out."""
    tb = stderr[stderr.rindex("Traceback (most recent call last):"):]
    lines = [line.strip() for line in tb.splitlines() if line.strip().startswith("File ")]
    return [re.sub(r", line \d+, in _call_impl$", ", in _call_impl", line) for line in lines]


def test_cli_traceback_is_the_scripts_own(tmp_path):
    """The re-raised error's traceback is the one `python SCRIPT` prints: no frames that only
    exist because torchtriage watched the run (ours, nor torch's `handle_torch_function` pairs
    our TorchFunctionModes cause, nor the `inner` frame of a module call our hooks alone cause)."""
    import subprocess
    import sys

    script = tmp_path / "train.py"
    script.write_text(CLI_SCRIPT.format(tests=str(Path(__file__).parent), name="dcgan_int_labels"), encoding="utf-8")
    plain = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    watched = run_cli("run", str(script), cwd=tmp_path, timeout=120)
    assert plain.returncode == watched.returncode == 1
    assert any("in binary_cross_entropy" in f for f in _frames(plain.stderr)), plain.stderr
    assert _frames(watched.stderr) == _frames(plain.stderr)
