"""Acceptance cases for the non-finite sentinel: nested modules, odd outputs, weight sharing,
checkpointing, bfloat16 autocast, library attention, skip_step with momentum, flat memory."""

from __future__ import annotations

import gc

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from tests.zoo import nonfinite as zoo

import torchtriage
from torchtriage import Severity, Stage


def _watch(model, opt=None, **kw):
    kw.setdefault("on_anomaly", "record")
    return torchtriage.watch(model, opt, checks=["nonfinite"], report=False, **kw)


def _errors(s):
    return [f for f in s.report.findings if f.severity is not Severity.INFO]


def _train(model, opt, batches, pick=lambda out: out, target=None):
    for x in batches:
        out = pick(model(x))
        loss = F.mse_loss(out, torch.zeros_like(out) if target is None else target)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return loss


def test_nan_born_in_a_module_list_inside_a_module_dict_names_producer_and_propagators():
    torch.manual_seed(0)
    model = zoo.ExpOverflowInNestedBlocks()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with _watch(model, opt) as s:
        _train(model, opt, [torch.randn(4, 8) * 3] * 2, pick=lambda out: out["out"])
    (f,) = _errors(s)
    assert (f.code, f.stage, f.step, f.module, f.op) == ("numerical.nonfinite_forward", Stage.FORWARD, 0,
                                                        "stages.enc.1", "aten::exp")
    assert f.file.endswith("zoo/nonfinite.py")
    assert f.evidence["source_line"] == "return torch.exp(self.fc(x) * 100)  # BUG: exp of scores far above 88.7"
    assert f.message == "+Inf first produced by aten::exp in module stages.enc.1 during the forward pass (step 0)"
    # the producer is not a propagator; modules downstream are, in execution order
    assert f.evidence["propagated_by"] == ["stages.enc.2", "stages.enc.2.fc", "head"]
    assert f.evidence["largest input"] > 88.72


def test_propagators_are_marked_in_the_html_model_tree():
    from torchtriage._render._tree import marks

    torch.manual_seed(0)
    model = zoo.ExpOverflowInNestedBlocks()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with _watch(model, opt) as s:
        _train(model, opt, [torch.randn(4, 8) * 3], pick=lambda out: out["out"])
    (label, paths), = s.report.meta["models"].items()
    got = {k: v[0] for k, v in marks(s.report.findings, label, paths).items()}
    assert got == {"stages.enc.1": "named", "stages.enc.2": "propagated", "stages.enc.2.fc": "propagated",
                   "head": "propagated"}


def test_dataclass_output_weight_sharing_and_checkpointing_are_localized():
    cases = [
        (zoo.DataclassOutputLogOfNegative(), lambda out: out.value, "act", "aten::log",
         "return torch.log(x)  # BUG: log(0) for the zeros the ReLU made", "NaN"),
        (zoo.SharedLayerSqrtOfNegative(), lambda out: out, "", "aten::sqrt",
         "return torch.sqrt(h - 5).sum(-1, keepdim=True)  # BUG: sqrt of a negative number", "NaN"),
        (zoo.CheckpointedZeroDivision(), lambda out: out, "block.1", "aten::div",
         "return x / (x - x)  # BUG: division by zero", "NaN/Inf"),
    ]
    for model, pick, module, op, line, kind in cases:
        torch.manual_seed(0)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        with _watch(model, opt) as s:
            _train(model, opt, [torch.randn(4, 4)] * 2, pick=pick)
        (f,) = _errors(s)
        assert ((f.code, f.stage, f.step, f.module, f.op)
                == ("numerical.nonfinite_forward", Stage.FORWARD, 0, module, op))
        assert f.evidence["source_line"] == line
        where = "<root>" if module == "" else module
        assert f.message == f"{kind} first produced by {op} in module {where} during the forward pass (step 0)"
        assert f.count == 2


