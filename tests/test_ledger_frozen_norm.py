"""A frozen BatchNorm put in eval() on its own, switched back by the epoch's model.train() (session 10)."""

from __future__ import annotations

import torch
from torch import nn

import torchtriage


class Net(nn.Module):
    def __init__(self, keep_frozen_in_eval: bool = False):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.head = nn.Linear(8, 1)
        self.keep = keep_frozen_in_eval

    def forward(self, x):
        return self.head(self.encoder(x))

    def freeze_encoder(self):
        for p in self.encoder.parameters():
            p.requires_grad = False
        for m in self.encoder.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.eval()  # the freeze's eval

    def train(self, mode: bool = True):  # the fixed twin's way
        super().train(mode)
        if self.keep:
            for m in self.encoder.modules():
                if isinstance(m, nn.BatchNorm1d) and not any(p.requires_grad for p in m.parameters()):
                    m.eval()
        return self


def _finetune(model, freeze=lambda m: m.freeze_encoder(), epochs: int = 3):
    torch.manual_seed(0)
    with torchtriage.watch(model, on_anomaly="record") as s:
        freeze(model)
        opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=0.01)
        for _ in range(epochs):
            model.train()  # the epoch's train()
            for _ in range(4):
                loss = model(torch.randn(8, 4)).pow(2).mean()
                opt.zero_grad()
                loss.backward()
                opt.step()
            model.eval()
            with torch.no_grad():
                model(torch.randn(8, 4))
    return [f for f in s.report.findings if f.code == "silent.frozen_norm_retrained"]


def test_train_undoes_the_frozen_layers_eval_and_its_statistics_drift():
    (f,) = _finetune(Net())
    assert f.severity == "warning" and f.category == "silent"
    assert f.evidence["source_line"] == "model.train()  # the epoch's train()"
    assert f.module == "encoder.1" and f.parameter == "encoder.1.running_mean"
    assert f.evidence["batches_folded_into_running_stats"] == 12
    assert f.evidence["eval_line"].startswith("test_ledger_frozen_norm.py:")
    assert f.message.startswith("1 frozen normalization layer(s) (encoder.1, a BatchNorm1d, first) were put in "
                                "eval() on their own at test_ledger_frozen_norm.py:")


def _epochs(model, opt):
    for _ in range(2):
        model.train()  # inside a helper
        for _ in range(3):
            loss = model(torch.randn(8, 4)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()


def test_the_line_is_the_train_call_inside_the_users_helper():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    with torchtriage.watch(model, on_anomaly="record") as s:
        for p in model[1].parameters():
            p.requires_grad = False
        model[1].eval()
        _epochs(model, torch.optim.SGD([model[0].weight, model[2].weight], lr=0.01))
    (f,) = [f for f in s.report.findings if f.code == "silent.frozen_norm_retrained"]
    assert f.evidence["source_line"] == "model.train()  # inside a helper"
    assert f.evidence["batches_folded_into_running_stats"] == 6


def test_train_override_that_keeps_frozen_layers_in_eval_is_quiet():
    assert _finetune(Net(keep_frozen_in_eval=True)) == []


def test_encoder_eval_for_a_pass_then_train_with_trainable_layers_is_quiet():
    def eval_pass(m):
        m.encoder.eval()  # an evaluation of the encoder alone; nothing frozen
        with torch.no_grad():
            m.encoder(torch.randn(8, 4))

    assert _finetune(Net(), eval_pass) == []


def test_unfreezing_the_layer_itself_is_quiet():
    def freeze_then_unfreeze(m):
        m.freeze_encoder()
        m.encoder[1].train()  # the code changes its mind
    assert _finetune(Net(), freeze_then_unfreeze) == []


def test_a_layer_unfrozen_later_is_not_judged():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 1))
    with torchtriage.watch(model, on_anomaly="record") as s:
        for p in model[1].parameters():
            p.requires_grad = False
        model[1].eval()
        _epochs(model, torch.optim.SGD([model[0].weight, model[2].weight], lr=0.01))
        model[1].requires_grad_(True)  # a second stage fine-tunes everything
        model[1].train()
        _epochs(model, torch.optim.SGD(model.parameters(), lr=0.01))
    assert [f for f in s.report.findings if f.code == "silent.frozen_norm_retrained"] == []


def test_whole_model_eval_is_quiet():
    def frozen_whole(m):
        for p in m.encoder.parameters():
            p.requires_grad = False
        m.eval()

    assert _finetune(Net(), frozen_whole) == []
