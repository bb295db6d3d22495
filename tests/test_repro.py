"""Repro bundles: written once at the first failure, safe to open, replayable, shrinkable."""

from __future__ import annotations

import json
import os
import pickle
import re

import pytest
import torch
import torch.nn as nn

import torchtriage
from torchtriage import BundleError
from torchtriage._repro import _safetensors
from torchtriage._repro._shrink import ddmin
from zoo.repro import (
    ClampedNorm,
    NonFiniteOutputFlag,
    PoisonedTokenRow,
    RaisesOnNegativeSample,
    ZeroNormDivides,
    zero_sample_batch,
)


def _read(path):
    with open(path) as fh:
        return json.load(fh)


def _write(path, obj):
    with open(path, "w") as fh:
        json.dump(obj, fh)


def _make(cls=ZeroNormDivides):
    torch.manual_seed(3)
    model = cls()
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _train_with_poison(bundle_dir, *, poisoned_step=1, steps=3, **options):
    """Train 3 steps; the batch of `poisoned_step` holds one all-zero sample (index 37)."""
    model, opt = _make()
    before = {}
    with torchtriage.watch(model, opt, checks=[NonFiniteOutputFlag(), "repro"], bundle_dir=bundle_dir,
                           on_anomaly="record", report=False, **options) as s:
        for step in range(steps):
            x, y = zero_sample_batch(64, 37, seed=step)
            if step != poisoned_step:
                x[37] = 1.0
            if step == poisoned_step:
                before = {k: v.clone() for k, v in model.state_dict().items()}
                before["rng"] = torch.get_rng_state()
                before["x"], before["y"] = x.clone(), y.clone()
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s, before


@pytest.fixture
def bundle(tmp_path, capsys):
    _train_with_poison(tmp_path / "b")
    capsys.readouterr()
    return torchtriage.load_bundle(tmp_path / "b")


def _factory(cls=ZeroNormDivides):
    def make():
        model, opt = _make(cls)
        return {"model": model, "optimizer": opt, "checks": [NonFiniteOutputFlag()]}
    return make


# ---------------------------------------------------------------- writing
def test_bundle_holds_the_failing_step_before_its_update(tmp_path, capsys):
    s, before = _train_with_poison(tmp_path / "b")
    err = capsys.readouterr().err
    assert err.count("repro bundle written") == 1  # first failure only, not every NaN step
    assert f"repro bundle written to {tmp_path / 'b'} (test.nonfinite_output at step 1" in err
    assert sorted(os.listdir(tmp_path / "b")) == [
        "batch.safetensors", "env.json", "env.txt", "manifest.json", "meta.json", "model.safetensors",
        "optimizer.safetensors", "report.json", "rng.safetensors", "traceback.txt"]
    b = torchtriage.load_bundle(tmp_path / "b")
    assert b.trigger["kind"] == "finding" and b.trigger["step"] == 1 and b.trigger["stage"] == "forward"
    assert (b.trigger["category"], b.trigger["code"], b.trigger["module"], b.trigger["op"]) == (
        "numerical", "test.nonfinite_output", "", "forward")
    batch = b.batch()
    assert torch.equal(batch.args[0], before["x"])  # the inputs ...
    assert torch.equal(batch.target, before["y"])  # ... and the loss target
    assert batch.losses[0]["name"] == "mse_loss"
    state = b.model_state()
    assert state.keys() == {"fc.weight", "fc.bias"}
    assert all(torch.equal(state[k], before[k]) for k in state)  # before the update, not after
    assert set(b.optimizer_state()["state"]) == {0, 1}  # momentum buffers of step 0
    assert torch.equal(b.tensors["rng.safetensors"]["cpu"], before["rng"])
    assert b.meta["command"]["cwd"] == os.getcwd() and b.meta["command"]["argv"]
    assert b.env["torch"] == torch.__version__ and "packages" in b.env
    assert "test.nonfinite_output" in b.traceback
    assert b.report.primary.code == "test.nonfinite_output"


def test_no_bundle_and_no_state_copies_without_bundle_dir(tmp_path):
    model, opt = _make()
    with torchtriage.watch(model, opt, checks=[NonFiniteOutputFlag(), "repro"], on_anomaly="record",
                           report=False) as s:
        x, y = zero_sample_batch(8, 3)
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    assert not s.report.ok
    assert "keep_state" not in s.options and s.snapshot.model_states is None
    assert s.checker("repro").written is None and not os.listdir(tmp_path)


