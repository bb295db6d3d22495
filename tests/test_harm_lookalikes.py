"""Session 13 (cln): correct programs that drew warnings, each as users write them, and the bugs
the same checks must still find.

- a loss reduced by sum is a per-batch total however the reduction is passed (`nn.CTCLoss` hands
  `reduction` to `F.ctc_loss` by position): summed and divided by the samples it is a mean;
- a regression loss is at the targets' variance only against the variance of many batches, not
  of the first one (a diffusion model's noise targets);
- a loss that grows geometrically and then settles and falls (a contrastive loss against a queue
  that fills), or whose weights are thrown away (an lr range test restored from a saved copy), cost
  the run nothing: `info`; growth that breaks the run stays a warning;
- a BatchNorm in train() mode inside an eval() model whose output fed a training step (a momentum
  key encoder, an EMA teacher) is batch statistics on purpose: `info`; an evaluation pass is a
  warning.
"""

from __future__ import annotations

import textwrap

import pytest

from _lines import line_in
from test_ledger import run_script


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, checks=None, source=textwrap.dedent(source))


def _line(source: str, tag: str = "# HERE") -> int:
    return line_in(source, tag, ending=True)


def _codes(report, code):
    return [f for f in report.findings if f.code == code]


def _warnings(report, code):
    return [f for f in _codes(report, code) if f.severity.value in ("warning", "error")]


# ---------------------------------------------------------------- sum-reduced losses over the samples
# (1) a CTC recognizer through the module: nn.CTCLoss(reduction="sum"), a validation pass that adds
#     the batch totals and divides by the number of sequences
CTC_MODULE = """
    import torch
    import torch.nn as nn
    from torch.utils.data import DataLoader, Dataset

    torch.manual_seed(0)
    T, C = 12, 6
    class Lines(Dataset):
        def __init__(self, n):
            self.x = torch.randn(n, T, 8)
            self.lengths = torch.randint(1, 4, (n,))
            self.labels = [torch.randint(1, C, (int(k),)) for k in self.lengths]
        def __len__(self):
            return len(self.x)
        def __getitem__(self, i):
            return self.x[i], self.labels[i], self.lengths[i]

    def collate(batch):
        xs, labels, lengths = zip(*batch)
        return torch.stack(xs, 1), torch.cat(labels), torch.stack(lengths)  # time-major, concatenated targets

    class Rec(nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = nn.GRU(8, 16)
            self.out = nn.Linear(16, C)
        def forward(self, x):  # x: (T, N, 8)
            h, _ = self.rnn(x)
            return self.out(h).log_softmax(2)

    model = Rec()
    crit = nn.CTCLoss(blank=0, reduction="sum", zero_infinity=True)
    opt = torch.optim.RMSprop(model.parameters(), lr=1e-3)
    train = DataLoader(Lines(240), batch_size=20, shuffle=True, collate_fn=collate)
    valid = DataLoader(Lines(60), batch_size=20, collate_fn=collate)

    def validate():
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for x, targets, lengths in valid:
                lp = model(x)
                loss = crit(lp, targets, torch.full((x.size(1),), T, dtype=torch.long), lengths)
                total += loss.item()
                count += len(lengths)
        return total / count  # HERE

    for epoch in range(2):
        for x, targets, lengths in train:
            model.train()
            loss = crit(model(x), targets, torch.full((x.size(1),), T, dtype=torch.long), lengths)
            opt.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), 5)
            opt.step()
        print("val", validate())
"""

# (2) a function-style loop with the functional loss, the reduction passed by position, summed per
#     epoch and divided by the dataset's length
CTC_FUNCTIONAL = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset

    torch.manual_seed(1)
    N, T, C = 96, 10, 5
    feats = torch.randn(N, T, 4)
    labels = torch.randint(1, C, (N, 3))
    loader = DataLoader(TensorDataset(feats, labels), batch_size=16, shuffle=True)
    net = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, C))
    opt = torch.optim.Adam(net.parameters(), lr=3e-3)

    def epoch(loader):
        running = 0.0
        for x, y in loader:
            lp = net(x).log_softmax(-1).transpose(0, 1)
            n = x.shape[0]
            loss = F.ctc_loss(lp, y, torch.full((n,), T), torch.full((n,), 3), 0, "sum")
            opt.zero_grad()
            loss.backward()
            opt.step()
            running += loss.item()
        return running / len(loader.dataset)  # HERE

    for e in range(3):
        print(e, epoch(loader))