def test_bfloat16_autocast_overflow_explains_the_dtype():
    torch.manual_seed(0)
    model = zoo.ExpUnderBfloat16Autocast()
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with _watch(model, opt) as s:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = model(torch.randn(8, 4) * 5)
        loss = F.mse_loss(out.float(), torch.zeros(8, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    (f,) = _errors(s)
    assert (f.code, f.stage, f.module, f.op) == ("numerical.nonfinite_forward", Stage.FORWARD, "", "aten::exp")
    assert f.evidence["source_line"] == "return self.head(torch.exp(h * 30))  # BUG: exp overflows past 88.7"
    assert f.cause.startswith("exp overflows: its input exceeds log(max of bfloat16) = 88.72")
    assert f.evidence["propagated_by"] == ["head"]


def test_hand_written_loss_log_of_zero_is_a_loss_finding():
    torch.manual_seed(0)
    model = zoo.ProbabilityNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(32, 4), F.one_hot(torch.randint(0, 3, (32,)), 3).float()
    with _watch(model, opt) as s:
        loss = zoo.hand_written_cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    (f,) = _errors(s)
    assert (f.code, f.stage, f.step, f.op) == ("numerical.nonfinite_loss", Stage.LOSS, 0, "aten::log")
    assert f.message == "The loss is NaN although the model outputs are finite; first produced by aten::log (step 0)"
    assert f.evidence["zeros in input"] > 0 and "clamp" in f.next_check
    assert f.evidence["backward called at"].endswith("test_nonfinite_acceptance.py:" + str(
        test_hand_written_loss_log_of_zero_is_a_loss_finding.__code__.co_firstlineno + 8))


def test_binary_cross_entropy_clamps_its_log_so_a_zero_probability_is_no_finding():
    torch.manual_seed(0)
    model = zoo.ProbabilityNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with _watch(model, opt) as s:
        loss = F.binary_cross_entropy(model(torch.randn(32, 4)), F.one_hot(torch.randint(0, 3, (32,)), 3).float())
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert torch.isfinite(loss) and s.report.findings == ()


@pytest.mark.parametrize("net", ["mha", "sdpa"])
def test_library_attention_with_a_padding_mask_is_quiet(net):
    torch.manual_seed(0)
    x, y = torch.randn(2, 5, 8), torch.randn(2, 1)
    if net == "mha":
        model, mask = zoo.MultiheadAttentionNet(), torch.tensor([[False] * 3 + [True] * 2, [False] * 5])
    else:
        model, mask = zoo.SdpaAttentionNet(), torch.tensor([[True] * 3 + [False] * 2, [True] * 5])
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    with _watch(model, opt) as s:
        for _ in range(2):
            loss = F.mse_loss(model(x, mask), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert s.report.findings == ()


def test_multihead_attention_fully_masked_row_is_a_finding():
    torch.manual_seed(0)
    model = zoo.MultiheadAttentionNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    pad = torch.tensor([[True] * 5, [False] * 5])  # row 0: only padding
    with _watch(model, opt) as s:
        loss = F.mse_loss(model(torch.randn(2, 5, 8), pad), torch.randn(2, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    (f,) = _errors(s)
    assert (f.code, f.stage, f.step, f.module, f.op) == ("numerical.fully_masked_row", Stage.FORWARD, 0, "attn",
                                                        "aten::_softmax")
    assert f.evidence["source_line"] == "o, _ = self.attn(x, x, x, key_padding_mask=key_padding_mask)"
    assert f.message == ("A fully masked attention row: aten::_softmax over a row where every score is -inf "
                         "gives NaN, in module attn (step 0)")


@pytest.mark.parametrize("make", [lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
                                  lambda p: torch.optim.Adam(p, lr=0.01)], ids=["sgd_momentum", "adam"])
def test_skip_step_leaves_parameters_and_state_bitwise_unchanged_then_training_goes_on(make):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = make(model.parameters())
    bad = torch.randn(8, 4)
    bad[0, 0] = float("nan")
    with _watch(model, opt, on_anomaly="skip_step") as s:
        _train(model, opt, [torch.randn(8, 4)] * 2, target=torch.randn(8, 1))
        params = [p.detach().clone() for p in model.parameters()]
        state = [[v.clone() if torch.is_tensor(v) else v for v in st.values()] for st in opt.state.values()]
        _train(model, opt, [bad], target=torch.randn(8, 1))
        assert all(torch.equal(a, b) for a, b in zip(params, model.parameters()))
        after = [list(st.values()) for st in opt.state.values()]
        assert all(torch.equal(a, b) if torch.is_tensor(a) else a == b
                   for ra, rb in zip(state, after) for a, b in zip(ra, rb))
        last = _train(model, opt, [torch.randn(8, 4)], target=torch.randn(8, 1))
    assert torch.isfinite(last) and all(bool(torch.isfinite(p).all()) for p in model.parameters())
    assert [(f.code, f.stage, f.step) for f in _errors(s)] == [("numerical.nonfinite_data", Stage.DATA, 2)]


def test_memory_stays_flat_over_many_steps():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def live_tensors():
        gc.collect()
        return sum(1 for o in gc.get_objects() if isinstance(o, torch.Tensor))

    with _watch(model, opt) as s:
        _train(model, opt, [torch.randn(4, 8) for _ in range(20)])
        before = live_tensors()
        loss = _train(model, opt, [torch.randn(4, 8) for _ in range(300)])
        node = loss.grad_fn
        del loss
        after = live_tensors()
        checker = s.checker("nonfinite")
    assert after <= before + 2  # the last batch and its output, at most
    assert node is not None and not checker._step.outputs and not checker._step.loss_nodes
    assert s.report.findings == () and len(s.series["loss"]) == 320