def test_exception_in_forward_writes_bundle_with_the_batch(tmp_path, capsys):
    torch.manual_seed(0)
    model = RaisesOnNegativeSample()
    x = torch.rand(6, 8)
    x[4] = -1.0
    with pytest.raises(ValueError, match="negative sample"):
        with torchtriage.watch(model, bundle_dir=tmp_path / "b", on_anomaly="record", report=False):
            model(x)
    b = torchtriage.load_bundle(tmp_path / "b")
    assert b.trigger["kind"] == "exception" and b.trigger["type"] == "ValueError"
    assert "raise ValueError(\"negative sample reached the model\")" in b.traceback
    assert torch.equal(b.batch().args[0], x)  # recovered although forward never returned
    result = torchtriage.replay(b, model=RaisesOnNegativeSample())
    assert result.reproduced and result.exception == "ValueError: negative sample reached the model"
    assert torchtriage.shrink(b, lambda c: torchtriage.replay(c, model=RaisesOnNegativeSample()),
                              log=None).samples == (4,)


def test_size_limit_leaves_parts_out_and_says_so(tmp_path, capsys):
    # RNG 5056 bytes, batch 64x8 + 64x1 floats = 2304 bytes, model and optimizer 36 bytes each.
    _train_with_poison(tmp_path / "b", max_bundle_mb=0.003)
    err = capsys.readouterr().err
    assert ("repro bundle: the rng (0.00482 MB) does not fit in --max-bundle-mb (0.003 MB) and was left out; "
            "a replay rebuilds it from your code") in err
    assert [s["part"] for s in torchtriage.load_bundle(tmp_path / "b").skipped] == ["rng"]
    _train_with_poison(tmp_path / "c", max_bundle_mb=0.002)
    err = capsys.readouterr().err
    assert "the batch (0.0022 MB) does not fit in --max-bundle-mb (0.002 MB)" in err
    c = torchtriage.load_bundle(tmp_path / "c")
    assert [s["part"] for s in c.skipped] == ["rng", "batch"]
    assert c.model_state() is not None and c.optimizer_state() is not None
    with pytest.raises(BundleError, match="holds no batch"):
        c.batch()


# ---------------------------------------------------------------- replay
def test_replay_reproduces_the_same_finding(bundle):
    result = torchtriage.replay(bundle, factory=_factory())
    assert result.reproduced, result.describe()
    assert (result.matched.code, result.matched.module, result.matched.op) == ("test.nonfinite_output", "", "forward")
    assert result.describe() == "reproduced: numerical/test.nonfinite_output module='' op='forward'"


def test_replay_with_the_fixed_model_does_not_reproduce(bundle):
    result = torchtriage.replay(bundle, factory=_factory(ClampedNorm))
    assert not result.reproduced
    assert result.describe().startswith("not reproduced: expected numerical/test.nonfinite_output")


def test_replay_uses_state_before_the_step_and_same_rng(bundle):
    model, opt = _make()
    with torch.no_grad():
        model.fc.weight.fill_(5.0)  # whatever the user's weights are, the bundle's are loaded
    seen = {}

    def step_fn(m, o, batch):
        seen["w"] = m.fc.weight.detach().clone()
        seen["rng"] = torch.get_rng_state()
        m(*batch.args)

    torchtriage.replay(bundle, model, opt, step_fn=step_fn, checks=[NonFiniteOutputFlag()])
    assert torch.equal(seen["w"], bundle.model_state()["fc.weight"])
    assert torch.equal(seen["rng"], bundle.tensors["rng.safetensors"]["cpu"])


def test_replay_rejects_a_model_that_does_not_match(bundle):
    model = ZeroNormDivides(features=4)
    with pytest.raises(BundleError, match=re.escape(
            "the model does not match the bundle's state (model ZeroNormDivides, bundle recorded ZeroNormDivides): "
            "shape differs: fc.weight bundle (1, 8) vs model (1, 4)")) as e:
        torchtriage.replay(bundle, model=model)
    assert e.value.path.endswith("model.safetensors")
    with pytest.raises(BundleError,
                       match=r"missing in the bundle: 0.weight, 0.bias; not in the model: fc.weight, fc.bias"):
        torchtriage.replay(bundle, model=nn.Sequential(nn.Linear(8, 1)))


def test_replay_rejects_a_bad_factory_result(bundle):
    with pytest.raises(TypeError, match=r"bad\(\) returned a str; a factory returns a model"):
        def bad():
            return "model"
        torchtriage.replay(bundle, factory=bad)