"""


@pytest.mark.parametrize("src", [CTC_MODULE, CTC_FUNCTIONAL], ids=["ctc_module_sum", "ctc_functional_positional"])
def test_sum_reduced_ctc_losses_over_the_samples_are_quiet(tmp_path, src):
    report, _ = _run(tmp_path, src)
    assert _codes(report, "silent.reported_mean_units") == []


def test_a_mean_reduced_ctc_loss_divided_by_the_samples_is_found(tmp_path):
    # the bug twin of (1): the module's default reduction is a batch mean, divided by the sequences
    src = CTC_MODULE.replace('reduction="sum", ', "")
    report, _ = _run(tmp_path, src)
    [f] = _codes(report, "silent.reported_mean_units")
    assert (f.severity.value, f.line) == ("warning", _line(src))
    assert f.evidence["denominator_counts"] == "samples" and f.evidence["factor"] == pytest.approx(1 / 20)
    assert "reduction='mean'" in f.evidence["summed"]


def test_the_positional_reduction_of_a_functional_loss_is_read():
    import torch
    import torch.nn.functional as F

    from torchtriage._checker import LossCall

    lp = torch.randn(5, 2, 3).log_softmax(2)
    args = (lp, torch.tensor([1, 2]), torch.tensor([5, 5]), torch.tensor([1, 1]), 0, "sum")
    call = LossCall("ctc_loss", lp, args[1], args, {}, F.ctc_loss(*args), None, None)
    assert call.option("reduction", "mean") == "sum" and call.option("zero_infinity", False) is False
    call = LossCall("mse_loss", lp, lp, (lp, lp), {"reduction": "none"}, None, None, None)
    assert call.option("reduction", "mean") == "none" and call.option("weight") is None


# ---------------------------------------------------------------- an MSE loss and its targets' variance
# (1) a toy DDPM: the target is the noise; one small batch's variance is far from 1
DDPM = """
    import math
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(59)
    steps_t = 50
    betas = torch.linspace(1e-4, 0.05, steps_t)
    abar = torch.cumprod(1 - betas, 0)
    ring = torch.randn(2000, 2) * 0.05 + torch.stack([torch.cos(a := torch.rand(2000) * 6.283), torch.sin(a)], 1)

    class Eps(nn.Module):
        def __init__(self):
            super().__init__()
            self.net = nn.Sequential(nn.Linear(3, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 2))
        def forward(self, x, t):
            return self.net(torch.cat([x, t[:, None].float() / steps_t], 1))

    model = Eps()
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    for step in range(260):
        x0 = ring[torch.randint(0, 2000, (12,))]
        t = torch.randint(0, steps_t, (12,))
        noise = torch.randn_like(x0)
        xt = abar[t].sqrt()[:, None] * x0 + (1 - abar[t]).sqrt()[:, None] * noise
        loss = F.mse_loss(model(xt, t), noise)
        opt.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
"""

# (2) a denoising autoencoder trained in a class, the module loss, per-pixel targets of small batches
DENOISE = """
    import torch
    import torch.nn as nn

    class Trainer:
        def __init__(self):
            torch.manual_seed(5)
            self.model = nn.Sequential(nn.Linear(6, 32), nn.ReLU(), nn.Linear(32, 6))
            self.crit = nn.MSELoss()
            self.opt = torch.optim.Adam(self.model.parameters(), lr=1e-3)
            self.basis = torch.randn(2, 6)

        def batch(self):
            clean = torch.randn(8, 2) @ self.basis
            return clean + 0.8 * torch.randn_like(clean), clean

        def fit(self, n):
            for _ in range(n):
                noisy, clean = self.batch()
                loss = self.crit(self.model(noisy), clean)
                self.opt.zero_grad()
                loss.backward()
                self.opt.step()

    Trainer().fit(240)
