"""Tensor contracts (issue 2 §3): named dims, literals, *, ..., dtype, device, contiguity."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
import torch.nn as nn

import torchtriage
from torchtriage import Category, ConfigError, ContractError, audit_tensor, expect
from zoo import forward as z

FORMS = ("accepted: a dim name (B, T, C, batch), a non-negative integer, '*' (any one dim), "
         "'...' (any number of dims), space- or comma-separated, or a tuple of names and ints")


def test_a_tensor_meeting_its_contract_gives_an_empty_report():
    x = torch.randn(2, 5, 8)
    r = audit_tensor(x, shape="B T C", dtype="float32", device="cpu", contiguous=True)
    assert r.findings == () and r.primary is None and r.meta["dims"] == {"B": 2, "T": 5, "C": 8}
    for spec in ("B ... C", "... 8", "* * *", "2 5 8", "B, T, C", (2, "T", 8), "B T C ..."):
        assert audit_tensor(x, shape=spec).findings == (), spec


def test_every_failed_field_is_named_and_the_first_to_fix_is_primary():
    x = torch.randn(2, 4, 8).transpose(1, 2).long()  # (2, 8, 4), int64, non-contiguous
    r = audit_tensor(x, shape="B 4 C", dtype=torch.float32, device="cpu", contiguous=True, dims={"C": 3}, name="x")
    assert [f.code for f in r] == ["contract.shape", "contract.dtype", "contract.contiguous"]
    assert [f.category for f in r] == [Category.SHAPE, Category.DTYPE, Category.LAYOUT]
    assert r.primary.message == "x: dim 1 is 8, expected 4"
    assert r.findings[1].message == "x: dtype is int64, expected float32"
    assert r.findings[2].message == "x: tensor is non-contiguous (stride (32, 1, 8)), expected contiguous"
    assert r.primary.evidence["dims"] == "C=3" and r.meta["failed"] == ["shape", "dtype", "contiguous"]


def test_named_dims_bind_consistently_and_ellipsis_and_ndim_errors():
    x = torch.randn(3, 4)
    assert audit_tensor(x, shape="N N").primary.message == "tensor: dim 1 is 4, but N was bound to 3"
    assert audit_tensor(x, shape="B T C").primary.message == "tensor: has 2 dims, expected 3"
    assert audit_tensor(x, shape="A ... B C").primary.message == "tensor: has 2 dims, expected at least 3"
    assert audit_tensor(x, shape="B 5").primary.message == "tensor: dim 1 is 4, expected 5"
    assert audit_tensor(x, device="meta").primary.message == "tensor: device is cpu, expected meta"
    assert (audit_tensor(x, dtype=("float16", torch.bfloat16)).primary.message
            == "tensor: dtype is float32, expected float16|bfloat16")


@pytest.mark.parametrize("shape, token", [("B T-1", "'T-1'"), ("B 3.5", "'3.5'"),
                                          (("B", -1), "-1"), (("B", 2.5), "2.5")])
def test_malformed_shape_names_the_bad_token_and_the_accepted_forms(shape, token):
    with pytest.raises(ConfigError, match=re.escape(f"shape spec {shape!r}: token {token} is not valid; {FORMS}")):
        audit_tensor(torch.zeros(1), shape=shape)


def test_other_malformed_specs():
    with pytest.raises(ConfigError, match=re.escape("shape spec 'B ... ...': '...' may appear at most once")):
        audit_tensor(torch.zeros(1), shape="B ... ...")
    with pytest.raises(ConfigError, match=re.escape("dtype 'flaot32' is not a torch dtype; accepted:")):
        audit_tensor(torch.zeros(1), dtype="flaot32")
    with pytest.raises(ConfigError, match=re.escape("device 'gpu' is not valid; accepted: 'cpu', 'cuda'")):
        audit_tensor(torch.zeros(1), device="gpu")
    with pytest.raises(ConfigError, match=re.escape("contiguous='yes' is not valid; accepted: True, False, None")):
        audit_tensor(torch.zeros(1), contiguous="yes")
    with pytest.raises(ConfigError, match=re.escape("contract fields layout are unknown; accepted: "
                                                    "shape, dtype, device, contiguous")):
        expect(nn.Linear(2, 2), inputs={"shape": "B C", "layout": "strided"})
    with pytest.raises(ConfigError, match=re.escape("on_fail='explode' is not valid; "
                                                    "accepted: 'raise', 'warn', 'record'")):
        expect(nn.Linear(2, 2), inputs="B C", on_fail="explode")
    with pytest.raises(TypeError, match="expect\\(\\) takes an nn.Module, got Tensor"):
        expect(torch.zeros(1), inputs="B C")


def test_expect_raises_naming_the_module_path_observed_expected_and_bindings():
    model = z.WrongInFeatures()
    # inputs and outputs of one call share bindings: B from the input must hold for the output
    with torchtriage.watch(model, checks=[], on_anomaly="record", report=False) as s:
        with expect(model.encoder, inputs="B 8", outputs="B 32"):
            with pytest.raises(ContractError) as info:
                model(torch.randn(4, 8))
    e = info.value
    assert str(e) == (
        "encoder (Sequential) output: dim 1 is 16, expected 32\n"
        "  observed: " + str(e.finding.evidence["observed"]) + "\n"
        '  expected: "B 32"\n'
        "  dims bound so far: B=4\n"
        "  other failed fields in this call: 0")
    assert e.failures == ("shape",) and e.finding.module == "encoder" and e.finding.code == "contract.shape"
    assert s.report.primary.code == "contract.shape"  # recorded in the session; no duplicate "other" finding
    assert len(s.report.findings) == 1


def test_named_dims_are_shared_between_inputs_of_one_call():
    class Attn(nn.Module):
        def forward(self, q, k):
            return q @ k.transpose(-1, -2)

    m = Attn()
    h = expect(m, inputs={"q": "B T D", "k": "B S D"}, outputs="B T S", name="attn")
    m(torch.randn(2, 3, 4), torch.randn(2, 5, 4))  # fine: T=3, S=5
    with pytest.raises(ContractError, match=re.escape("attn (Attn) input k: dim 2 is 6, but D was bound to 4")):
        m(torch.randn(2, 3, 4), k=torch.randn(2, 5, 6))
    h.remove()
    with pytest.raises(RuntimeError):  # the contract is gone: PyTorch's own error now
        m(torch.randn(2, 3, 4), torch.randn(2, 5, 6))


def test_expect_warn_and_record_modes_and_clean_calls():
    m = nn.Linear(8, 4)
    with expect(m, inputs=("B 8",), outputs={"shape": "B 4", "dtype": "float32"}, on_fail="record", name="fc") as h:
        m(torch.randn(3, 8))
        assert h.findings == []
        m(torch.randn(3, 8).t().contiguous().t())  # non-contiguous is fine: not in the contract
        assert h.findings == []
    with expect(m, inputs={"shape": "B 8", "contiguous": True}, on_fail="warn", name="fc"):
        with pytest.warns(torchtriage.TriageWarning, match=re.escape("fc (Linear) input[0]: tensor is non-contiguous")):
            m(torch.randn(8, 3).t())
    with expect(m, inputs="B 8", on_fail="record") as h:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            m(torch.randn(3, 8).double().float())
            m(torch.randn(3, 8)[:, :8])
    assert h.findings == []


def test_a_contract_error_inside_forward_does_not_break_the_next_call():
    m = nn.Sequential(nn.Linear(8, 4))
    h = expect(m[0], inputs="B 8", outputs="B 4", name="fc")
    with pytest.raises(ContractError):
        m(torch.randn(2, 7))
    m(torch.randn(2, 8))
    assert h._stack == []
    h.remove()


def test_dims_bound_by_the_inputs_hold_for_tuple_outputs_and_reset_between_calls():
    class Split(nn.Module):
        def forward(self, x, mask):
            return x[:, :-1], mask.float()  # the first output drops a time step

    m = Split()
    with torchtriage.watch(m, checks=[], on_anomaly="record", report=False):
        with expect(m, inputs={"x": "B T C", "mask": "B T"}, outputs=("B T C", "B T")):
            with pytest.raises(ContractError, match=re.escape(
                    "Split output[0]: dim 1 is 4, but T was bound to 5\n")) as info:
                m(torch.randn(2, 5, 3), torch.ones(2, 5))
            with pytest.raises(ContractError, match=re.escape("Split input mask: dim 1 is 4, but T was bound to 3")):
                m(torch.randn(2, 3, 3), torch.ones(2, 4))  # a new call binds T afresh (to 3)
    f = info.value.finding
    assert (f.category, f.code, f.stage, f.module, f.evidence["dims"]) == (
        Category.SHAPE, "contract.shape", torchtriage.Stage.FORWARD, "", "B=2, T=5, C=3")