# ---------------------------------------------------------------- shrink
def test_shrink_finds_the_single_poisoned_sample_in_log_n_replays(bundle):
    lines = []
    result = torchtriage.shrink(bundle, lambda b: torchtriage.replay(b, factory=_factory()), log=lines.append)
    assert result.samples == (37,) and result.batch_size == 64 and result.prefix is None
    assert result.replays == len(lines) <= 1 + 2 * 6  # the initial check + at most 2 per halving
    assert (lines[0]
            == "shrink: replay 1: 64 sample(s) [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, ...], prefix - -> reproduced")
    assert lines[-1] == "shrink: replay 10: 1 sample(s) [37], prefix - -> reproduced"
    x = result.bundle.batch().args[0]
    assert x.shape == (1, 8) and torch.equal(x, torch.zeros(1, 8))
    assert result.bundle.batch().target.shape == (1, 1)  # targets follow the samples


def test_shrink_shortens_sequences_to_the_poisoned_prefix(tmp_path, capsys):
    torch.manual_seed(0)
    model = PoisonedTokenRow()
    tokens = torch.randint(0, 7, (16, 12))
    tokens[9, 5] = 7
    with torchtriage.watch(model, checks=[NonFiniteOutputFlag(), "repro"], bundle_dir=tmp_path / "b",
                           on_anomaly="record", report=False):
        model(tokens)
    b = torchtriage.load_bundle(tmp_path / "b")
    assert (b.batch_size, b.seq_len) == (16, 12)
    result = torchtriage.shrink(b, lambda c: torchtriage.replay(c, model=PoisonedTokenRow(),
                                                                 checks=[NonFiniteOutputFlag()]), log=None)
    assert result.samples == (9,) and result.prefix == 6
    assert torch.equal(result.bundle.batch().args[0], tokens[9:10, :6])


def test_shrink_returns_none_when_the_full_batch_does_not_fail(bundle):
    assert torchtriage.shrink(bundle, lambda b: torchtriage.replay(b, factory=_factory(ClampedNorm)), log=None) is None


def test_ddmin_is_one_minimal_for_two_culprits():
    calls = []

    def fails(s):
        calls.append(tuple(s))
        return 3 in s and 12 in s

    assert ddmin(list(range(16)), fails) == [3, 12]
    assert len(calls) <= 2 * 2 * 4 + 4  # k culprits among n: at most 2·k·log2(n) + 4 tests


# ---------------------------------------------------------------- safety
def test_tampered_file_is_named(bundle):
    path = os.path.join(bundle.path, "batch.safetensors")
    with open(path, "r+b") as fh:
        fh.seek(-3, os.SEEK_END)
        fh.write(b"\x00\x01\x02")
    with pytest.raises(BundleError, match=re.escape(
            f"bundle {bundle.path}: batch.safetensors does not match its SHA-256 checksum")) as e:
        torchtriage.load_bundle(bundle.path)
    assert e.value.path == path


def test_truncated_file_is_named(bundle):
    path = os.path.join(bundle.path, "model.safetensors")
    size = os.path.getsize(path)
    with open(path, "r+b") as fh:
        fh.truncate(size - 10)
    with pytest.raises(BundleError, match=re.escape(
            f"model.safetensors does not match its SHA-256 checksum ({size - 10} bytes, {size} recorded): "
            "it was truncated or edited")):
        torchtriage.load_bundle(bundle.path)


def test_pickle_payload_is_refused(bundle, monkeypatch):
    torch.save({"x": torch.ones(1)}, os.path.join(bundle.path, "state.pt"))
    with pytest.raises(BundleError, match=re.escape(
            "state.pt looks like a pickle payload (by its name or its structure); a torchtriage bundle never "
            "holds pickles, and opening one could run code, so the bundle is refused")):
        torchtriage.load_bundle(bundle.path)
    os.remove(os.path.join(bundle.path, "state.pt"))
    with open(os.path.join(bundle.path, "notes.json"), "wb") as fh:  # a pickle under an innocent name
        fh.write(pickle.dumps({"a": 1}))
    with pytest.raises(BundleError, match="notes.json looks like a pickle payload"):
        torchtriage.load_bundle(bundle.path)


def test_manifest_listing_a_foreign_file_is_refused(bundle):
    mpath = os.path.join(bundle.path, "manifest.json")
    manifest = _read(mpath)
    manifest["files"]["payload.data"] = {"sha256": "0", "bytes": 0}
    _write(mpath, manifest)
    with pytest.raises(BundleError, match=r"the manifest lists 'payload.data', which is not a bundle file"):
        torchtriage.load_bundle(bundle.path)


