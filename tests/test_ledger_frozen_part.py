"""A frozen part of a model whose BatchNorm statistics still move (session 19).

`silent.frozen_norm_retrained`, variants `train_mode` (a frozen backbone left in training mode)
and `own_eval` (BatchNorm layers put in eval() one by one, switched back by `model.train()`).
"""

from __future__ import annotations

import torch
from torch import nn

import torchtriage


def _block(cin: int, cout: int) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())


class Probe(nn.Module):
    """A small pretrained CNN with a linear head, as a linear-evaluation script builds it."""

    def __init__(self) -> None:
        super().__init__()
        self.backbone = nn.Sequential(_block(3, 8), _block(8, 16), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(16, 5)

    def forward(self, x):
        return self.head(self.backbone(x))


def _batch(shift: float = 1.5):
    return torch.randn(16, 3, 8, 8) * 2 + shift, torch.randint(0, 5, (16,))


def _pretrain(model: Probe) -> None:
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    model.train()
    for _ in range(12):
        x, y = _batch(shift=0.0)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


def _probe(freeze, epochs: int = 3, steps: int = 5, after_train=lambda m: None, pretrain=True):
    torch.manual_seed(0)
    model = Probe()
    with torchtriage.watch(model, on_anomaly="record", discover=True) as s:
        if pretrain:
            _pretrain(model)
        opt = freeze(model)
        for _ in range(epochs):
            model.train()  # the epoch's train()
            after_train(model)
            for _ in range(steps):
                x, y = _batch()
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            model.eval()
            with torch.no_grad():
                model(_batch()[0])
    return [f for f in s.report.findings if f.code == "silent.frozen_norm_retrained"]


def _requires_grad_off(model: Probe):
    for name, p in model.named_parameters():
        if not name.startswith("head"):
            p.requires_grad = False
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def test_a_linear_probe_over_a_frozen_backbone_in_train_mode_moves_its_statistics():
    (f,) = _probe(_requires_grad_off)
    assert f.severity == "warning" and f.category == "silent"
    assert f.evidence["source_line"] == "model.train()  # the epoch's train()"
    assert f.module == "backbone.0.1" and f.parameter == "backbone.0.1.running_mean" and f.op == "BatchNorm2d"
    assert f.evidence["frozen_parts"] == ["backbone"]
    assert f.evidence["modules"] == ["backbone.0.1", "backbone.1.1"]
    # (the copy is taken at the first frozen step's optimizer step: after that step's forward)
    assert f.evidence["batches_folded_into_running_stats"] == 14
    assert f.evidence["frozen_parameter_tensors"] == 6 and f.evidence["optimizer_steps_since"] == 15
    assert f.evidence["running_mean_shift_sd"] > 0.1
    assert f.message.startswith("2 BatchNorm layer(s) (backbone.0.1, a BatchNorm2d, first) of the frozen part "
                                "backbone of ")
    assert "weights stayed exactly as they were" in f.message


def test_a_backbone_left_out_of_the_optimizer_is_frozen_too():
    # requires_grad stays on; only the head is given to the optimizer
    (f,) = _probe(lambda m: torch.optim.Adam(m.head.parameters(), lr=0.01))
    assert f.severity == "warning" and f.evidence["frozen_parts"] == ["backbone"]


def test_a_random_feature_extractor_has_no_statistics_to_keep():
    # never trained: its running statistics are the initial ones and need the data
    assert _probe(_requires_grad_off, pretrain=False) == []


def test_the_fix_backbone_eval_after_train_is_quiet():
    assert _probe(_requires_grad_off, after_train=lambda m: m.backbone.eval()) == []


def test_statistics_adapted_on_purpose_are_quiet():
    # AdaBN-like: the code asks for the frozen backbone's training mode itself
    def adapt(m):
        m.eval()
        m.backbone.train()

    assert _probe(_requires_grad_off, after_train=adapt) == []


def test_cumulative_statistics_are_quiet():
    def freeze(m):
        for mod in m.backbone.modules():
            if isinstance(mod, nn.BatchNorm2d):
                mod.momentum = None  # a re-estimate of the statistics over the new data
        return _requires_grad_off(m)

    assert _probe(freeze) == []


def test_a_backbone_unfrozen_later_is_quiet():
    torch.manual_seed(0)
    model = Probe()
    with torchtriage.watch(model, on_anomaly="record", discover=True) as s:
        opt = _requires_grad_off(model)
        for epoch in range(4):
            if epoch == 2:
                model.backbone.requires_grad_(True)  # the second stage fine-tunes everything
            model.train()
            for _ in range(4):
                x, y = _batch()
                loss = nn.functional.cross_entropy(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
    assert [f for f in s.report.findings if f.code == "silent.frozen_norm_retrained"] == []


def test_a_model_trained_whole_in_train_mode_is_quiet():
    assert _probe(lambda m: torch.optim.SGD(m.parameters(), lr=0.05)) == []


class GAN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.G = nn.Sequential(nn.Linear(4, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 6))
        self.D = nn.Sequential(nn.Linear(6, 16), nn.BatchNorm1d(16), nn.LeakyReLU(0.2), nn.Linear(16, 1))


def test_a_discriminator_frozen_for_each_generator_step_is_quiet():
    torch.manual_seed(0)
    gan = GAN()
    bce = nn.BCEWithLogitsLoss()
    with torchtriage.watch(gan, on_anomaly="record", discover=True) as s:
        opt_g = torch.optim.Adam(gan.G.parameters(), lr=1e-3)
        opt_d = torch.optim.Adam(gan.D.parameters(), lr=1e-3)
        gan.train()
        for _ in range(12):
            real, z = torch.randn(16, 6) + 2, torch.randn(16, 4)
            gan.D.requires_grad_(True)
            d_loss = bce(gan.D(real), torch.ones(16, 1)) + bce(gan.D(gan.G(z).detach()), torch.zeros(16, 1))
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()
            gan.D.requires_grad_(False)  # frozen for the generator's step
            g_loss = bce(gan.D(gan.G(z)), torch.ones(16, 1))
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()
    assert [f for f in s.report.findings if f.code == "silent.frozen_norm_retrained"] == []


# ---------------------------------------------------------------- eval() asked of each BatchNorm
class Matting(nn.Module):
    """An encoder whose BatchNorm statistics are frozen by `freeze_bn()`; its weights still train."""

    def __init__(self, freeze_bn: bool = True) -> None:
        super().__init__()
        self.enc = nn.Sequential(_block(3, 8), _block(8, 8))
        if freeze_bn:
            self.freeze_bn()
        self.dec = nn.Conv2d(8, 1, 1)

    def freeze_bn(self):
        for m in self.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.eval()

    def forward(self, x):
        return self.dec(self.enc(x))


def train_epoch(net, opt, refreeze=False):
    net.train()
    if refreeze:
        net.freeze_bn()
    for _ in range(4):
        x = torch.randn(4, 3, 8, 8) + 1.0
        loss = (net(x) - 0.5).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


def _matting(refreeze: bool):
    torch.manual_seed(0)
    with torchtriage.watch(on_anomaly="record", discover=True) as s:
        net = Matting()  # its freeze_bn() runs in the watched block
        opt = torch.optim.Adam([{"params": net.dec.parameters()}, {"params": net.enc.parameters(), "lr": 1e-5}],
                               lr=1e-3)
        for _ in range(3):
            train_epoch(net, opt, refreeze)
            net.eval()
            with torch.no_grad():
                net(torch.randn(4, 3, 8, 8))
    return [f for f in s.report.findings if f.code == "silent.frozen_norm_retrained"]


def test_train_undoes_a_freeze_bn_of_trainable_layers():
    (f,) = _matting(refreeze=False)
    assert f.severity == "warning"
    assert f.evidence["source_line"] == "net.train()"  # inside the user's own function named train_epoch
    assert f.evidence["parameters_frozen"] is False and f.evidence["eval_asked_of_the_layer_itself"] is True
    assert f.evidence["eval_line"].startswith("test_ledger_frozen_part.py:")
    assert f.evidence["batches_folded_into_running_stats"] == 12
    assert f.message.startswith("2 normalization layer(s) (")
    assert "were put in eval() one by one at test_ledger_frozen_part.py:" in f.message


def test_freeze_bn_applied_again_after_train_is_quiet():
    assert _matting(refreeze=True) == []