"""


# (3) a twin critic: the loss adds two MSE terms against one bootstrapped target, so it sits at
#     twice one term's level; the targets' variance is no level of it
TWIN_CRITIC = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(12)
    q1, q2 = nn.Linear(6, 1), nn.Linear(6, 1)
    opt = torch.optim.Adam(list(q1.parameters()) + list(q2.parameters()), lr=1e-3)
    w = torch.randn(6, 1)
    for step in range(200):
        obs = torch.randn(64, 6)
        with torch.no_grad():
            target = obs @ w * 0.3 + 0.7 * torch.randn(64, 1)
        loss = F.mse_loss(q1(obs), target) + F.mse_loss(q2(obs), target)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


@pytest.mark.parametrize("src", [DDPM, DENOISE, TWIN_CRITIC], ids=["ddpm_noise_targets", "denoiser_class",
                                                                   "twin_critic"])
def test_a_regression_that_learns_below_its_targets_variance_is_no_loss_at_prior(tmp_path, src):
    report, _ = _run(tmp_path, src)
    assert _warnings(report, "dynamics.loss_at_prior") == []


def test_the_prior_of_an_mse_loss_pools_the_targets_of_many_batches(tmp_path):
    # a model that cannot see its inputs (multiplied by 0): it predicts the mean target, the loss sits
    # at the variance of the targets of the whole stream, read from pooled batches
    src = DENOISE.replace("loss = self.crit(self.model(noisy), clean)",
                          "loss = self.crit(self.model(noisy * 0), clean)").replace("fit(240)", "fit(300)")
    report, _ = _run(tmp_path, src)
    [f] = _codes(report, "dynamics.loss_at_prior")
    assert f.severity.value == "warning" and f.evidence["prior_is"] == "target variance"
    assert abs(float(f.evidence["mean_of_last_20_losses"]) - float(f.evidence["prior"])) < 0.03 * float(
        f.evidence["prior"])


# (4) a weighted regression (a flow-matching model's timestep weighting): the loss passed to backward
#     is the MSE times a per-step weight near 2, so it sits near the targets' variance while the MSE
#     itself learns to half of it; the targets' variance is no level of the weighted loss (session 15)
WEIGHTED = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(13)
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    w = torch.randn(8, 4) * 0.35
    weights = torch.linspace(1.6, 2.4, 1000)

    def training_loss(x, y):
        t = torch.randint(0, 1000, (1,))
        loss = F.mse_loss(model(x), y)
        return loss * weights[t]

    for step in range(240):
        x = torch.randn(32, 8)
        y = x @ w + torch.randn(32, 4)
        loss = training_loss(x, y)
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def test_a_weighted_mse_is_not_compared_with_its_targets_variance(tmp_path):
    report, _ = _run(tmp_path, WEIGHTED)
    assert _codes(report, "dynamics.loss_at_prior") == []
    # the same program where the weight is constant 1: the MSE is the loss, and its prior applies
    # to a model that cannot see its inputs
    blind = WEIGHTED.replace("torch.linspace(1.6, 2.4, 1000)", "torch.ones(1000)").replace("model(x)", "model(x * 0)")
    report, _ = _run(tmp_path, blind)
    [f] = _codes(report, "dynamics.loss_at_prior")
    assert f.severity.value == "warning" and f.evidence["prior_is"] == "target variance"


# ---------------------------------------------------------------- a loss that grows and then settles
# (1) a contrastive loop with a queue of negatives that starts empty (zeros): the first losses are
#     near 0, rise to ~log(K) as the queue fills, then fall as the encoder learns
QUEUE = """
    import copy
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(6)
    protos = torch.randn(8, 16)
    def views(n):
        cls = torch.randint(0, 8, (n,))
        base = protos[cls] + 0.3 * torch.randn(n, 16)
        return base + 0.2 * torch.randn(n, 16), base + 0.2 * torch.randn(n, 16)

    enc = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
    key_enc = copy.deepcopy(enc)
    for p in key_enc.parameters():
        p.requires_grad_(False)
    queue = torch.zeros(64, 8)
    ptr = 0
    opt = torch.optim.SGD(enc.parameters(), lr=0.05, momentum=0.9)
    for step in range(160):
        a, b = views(16)
        q = F.normalize(enc(a), dim=1)
        with torch.no_grad():
            k = F.normalize(key_enc(b), dim=1)
        logits = torch.cat([(q * k).sum(1, keepdim=True), q @ queue.t()], 1) / 0.07
        loss = F.cross_entropy(logits, torch.zeros(16, dtype=torch.long))
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for pk, pq in zip(key_enc.parameters(), enc.parameters()):
                pk.mul_(0.99).add_(pq, alpha=0.01)
            queue[ptr:ptr + 16] = k
            ptr = (ptr + 16) % 64