def test_loading_runs_no_pickle_and_no_torch_load(bundle, monkeypatch):
    def boom(*a, **k):
        raise AssertionError("unpickling during load")

    monkeypatch.setattr(pickle, "loads", boom)
    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "Unpickler", boom)
    monkeypatch.setattr(torch, "load", boom)
    b = torchtriage.load_bundle(bundle.path)
    assert b.batch().args[0].shape == (64, 8)


def test_malformed_safetensors_header_is_refused(tmp_path):
    path = tmp_path / "x.safetensors"
    path.write_bytes((10**6).to_bytes(8, "little") + b"{}")
    with pytest.raises(BundleError, match=r"x.safetensors: not a safetensors file \(header length 1000000 exceeds"):
        _safetensors.load(path)
    path.write_bytes((30).to_bytes(8, "little")
                     + b'{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'[:30])
    with pytest.raises(BundleError, match="header is not JSON"):
        _safetensors.load(path)


def test_safetensors_roundtrip_all_dtypes(tmp_path):
    tensors = {"f32": torch.randn(2, 3), "bf16": torch.randn(4).bfloat16(), "f16": torch.randn(1).half(),
               "i64": torch.arange(5), "bool": torch.tensor([True, False]),
               "u8": torch.tensor([1, 255], dtype=torch.uint8),
               "empty": torch.zeros(0, 3), "scalar": torch.tensor(2.5, dtype=torch.float64)}
    _safetensors.save(tensors, tmp_path / "t.safetensors", metadata={"k": "v"})
    back, meta = _safetensors.load(tmp_path / "t.safetensors")
    assert meta == {"k": "v"}
    assert all(torch.equal(back[k], v) and back[k].dtype == v.dtype for k, v in tensors.items())


def test_safetensors_files_are_readable_by_the_reference_library(tmp_path):
    st = pytest.importorskip("safetensors.torch")
    tensors = {"w": torch.randn(3, 2), "ids": torch.arange(4, dtype=torch.int32)}
    _safetensors.save(tensors, tmp_path / "ours.safetensors")
    theirs = st.load_file(str(tmp_path / "ours.safetensors"))
    assert all(torch.equal(theirs[k], v) for k, v in tensors.items())
    st.save_file(tensors, str(tmp_path / "theirs.safetensors"))
    ours, _ = _safetensors.load(tmp_path / "theirs.safetensors")
    assert all(torch.equal(ours[k], v) for k, v in tensors.items())


# ---------------------------------------------------------------- bad input
def test_missing_bundle_and_missing_file(tmp_path, bundle):
    with pytest.raises(BundleError, match=re.escape(f"bundle {tmp_path / 'nope'}: not found")):
        torchtriage.load_bundle(tmp_path / "nope")
    os.remove(os.path.join(bundle.path, "rng.safetensors"))
    with pytest.raises(BundleError, match=re.escape(
            f"bundle {bundle.path}: rng.safetensors is missing (the bundle is incomplete)")):
        torchtriage.load_bundle(bundle.path)


def test_bundle_from_another_version(bundle):
    mpath = os.path.join(bundle.path, "manifest.json")
    manifest = _read(mpath)
    manifest["torchtriage"] = "0.0.1"
    _write(mpath, manifest)
    with pytest.raises(BundleError, match=re.escape(
            f"bundle {bundle.path}: written by torchtriage 0.0.1, this is torchtriage {torchtriage.__version__}; ")):
        torchtriage.load_bundle(bundle.path)
    assert torchtriage.load_bundle(bundle.path, allow_other_version=True).batch_size == 64
    manifest["format"] = "torchtriage.bundle/9"
    _write(mpath, manifest)
    with pytest.raises(BundleError, match=re.escape("format 'torchtriage.bundle/9' is not supported")):
        torchtriage.load_bundle(bundle.path, allow_other_version=True)


def test_collect_env_keeps_relevant_vars_and_redacts_secrets(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("TORCH_HUB_TOKEN", "hunter2")
    monkeypatch.setenv("HOME_UNRELATED", "x")
    env = torchtriage.collect_env()
    assert env["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert env["env"]["TORCH_HUB_TOKEN"] == "<redacted>"
    assert "HOME_UNRELATED" not in env["env"]
    assert env["torch"] == torch.__version__ and env["packages"]["torch"]
