"""The step ledger (issue 26): each loss term, what it reaches, whether it is applied; clipping
before GradScaler's unscale_; functional dropout left on in eval(). Written as users write them;
the correct twins stay quiet."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from _lines import marked
from torchtriage import Severity

HERE = str(Path(__file__))


line_of = marked(Path(HERE))


def loud(report):
    return [f for f in report if f.severity is not Severity.INFO]


def codes(report, code):
    return [f for f in report if f.code == code]


# ---------------------------------------------------------------- GAN: the generator's adversarial term
def gan(detach_in_g_step: bool, steps: int = 4):
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 6))
    D = nn.Sequential(nn.Linear(6, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
    opt_g = torch.optim.Adam(G.parameters(), 1e-3)
    opt_d = torch.optim.Adam(D.parameters(), 1e-3)
    bce = nn.BCEWithLogitsLoss()
    with torchtriage.watch([G, D], [opt_g, opt_d], on_anomaly="record", report=False) as s:
        for _ in range(steps):
            z, real = torch.randn(8, 4), torch.randn(8, 6)
            fake = G(z)
            opt_d.zero_grad()
            d_loss = bce(D(real), torch.ones(8, 1)) + bce(D(fake.detach()), torch.zeros(8, 1))
            d_loss.backward()
            opt_d.step()
            opt_g.zero_grad()
            recon = F.l1_loss(fake, real)
            seen_by_d = fake.detach() if detach_in_g_step else fake  # adversarial on detached
            adv = bce(D(seen_by_d), torch.ones(8, 1))  # the adversarial term
            g_loss = recon + 0.01 * adv
            g_loss.backward()
            opt_g.step()
    return s.report


def test_gan_adversarial_term_on_detached_output_is_named():
    report = gan(True)
    found = codes(report, "gradient.term_detached")
    assert len(found) == 1, report
    f = found[0]
    assert f.severity is Severity.WARNING
    assert f.line == line_of("the adversarial term")
    assert f.evidence["computed_from"] == ["D", "G"]
    assert f.evidence["stepped_without_it"] == ["G"]
    assert f.evidence["reaches_models"] == ["D"]
    assert f.evidence["gradient_applied"] is False
    assert "detach" in f.evidence["cut_at"] and str(line_of("adversarial on detached")) in f.evidence["cut_at"]
    assert any("l1_loss" in t for t in f.evidence["trained_by_terms"])


def test_gan_correct_is_quiet():
    assert not codes(gan(False), "gradient.term_detached")
    assert not loud(gan(False))


# ---------------------------------------------------------------- teacher / student
def test_distillation_with_teacher_under_no_grad_is_quiet():
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    student = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt = torch.optim.SGD(student.parameters(), 0.1)
    with torchtriage.watch([teacher, student], opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
            with torch.no_grad():
                t_logits = teacher(x)
            s_logits = student(x)
            kd = F.kl_div(F.log_softmax(s_logits / 2, 1), F.softmax(t_logits / 2, 1), reduction="batchmean")
            loss = 0.5 * F.cross_entropy(s_logits, y) + 0.5 * kd
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not codes(s.report, "gradient.term_detached")
    assert not loud(s.report), s.report


def test_student_consistency_term_on_detached_student_is_named():
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3))
    student = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 3))
    opt_t = torch.optim.SGD(teacher.parameters(), 0.1)
    opt_s = torch.optim.SGD(student.parameters(), 0.1)
    with torchtriage.watch([teacher, student], [opt_t, opt_s], on_anomaly="record", report=False) as s:
        for _ in range(4):
            x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
            t_logits = teacher(x)
            opt_t.zero_grad()
            F.cross_entropy(t_logits, y).backward()
            opt_t.step()
            s_logits = student(x)
            mimic = F.mse_loss(s_logits.detach(), teacher(x))  # the student's output detached
            loss = F.cross_entropy(s_logits, y) + mimic
            opt_s.zero_grad()
            loss.backward()
            opt_s.step()
    found = codes(s.report, "gradient.term_detached")
    assert len(found) == 1, s.report
    assert found[0].line == line_of("the student's output detached")
    assert found[0].evidence["stepped_without_it"] == ["student"]


# ---------------------------------------------------------------- actor-critic, siamese, multi-task: quiet
def test_actor_critic_with_detached_advantage_is_quiet():
    torch.manual_seed(0)
    actor = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))
    critic = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.Adam([*actor.parameters(), *critic.parameters()], 1e-3)
    with torchtriage.watch([actor, critic], opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            obs, returns = torch.randn(16, 4), torch.randn(16)
            dist = torch.distributions.Categorical(logits=actor(obs))
            actions = dist.sample()
            values = critic(obs).squeeze(-1)
            advantage = (returns - values).detach()
            policy_loss = -(dist.log_prob(actions) * advantage).mean()
            value_loss = F.mse_loss(values, returns)
            loss = policy_loss + 0.5 * value_loss - 0.01 * dist.entropy().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not codes(s.report, "gradient.term_detached")
    assert not loud(s.report), s.report


def test_multitask_loss_dict_with_stop_gradient_head_is_quiet():
    torch.manual_seed(0)
    enc = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
    head_a, head_b = nn.Linear(16, 3), nn.Linear(16, 1)
    opt = torch.optim.Adam([*enc.parameters(), *head_a.parameters(), *head_b.parameters()], 1e-3)
    with torchtriage.watch([enc, head_a, head_b], opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            x, ya, yb = torch.randn(8, 6), torch.randint(0, 3, (8,)), torch.randn(8, 1)
            h = enc(x)
            losses = {"cls": F.cross_entropy(head_a(h), ya), "probe": F.mse_loss(head_b(h.detach()), yb)}
            loss = sum(losses.values())
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not codes(s.report, "gradient.term_detached")
    assert not loud(s.report), s.report


def test_siamese_contrastive_two_terms_is_quiet():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(net.parameters(), 0.05)
    with torchtriage.watch(net, opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            a, b, same = torch.randn(8, 6), torch.randn(8, 6), torch.randint(0, 2, (8,)).float()
            d = F.pairwise_distance(net(a), net(b))
            loss = (same * d.pow(2)).mean() + ((1 - same) * F.relu(1.0 - d).pow(2)).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert not codes(s.report, "gradient.term_detached")
    assert not loud(s.report), s.report


# ---------------------------------------------------------------- AMP: clip before unscale_
def amp_loop(unscale_first: bool, max_norm: float = 1.0):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), 0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(4):
            x, y = torch.randn(16, 8), torch.randn(16, 1)
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.mse_loss(model(x).float(), y)
            scaler.scale(loss).backward()
            if unscale_first:
                scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)  # clip
            scaler.step(opt)
            scaler.update()
    return s.report


def test_clip_before_unscale_is_named_with_the_scaled_norm():
    report = amp_loop(False)
    found = codes(report, "gradient.clip_before_unscale")
    assert len(found) == 1, report
    f = found[0]
    assert f.severity is Severity.WARNING
    assert f.line == line_of("clip")
    assert f.evidence["scale"] == 1024.0
    assert f.evidence["clip_engaged"] is True
    assert f.evidence["norm_measured"] > 1.0
    assert f.evidence["norm_unscaled"] == pytest.approx(f.evidence["norm_measured"] / 1024.0)


def test_clip_that_never_engages_is_an_info():
    report = amp_loop(False, max_norm=1e9)
    found = codes(report, "gradient.clip_before_unscale")
    assert [f.severity for f in found] == [Severity.INFO]


def test_clip_after_unscale_is_quiet():
    report = amp_loop(True)
    assert not codes(report, "gradient.clip_before_unscale")
    assert not loud(report), report


# ---------------------------------------------------------------- dropout in evaluation
class Head(nn.Module):
    def __init__(self, mode: str) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(6, 16), nn.Linear(16, 3)
        self.mode = mode

    def forward(self, x):
        h = F.relu(self.fc1(x))
        if self.mode == "default":
            h = F.dropout(h, 0.3)  # functional dropout
        elif self.mode == "module_mode":
            h = F.dropout(h, 0.3, training=self.training)
        else:  # Monte-Carlo dropout, declared
            h = F.dropout(h, 0.3, training=True)
        return self.fc2(h)


def eval_loop(mode: str):
    torch.manual_seed(0)
    model = Head(mode)
    opt = torch.optim.SGD(model.parameters(), 0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            a = model(x)
            b = model(x)
    return s.report, torch.equal(a, b)


def test_functional_dropout_in_eval_is_named():
    report, same = eval_loop("default")
    assert not same
    found = codes(report, "silent.dropout_in_eval")
    assert len(found) == 1, report
    f = found[0]
    assert f.severity is Severity.WARNING
    assert f.line == line_of("functional dropout")
    assert f.module == "<root>" or f.evidence["module_class"] == "Head"
    assert f.evidence["p"] == 0.3


@pytest.mark.parametrize("mode", ["module_mode", "mc"])
def test_dropout_following_the_mode_or_declared_is_quiet(mode):
    report, same = eval_loop(mode)
    assert same is (mode == "module_mode")
    assert not codes(report, "silent.dropout_in_eval")
    assert not loud(report), report


def test_nn_dropout_in_eval_is_quiet():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Dropout(0.5), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), 0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
        F.cross_entropy(model(x), y).backward()
        opt.step()
        model.eval()
        with torch.no_grad():
            model(x)
    assert not codes(s.report, "silent.dropout_in_eval")


# ---------------------------------------------------------------- contracts on the loss region
def test_siamese_label_n1_times_distance_n_is_an_outer_product():
    torch.manual_seed(0)
    net = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(net.parameters(), 0.05)
    with torchtriage.watch(net, opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            a, b, label = torch.randn(8, 6), torch.randn(8, 6), torch.randint(0, 2, (8, 1)).float()
            d = F.pairwise_distance(net(a), net(b))
            loss = torch.mean((1 - label) * d.pow(2) + label * F.relu(2.0 - d).pow(2))  # contrastive
            opt.zero_grad()
            loss.backward()
            opt.step()
    (f,) = codes(s.report, "silent.loss_broadcast")
    assert (f.line, f.op) == (line_of("contrastive"), "mul")
    assert f.evidence["broadcast_shape"] == (8, 8)


def distill_kl(student_input: str):
    torch.manual_seed(0)
    teacher = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 5))
    student = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 5))
    opt = torch.optim.SGD(student.parameters(), 0.1)
    with torchtriage.watch([teacher, student], opt, on_anomaly="record", report=False) as s:
        for _ in range(3):
            x = torch.randn(8, 6)
            with torch.no_grad():
                target = F.softmax(teacher(x), dim=1)
            out = student(x)
            inp = {"log": F.log_softmax(out, 1), "prob": F.softmax(out, 1), "raw": out.abs() + 0.1}[student_input]
            loss = F.kl_div(inp, target, reduction="batchmean")  # kl
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


@pytest.mark.parametrize("kind", ["prob", "raw"])
def test_kl_div_fed_probabilities_or_scores_is_named(kind):
    (f,) = codes(distill_kl(kind), "silent.kl_div_input_not_log")
    assert (f.severity, f.line) == (Severity.ERROR, line_of("kl"))
    if kind == "prob":
        assert f.evidence["input_producer"].startswith("SoftmaxBackward")
    else:
        assert f.evidence["input_max"] > 0


def test_kl_div_on_log_softmax_is_quiet():
    report = distill_kl("log")
    assert not codes(report, "silent.kl_div_input_not_log")
    assert not loud(report), report


# ---------------------------------------------------------------- parameter updates
def staged_unfreeze(set_to_none: bool, opt_kind: str = "adamw"):
    torch.manual_seed(0)
    backbone = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
    head = nn.Linear(16, 3)
    model = nn.Sequential(backbone, head)
    params = model.parameters()
    opt = torch.optim.AdamW(params, 1e-2, weight_decay=0.1) if opt_kind == "adamw" \
        else torch.optim.SGD(params, 0.1, momentum=0.9)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for step in range(6):
            if step == 3:
                backbone.requires_grad_(False)  # second stage: the backbone is frozen
            x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
            opt.zero_grad(set_to_none=set_to_none)
            F.cross_entropy(model(x), y).backward()
            opt.step()
        frozen = backbone[0].weight.detach().clone()
        x, y = torch.randn(8, 6), torch.randint(0, 3, (8,))
        opt.zero_grad(set_to_none=set_to_none)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        moved = not torch.equal(frozen, backbone[0].weight)
    return s.report, moved


@pytest.mark.parametrize("opt_kind", ["adamw", "sgd"])
def test_frozen_backbone_still_moved_by_the_optimizer_is_named(opt_kind):
    report, moved = staged_unfreeze(False, opt_kind)
    assert moved
    (f,) = codes(report, "gradient.frozen_moved")
    assert f.severity is Severity.WARNING
    assert f.evidence["parameters"] == ["0.0.weight", "0.0.bias"]
    assert f.evidence["grad"] == "a tensor of zeros"
    assert f.step == 3


def test_frozen_backbone_with_grads_set_to_none_is_quiet():
    report, moved = staged_unfreeze(True)
    assert not moved
    assert not codes(report, "gradient.frozen_moved")


# ---------------------------------------------------------------- the terms of a loss, from its graph
def test_a_loss_is_split_into_its_additive_terms():
    from torchtriage._ledger_step._terms import leaves_of, split

    a_net, b_net = nn.Linear(3, 1), nn.Linear(3, 1)
    x = torch.randn(4, 3)
    a, b = a_net(x).pow(2).mean(), b_net(x).abs().mean()
    assert len(split(a + 0.5 * b)) == 2
    assert len(split(sum({"a": a, "b": b, "c": a * b}.values()))) == 3  # a product is one term
    assert len(split(torch.stack([a, b]).mean())) == 2
    assert len(split((a - b) / 4)) == 2
    assert len(split(a)) == 1
    assert len(split((a_net(x) + b_net(x)).mean())) == 1  # a sum inside a term is not split
    (ta, tb) = split(a + b)
    assert {id(p) for p in a_net.parameters()} == set(leaves_of(ta)[0])
    assert {id(p) for p in b_net.parameters()} == set(leaves_of(tb)[0])