"""

# (2) an lr range test in a function, the weights restored from a deep copy, then training proper
#     in another function (another loss line) with a fresh optimizer
RANGE_TEST = """
    import copy
    import math
    import torch
    import torch.nn as nn

    torch.manual_seed(7)
    X = torch.randn(512, 10)
    Y = (X[:, :3].sum(1) > 0).long()
    model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 2))
    crit = nn.CrossEntropyLoss()

    def range_test(model, lo=1e-4, hi=100.0, n=60):
        saved = copy.deepcopy(model.state_dict())
        opt = torch.optim.SGD(model.parameters(), lr=lo)
        avg, best, mult = 0.0, math.inf, (hi / lo) ** (1 / n)
        for i in range(n):
            idx = torch.randint(0, 512, (32,))
            loss = crit(model(X[idx]), Y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            avg = 0.9 * avg + 0.1 * loss.item()
            smooth = avg / (1 - 0.9 ** (i + 1))
            best = min(best, smooth)
            if smooth > 100 * best or not math.isfinite(smooth):
                break
            for g in opt.param_groups:
                g["lr"] *= mult
        model.load_state_dict(saved)

    def train(model, epochs):
        opt = torch.optim.SGD(model.parameters(), lr=0.05)
        for _ in range(epochs):
            for i in range(0, 512, 32):
                out = model(X[i:i + 32])
                l = crit(out, Y[i:i + 32])
                opt.zero_grad()
                l.backward()
                opt.step()

    range_test(model)
    train(model, 6)
"""

# (3) the same sweep in a class trainer whose one `step` method trains both before and after the
#     restore (one loss line): the loss comes back to where it was before the growth
RANGE_TEST_SAME_LINE = """
    import copy
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    class Trainer:
        def __init__(self):
            torch.manual_seed(8)
            self.X = torch.randn(512, 10)
            self.Y = (self.X[:, :2].sum(1) > 0).long()
            self.model = nn.Sequential(nn.Linear(10, 64), nn.ReLU(), nn.Linear(64, 2))
            self.opt = torch.optim.SGD(self.model.parameters(), lr=1e-4)

        def step(self, i):
            idx = torch.arange(i * 32, i * 32 + 32) % 512
            loss = F.cross_entropy(self.model(self.X[idx]), self.Y[idx])
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            return loss.item()

        def find_lr(self):
            saved = copy.deepcopy(self.model.state_dict())
            avg, best = 0.0, float("inf")
            for i in range(100):
                avg = 0.9 * avg + 0.1 * self.step(i)
                best = min(best, avg / (1 - 0.9 ** (i + 1)))
                if avg / (1 - 0.9 ** (i + 1)) > 1000 * best:
                    break
                self.opt.param_groups[0]["lr"] *= 1.3
            self.model.load_state_dict(saved)
            self.opt = torch.optim.SGD(self.model.parameters(), lr=0.05)

        def fit(self):
            for i in range(120):
                self.step(i)

    t = Trainer()
    t.find_lr()
    t.fit()
"""


@pytest.mark.parametrize("src", [QUEUE, RANGE_TEST, RANGE_TEST_SAME_LINE],
                         ids=["queue_fills", "range_test_restore", "range_test_one_line"])
def test_a_growth_the_run_recovers_from_is_an_info(tmp_path, src):
    report, _ = _run(tmp_path, src)
    assert _warnings(report, "dynamics.divergence") == []
    for f in _codes(report, "dynamics.divergence"):
        assert f.evidence["run_kept_learning"] is True and f.evidence["nonfinite_after"] is False


def test_a_growth_that_never_comes_back_stays_a_warning(tmp_path):
    # the range test's sweep without the restore: training continues from the blown-up weights at a
    # high lr, the loss stays far above where it was
    src = RANGE_TEST.replace("        model.load_state_dict(saved)\n", "").replace("lr=0.05)", "lr=30.0)")
    report, _ = _run(tmp_path, src)
    [f] = _codes(report, "dynamics.divergence")
    assert f.severity.value == "warning" and f.evidence["run_kept_learning"] is False


def test_a_divergence_read_from_losses_after_it():
    from torchtriage._dynamics._harm import HarmGate
    from torchtriage._findings import Category, Finding, Severity

    def finding(step, now):
        return Finding(category=Category.NUMERICAL, code="dynamics.divergence", message="m",
                       severity=Severity.WARNING, step=step, evidence={"start_step": step, "step_now": now})

    def run(values, at, now, broke=None):
        gate = HarmGate()
        for i, v in enumerate(values):
            gate.loss(i, v)
            if i == now:
                gate.hold(finding(at, now))
            if broke is not None and i == broke:
                gate.broke(i)
        [f] = gate.release()
        return f

    rise = [0.01 * 3 ** i for i in range(6)]  # 0.01 -> 2.43 in 5 steps
    settles_then_falls = rise + [2.4] * 10 + [2.4 - 0.05 * i for i in range(30)]
    assert run(settles_then_falls, 0, 5).severity is Severity.INFO
    stays = rise + [2.4 + 0.01 * (i % 3) for i in range(40)]
    assert run(stays, 0, 5).severity is Severity.WARNING
    keeps_growing = rise + [2.5 * 1.05 ** i for i in range(40)]
    assert run(keeps_growing, 0, 5).severity is Severity.WARNING
    assert run(settles_then_falls, 0, 5, broke=30).severity is Severity.WARNING  # a NaN after it
    restored = [2.3 - 0.01 * i for i in range(20)] + [2.1 * 3 ** i for i in range(6)] + \
        [2.3 - 0.02 * i for i in range(60)]
    f = run(restored, 20, 25)
    assert f.severity is Severity.INFO and f.evidence["loss_before_growth"] == "2.155"
    assert run(rise, 0, 5).severity is Severity.WARNING  # the run stops at the growth: no recovery seen


def test_a_growth_to_one_outlier_batch_is_no_divergence():
    # a heavy-tailed critic loss (session 15, TD3): small rises from a dip, then one batch with the
    # largest TD errors (x600 in 5 steps), and the next batches back at the usual level while the
    # level drifts up as the returns grow; the same growth kept by the next losses stays a warning
    from torchtriage._dynamics._harm import HarmGate
    from torchtriage._findings import Category, Finding, Severity

    def run(values, at, now):
        gate = HarmGate()
        for i, v in enumerate(values):
            gate.loss(i, v)
            if i == now:
                gate.hold(Finding(category=Category.NUMERICAL, code="dynamics.divergence", message="m",
                                  severity=Severity.WARNING, step=at, evidence={"start_step": at, "step_now": now}))
        [f] = gate.release()
        return f

    usual = [0.06, 0.09, 0.05, 3.4, 0.07, 0.11, 0.06, 0.08, 3.5, 0.05] * 2
    rise = [0.027, 0.042, 0.05, 0.053, 3.53, 16.56]
    drifting = [v * (1 + 0.05 * i) for i, v in enumerate([0.088, 0.082, 0.226] + usual + usual)]
    f = run(usual + rise + drifting, 20, 25)
    assert f.severity is Severity.INFO and f.evidence["transient"] is True
    assert f.evidence["losses_after_peak"] == ["0.088", "0.0861", "0.2486"]
    kept = run(usual + rise + [16.0, 17.5, 15.9] + [16 + 0.1 * (i % 4) for i in range(40)], 20, 25)
    assert kept.severity is Severity.WARNING and "transient" not in kept.evidence


# ---------------------------------------------------------------- BatchNorm in train() inside eval()
# (1) an EMA teacher put in eval() with its BatchNorms back in train(), called before the student
TEACHER_FIRST = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    torch.manual_seed(9)
    def net():
        return nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
    student, teacher = net(), net()
    teacher.load_state_dict(student.state_dict())
    for p in teacher.parameters():
        p.requires_grad_(False)
    opt = torch.optim.SGD(student.parameters(), lr=0.1)
    X = torch.randn(512, 8)
    Y = X[:, :4].argmax(1)
    for epoch in range(3):
        student.train()
        for i in range(0, 512, 64):
            x, y = X[i:i + 64], Y[i:i + 64]
            teacher.eval()
            for m in teacher.modules():
                if isinstance(m, nn.BatchNorm1d):
                    m.train()
            with torch.no_grad():
                soft = teacher(x + 0.1 * torch.randn_like(x)).softmax(1)
            out = student(x)
            loss = F.cross_entropy(out, y) + F.kl_div(out.log_softmax(1), soft, reduction="batchmean")
            opt.zero_grad()
            loss.backward()
            opt.step()
            with torch.no_grad():
                for pt, ps in zip(teacher.parameters(), student.parameters()):
                    pt.lerp_(ps, 0.05)
"""

# (2) a momentum key encoder in a class, called after the query encoder, with its own set_bn_train
KEY_ENCODER = """
    import copy
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def set_bn_train(model):
        model.eval()
        model.apply(lambda m: m.train() if isinstance(m, nn.modules.batchnorm._BatchNorm) else None)

    class MoCoLike(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Sequential(nn.Linear(12, 24), nn.BatchNorm1d(24), nn.ReLU(), nn.Linear(24, 8))
            self.k = copy.deepcopy(self.q)
            for p in self.k.parameters():
                p.requires_grad_(False)

    torch.manual_seed(10)
    m = MoCoLike()
    opt = torch.optim.SGD(m.q.parameters(), lr=0.05)
    for step in range(40):
        x = torch.randn(32, 12)
        q = F.normalize(m.q(x + 0.1 * torch.randn_like(x)), dim=1)
        set_bn_train(m.k)
        with torch.no_grad():
            k = F.normalize(m.k(x + 0.1 * torch.randn_like(x)), dim=1)
        loss = F.cross_entropy(q @ k.t() / 0.2, torch.arange(32))
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            for pk, pq in zip(m.k.parameters(), m.q.parameters()):
                pk.mul_(0.99).add_(pq, alpha=0.01)
"""


@pytest.mark.parametrize("src", [TEACHER_FIRST, KEY_ENCODER], ids=["ema_teacher_first", "key_encoder_after"])
def test_batch_statistics_in_a_forward_that_feeds_training_are_an_info(tmp_path, src):
    report, _ = _run(tmp_path, src)
    assert _warnings(report, "silent.eval_bn_updates") == []
    [f] = _codes(report, "silent.eval_bn_updates")
    assert f.severity.value == "info" and "output_fed_training" in f.evidence
    assert "fed a training step" in f.message


EVAL_BUG = """
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    def set_bn_train(model):  # copied from the key-encoder code into the evaluation: the bug
        model.eval()
        for m in model.modules():
            if isinstance(m, nn.BatchNorm1d):
                m.train()

    def evaluate(model, X, Y):
        set_bn_train(model)
        correct = 0
        with torch.no_grad():
            for i in range(0, len(X), 100):
                correct += (model(X[i:i + 100]).argmax(1) == Y[i:i + 100]).sum().item()  # HERE
        return correct / len(X)

    torch.manual_seed(11)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    X, Xv = torch.randn(512, 8), torch.randn(300, 8)
    Y, Yv = X[:, :4].argmax(1), Xv[:, :4].argmax(1)
    for epoch in range(3):
        model.train()
        for i in range(0, 512, 64):
            loss = F.cross_entropy(model(X[i:i + 64]), Y[i:i + 64])
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(epoch, evaluate(model, Xv, Yv))
"""


def test_an_evaluation_pass_with_batchnorm_in_train_is_a_warning(tmp_path):
    report, _ = _run(tmp_path, EVAL_BUG)
    [f] = _codes(report, "silent.eval_bn_updates")
    assert (f.severity.value, f.line) == ("warning", _line(EVAL_BUG))
    assert f.evidence["next_forward"].startswith("eval() mode again, no backward between")
    assert f.evidence["batchnorm_in_train_mode"] == ["1"]
