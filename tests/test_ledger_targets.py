"""Targets are no evaluation (`_ledger/_targets.py`): a teacher, an EMA or momentum model run
without gradients on the very input a training forward of another model takes computes targets;
its rows are not an evaluation set that overlaps the training rows. A held-out set that does
overlap is still reported next to such a teacher."""

from __future__ import annotations

import textwrap

from test_ledger import run_script


def _run(tmp_path, source):
    return run_script("prog.py", tmp_path, checks=("data_ledger",), source=textwrap.dedent(source))


def _overlaps(report):
    return [f for f in report.findings if f.code == "data.split_overlap"]


LM_DISTILL = """
import numpy as np, torch, torch.nn as nn, torch.nn.functional as F

class LM(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.emb, self.head = nn.Embedding(30, d), nn.Linear(d, 30)
    def forward(self, ids):
        return self.head(torch.cumsum(self.emb(ids), 1))

rng = np.random.RandomState(0)
train_tokens = torch.from_numpy(rng.randint(0, 30, (256, 40)))
valid_tokens = torch.from_numpy(rng.randint(0, 30, (32, 40)))
teacher, student = LM(32), LM(8)
opt_t = torch.optim.Adam(teacher.parameters(), 1e-2)
for step in range(40):
    b = train_tokens[torch.randint(0, 256, (16,))]
    loss = F.cross_entropy(teacher(b[:, :-1]).reshape(-1, 30), b[:, 1:].reshape(-1))
    opt_t.zero_grad(); loss.backward(); opt_t.step()
teacher.eval()

@torch.no_grad()
def evaluate(model):
    model.eval()
    out = F.cross_entropy(model(valid_tokens[:, :-1]).reshape(-1, 30), valid_tokens[:, 1:].reshape(-1)).item()
    model.train()
    return out

opt_s = torch.optim.Adam(student.parameters(), 1e-2)
for step in range(60):
    b = train_tokens[torch.randint(0, 256, (16,))]
    %s
    kd = F.kl_div(F.log_softmax(s, -1), F.softmax(t, -1), reduction="batchmean")
    loss = kd + F.cross_entropy(s.reshape(-1, 30), b[:, 1:].reshape(-1))
    opt_s.zero_grad(); loss.backward(); opt_s.step()
    if step %% 20 == 0:
        print(evaluate(student), evaluate(teacher))
"""

STUDENT_FIRST = "s = student(b[:, :-1])\n    with torch.no_grad():\n        t = teacher(b[:, :-1])"
TEACHER_FIRST = "with torch.no_grad():\n        t = teacher(b[:, :-1])\n    s = student(b[:, :-1])"


def test_token_distillation_student_first_is_no_evaluation(tmp_path):
    report, _ = _run(tmp_path, LM_DISTILL % STUDENT_FIRST)
    assert _overlaps(report) == []


def test_token_distillation_teacher_first_is_no_evaluation(tmp_path):
    report, _ = _run(tmp_path, LM_DISTILL % TEACHER_FIRST)
    assert _overlaps(report) == []


FEATURES_TRAINER = """
import torch, torch.nn as nn, torch.nn.functional as F, copy

torch.manual_seed(0)
X = torch.randn(600, 12)
y = (X[:, 0] > 0).long()
X_train, y_train = X[:500], y[:500]
X_val, y_val = X[%s:], y[%s:]

class MeanTeacherTrainer:
    def __init__(self):
        self.model = nn.Sequential(nn.Linear(12, 32), nn.ReLU(), nn.Linear(32, 2))
        self.ema = copy.deepcopy(self.model).eval()
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def consistency_targets(self, xb):
        with torch.no_grad():
            return F.softmax(self.ema(xb), -1)

    def train_step(self, xb, yb):
        targets = self.consistency_targets(xb)
        out = self.model(xb)
        loss = F.cross_entropy(out, yb) + F.mse_loss(F.softmax(out, -1), targets)
        self.opt.zero_grad(); loss.backward(); self.opt.step()
        with torch.no_grad():
            for pe, p in zip(self.ema.parameters(), self.model.parameters()):
                pe.mul_(0.9).add_(p, alpha=0.1)

    @torch.no_grad()
    def validate(self):
        self.model.eval()
        acc = (self.model(X_val).argmax(1) == y_val).float().mean().item()
        self.model.train()
        return acc

trainer = MeanTeacherTrainer()
for epoch in range(4):
    perm = torch.randperm(500)
    for i in range(0, 500, 50):
        idx = perm[i:i + 50]
        trainer.train_step(X_train[idx], y_train[idx])
    print(trainer.validate())  # HERE
"""


def test_mean_teacher_targets_are_no_evaluation(tmp_path):
    report, _ = _run(tmp_path, FEATURES_TRAINER % ("500", "500"))
    assert _overlaps(report) == []


def test_validation_inside_the_training_rows_still_found_next_to_a_teacher(tmp_path):
    # the validation rows start 100 rows early: 100 of its 200 rows are trained on
    report, _ = _run(tmp_path, FEATURES_TRAINER % ("400", "400"))
    [f] = _overlaps(report)
    assert f.severity.value == "error"
    assert f.evidence["count"] == 100


MOMENTUM_ENCODER = """
import torch, torch.nn as nn, torch.nn.functional as F

def make():
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 16))

def byol_epoch(online, target, images, opt):
    for i in range(0, len(images), 32):
        view = images[i:i + 32]
        with torch.no_grad():
            z_t = target(view)
        z_o = online(view + 0.1 * torch.randn_like(view))
        loss = 2 - 2 * F.cosine_similarity(z_o, z_t, dim=-1).mean()
        opt.zero_grad(); loss.backward(); opt.step()

torch.manual_seed(0)
images = torch.randn(256, 1, 8, 8)
online, target = make(), make()
target.load_state_dict(online.state_dict())
target.eval()
opt = torch.optim.Adam(online.parameters(), 1e-3)
for epoch in range(3):
    byol_epoch(online, target, images, opt)
"""


def test_momentum_encoder_on_another_view_is_quiet(tmp_path):
    report, _ = _run(tmp_path, MOMENTUM_ENCODER)
    assert _overlaps(report) == []
