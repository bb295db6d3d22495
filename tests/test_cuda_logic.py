"""CUDA-specific logic exercised on a CPU machine (device checks monkeypatched, meta tensors).
What only a GPU can verify is in benchmarks/gpu_check.py."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from tests._syncs import SyncCounter

import torchtriage
from torchtriage import Report, Severity, Stage
from torchtriage._repro import _tree
from torchtriage._repro._bundle import Bundle
from torchtriage._summary import summarize
from torchtriage._triage._explain import ExceptionTriage


def _bundle(meta=None, tensors=None):
    return Bundle(path="b", meta=meta or {}, env={}, report=Report(()), traceback="", tensors=tensors or {})


def test_bundle_cuda_rng_restored_by_device_index_on_fewer_gpus(monkeypatch):
    # Recorded on 12 GPUs ("cuda.10" sorts before "cuda.2" as text), replayed on 3.
    states = {f"cuda.{i}": torch.full((16,), i, dtype=torch.uint8) for i in range(12)}
    calls = []
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 3)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, i: calls.append((i, int(s[0]))))
    cpu = torch.get_rng_state()
    _bundle(tensors={"rng.safetensors": {"cpu": cpu, **states}}).restore_rng()
    assert calls == [(0, 0), (1, 1), (2, 2)]


def test_bundle_batch_keeps_cpu_tensors_of_an_accelerator_step_on_the_cpu():
    t = {"args.0": torch.randn(2, 3), "args.1": torch.tensor([3, 2])}
    spec = {"args": {"t": "tuple", "items": [{"t": "tensor", "key": "args.0", "device": "cuda:0"},
                                             {"t": "tensor", "key": "args.1", "device": "cpu"}]},
            "kwargs": {"t": "dict", "items": []}, "losses": []}
    gpu_run = _bundle({"batch": spec, "model": {"device": "cuda:0"}}, {"batch.safetensors": t})
    x, lengths = gpu_run.batch("meta").args
    assert (x.device.type, lengths.device.type) == ("meta", "cpu")  # pack_padded_sequence's lengths
    cpu_run = _bundle({"batch": spec, "model": {"device": "cpu"}}, {"batch.safetensors": t})
    assert [a.device.type for a in cpu_run.batch("meta").args] == ["meta", "meta"]  # moved whole
    assert _tree.decode(spec["args"], t)[1].device.type == "cpu"


class HalfEmbedding(nn.Module):
    """A pure float16 model whose embedding's norm (~1.3e5) exceeds float16's max (65504)
    while every value is finite."""

    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(100_000, 4).half()
        with torch.no_grad():
            self.emb.weight.fill_(0.2).mul_(1000)

    def forward(self, idx):
        return self.emb(idx)


def test_half_parameter_with_norm_above_float16_max_is_not_non_finite():
    # Its float16 norm was Inf: every step then took the update's localization (a read per
    # tensor) only to find every value finite.
    torch.manual_seed(0)
    model = HalfEmbedding()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    idx = torch.randint(0, 100_000, (8,))
    per_step = []
    with SyncCounter() as counter:
        with torchtriage.watch(model, opt, checks=["nonfinite"], on_anomaly="record", report=False) as s:
            for _ in range(3):
                n0 = len(counter.calls)
                loss = F.mse_loss(model(idx).float(), torch.zeros(8, 4))
                opt.zero_grad()
                loss.backward()
                opt.step()
                per_step.append(len(counter.calls) - n0)
    assert [f.code for f in s.report.findings if f.severity is not Severity.INFO] == []
    assert per_step == [1, 1, 1] and len(s.series["grad_norm"]) == 3


def test_summary_reads_counts_and_range_at_once():
    t = torch.tensor([1.0, float("nan"), -float("inf"), 3.0, float("inf")], dtype=torch.float16)
    s = summarize(t)
    assert (s.nan, s.posinf, s.neginf, s.min, s.max) == (1, 1, 1, 1.0, 3.0)
    s = summarize(torch.tensor([float("nan")]))
    assert (s.nan, s.min, s.max) == (1, None, None) and str(s) == "float32[1] cpu NaN=1 no finite value"
    assert (summarize(torch.tensor([5, -2])).min, summarize(torch.tensor([True])).max) == (-2.0, 1.0)


def test_summary_of_unreadable_values_keeps_the_metadata(monkeypatch):
    def oom(*a, **k):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB.")
    monkeypatch.setattr(torch, "isnan", oom)
    s = summarize(torch.ones(2, 3))
    assert (s.shape, s.dtype, s.nan, s.min) == ((2, 3), "torch.float32", 0, None)


class TooBig(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 1 has a total "
                                     "capacity of 79.15 GiB of which 3.00 GiB is free.")


def test_oom_evidence_reads_no_values_and_names_the_device_that_ran_out(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda d=None: (70 if d == 1 else 1) * 2**20)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda d=None: (75 if d == 1 else 1) * 2**20)
    read = []
    real_isnan = torch.isnan
    monkeypatch.setattr(torch, "isnan", lambda x: read.append(x.shape) or real_isnan(x))
    model = TooBig()
    try:
        with torchtriage.watch(model, checks=[ExceptionTriage()], on_anomaly="record", report=False) as s:
            model(torch.randn(2, 4))
    except torch.OutOfMemoryError:
        pass
    f = s.report.primary
    assert (f.code, f.stage, f.module) == ("memory.oom", Stage.FORWARD, "")
    assert ((f.evidence["cuda_device"], f.evidence["cuda_allocated_mb"], f.evidence["cuda_reserved_mb"])
            == (1, 70.0, 75.0))
    assert read == []  # shapes only: no full-size temporaries on a device that is full
    assert str(f.evidence["param fc.weight"]) == "float32[4, 4] cpu"
