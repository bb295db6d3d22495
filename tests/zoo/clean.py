"""Correct training loops that torchtriage must stay quiet on.

Each `loop_*` function builds its tiny model(s) and optimizer(s), and returns
`(models, optimizers, train)` where `train()` runs a few real steps. Tests run `train()` inside
`torchtriage.watch(models, optimizers)` and expect no warning and no error. `INFOS` names the
loops whose pattern deliberately earns an info, and which.
"""

from __future__ import annotations

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset

STEPS = 3


# ---------------------------------------------------------------------------- regression / classification
def loop_mlp_regression():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(32, 8), torch.randn(32, 1)

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    return model, opt, train


def loop_classifier_smoothing_weights():
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(24, 10), torch.randint(0, 5, (24,))
    crit = nn.CrossEntropyLoss(label_smoothing=0.1, weight=torch.tensor([1.0, 2.0, 1.0, 0.5, 1.5]))

    def train():
        for _ in range(STEPS):
            opt.zero_grad(set_to_none=True)
            logits = model(x)
            loss = crit(logits, y) + 0.5 * F.cross_entropy(logits, y, label_smoothing=0.05)
            loss.backward()
            opt.step()
    return model, opt, train


def loop_bce_multilabel():
    model = nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 6))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(16, 12)
    y = (torch.rand(16, 6) > 0.7).float()
    crit = nn.BCEWithLogitsLoss(pos_weight=torch.full((6,), 2.0))

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            loss = crit(model(x), y)
            loss.backward()
            opt.step()
    return model, opt, train


# ---------------------------------------------------------------------------- causal transformer LM
class TinyLM(nn.Module):
    def __init__(self, vocab: int = 50, d: int = 32, layers: int = 2, tie: bool = False) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d)
        self.pos = nn.Parameter(torch.zeros(1, 64, d))
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.1, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        if tie:
            self.head.weight = self.embed.weight

    def forward(self, ids, mask=None, key_padding_mask=None):
        h = self.embed(ids) + self.pos[:, : ids.shape[1]]
        h = self.encoder(h, mask=mask, is_causal=mask is not None, src_key_padding_mask=key_padding_mask)
        return self.head(self.norm(h))


def _lm_loop(mask_kind: str, tie: bool = False):
    torch.manual_seed(0)
    vocab, B, T = 50, 4, 12
    model = TinyLM(vocab, tie=tie)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    ids = torch.randint(1, vocab, (B, T))
    lengths = torch.tensor([12, 10, 7, 12])
    pad = torch.arange(T)[None, :] >= lengths[:, None]  # True = padding
    ids = ids.masked_fill(pad, 0)
    if mask_kind == "bool":
        mask = torch.triu(torch.ones(T, T, dtype=torch.bool), diagonal=1)
        key_padding = pad
    else:  # PyTorch wants both masks of one kind: -inf where attention is not allowed
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        key_padding = torch.zeros(B, T).masked_fill(pad, float("-inf"))
    labels = ids.clone()
    labels[pad] = -100

    def train():
        model.train()
        for _ in range(STEPS):
            opt.zero_grad()
            logits = model(ids, mask=mask, key_padding_mask=key_padding)
            # shift: position t predicts token t+1
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, vocab), labels[:, 1:].reshape(-1), ignore_index=-100)
            loss.backward()
            opt.step()
    return model, opt, train


def loop_lm_bool_mask():
    return _lm_loop("bool")


def loop_lm_float_mask():
    return _lm_loop("float")


def loop_lm_weight_tying():
    return _lm_loop("float", tie=True)


# ---------------------------------------------------------------------------- CNN + BatchNorm
class SmallCNN(nn.Module):
    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        return self.fc(torch.flatten(self.features(x), 1))


def loop_cnn_batchnorm_eval():
    model = SmallCNN()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = torch.randn(8, 3, 16, 16), torch.randint(0, 4, (8,))
    xv, yv = torch.randn(8, 3, 16, 16), torch.randint(0, 4, (8,))

    def train():
        for epoch in range(2):
            model.train()
            for _ in range(2):
                opt.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                opt.step()
            model.eval()
            if epoch == 0:
                with torch.no_grad():
                    F.cross_entropy(model(xv), yv)
            else:
                with torch.inference_mode():
                    model(xv).argmax(1).eq(yv).float().mean()
    return model, opt, train


# ---------------------------------------------------------------------------- mixed precision on CPU
def loop_autocast_bf16():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 16), torch.randint(0, 4, (16,))

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(x)
                loss = F.cross_entropy(logits, y)
            loss.backward()
            opt.step()
    return model, opt, train


def loop_autocast_bf16_scaler():
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu")
    x, y = torch.randn(16, 16), torch.randint(0, 4, (16,))

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                loss = F.cross_entropy(model(x), y)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            scaler.step(opt)
            scaler.update()
    return model, opt, train


# ---------------------------------------------------------------------------- optimisation patterns
def loop_grad_accumulation():
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    xs, ys = torch.randn(16, 8), torch.randint(0, 3, (16,))
    accum = 4

    def train():
        opt.zero_grad()
        for i in range(2 * accum):
            mb = slice(2 * (i % 8), 2 * (i % 8) + 2)
            loss = F.cross_entropy(model(xs[mb]), ys[mb]) / accum
            loss.backward()
            if (i + 1) % accum == 0:
                opt.step()
                opt.zero_grad()
    return model, opt, train


def loop_clip_and_warmup():
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    warmup = 3
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / warmup))  # lr 0 at step 0
    x, y = torch.randn(16, 8), torch.randn(16, 1)

    def train():
        for _ in range(5):
            opt.zero_grad()
            loss = F.smooth_l1_loss(model(x), y)
            loss.backward()
            nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
            nn.utils.clip_grad_value_(model.parameters(), 0.5)
            opt.step()
            sched.step()
    return model, opt, train


def loop_frozen_backbone():
    backbone = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 16), nn.ReLU())
    model = nn.Sequential()
    model.add_module("backbone", backbone)
    model.add_module("head", nn.Linear(16, 3))
    for p in backbone.parameters():
        p.requires_grad_(False)
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))

    def train():
        backbone.eval()
        model.head.train()
        for _ in range(STEPS):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    return model, opt, train


def loop_linear_probe_eval_mode():
    """Linear probing: the whole model in eval() (frozen backbone's BN and dropout fixed), head trained."""
    backbone = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Dropout(0.2)).requires_grad_(False)
    model = nn.Sequential()
    model.add_module("backbone", backbone)
    model.add_module("head", nn.Linear(16, 3))
    opt = torch.optim.SGD(model.head.parameters(), lr=0.1)
    x, y = torch.randn(16, 8), torch.randint(0, 3, (16,))

    def train():
        model.eval()
        for _ in range(STEPS):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    return model, opt, train


def loop_ema_teacher():
    student = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    ema = copy.deepcopy(student)
    for p in ema.parameters():
        p.requires_grad_(False)
    opt = torch.optim.SGD(student.parameters(), lr=0.05)
    x, y = torch.randn(16, 8), torch.randint(0, 4, (16,))

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            loss = F.cross_entropy(student(x), y)
            loss.backward()
            opt.step()
            with torch.no_grad():
                for pe, ps in zip(ema.parameters(), student.parameters()):
                    pe.mul_(0.99).add_(ps, alpha=0.01)
            with torch.no_grad():
                ema(x)
    return [student, ema], opt, train


def loop_lbfgs_closure():
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    opt = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=4)
    x, y = torch.randn(16, 4), torch.randn(16, 1)

    def train():
        for _ in range(2):
            def closure():
                opt.zero_grad()
                loss = F.mse_loss(model(x), y)
                loss.backward()
                return loss
            opt.step(closure)
    return model, opt, train


# ---------------------------------------------------------------------------- multiple networks
class Generator(nn.Module):
    def __init__(self, nz: int = 8) -> None:
        super().__init__()
        self.main = nn.Sequential(nn.Linear(nz, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 12), nn.Tanh())

    def forward(self, z):
        return self.main(z)


class Discriminator(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.main = nn.Sequential(nn.Linear(12, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1), nn.Sigmoid())

    def forward(self, x):
        return self.main(x).view(-1)


def loop_gan_dcgan():
    """The update order of the PyTorch DCGAN example (BCELoss on a Sigmoid output)."""
    netG, netD = Generator(), Discriminator()
    optD = torch.optim.Adam(netD.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optG = torch.optim.Adam(netG.parameters(), lr=2e-4, betas=(0.5, 0.999))
    criterion = nn.BCELoss()
    real = torch.rand(8, 12) * 2 - 1

    def train():
        for _ in range(STEPS):
            # (1) Update D: maximize log(D(x)) + log(1 - D(G(z)))
            netD.zero_grad()
            label = torch.full((8,), 1.0)
            errD_real = criterion(netD(real), label)
            errD_real.backward()
            fake = netG(torch.randn(8, 8))
            label.fill_(0.0)
            errD_fake = criterion(netD(fake.detach()), label)
            errD_fake.backward()
            optD.step()
            # (2) Update G: maximize log(D(G(z)))
            netG.zero_grad()
            label.fill_(1.0)
            errG = criterion(netD(fake), label)
            errG.backward()
            optG.step()
    return [netG, netD], [optD, optG], train


class ActorCritic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(6, 16), nn.Tanh())
        self.policy = nn.Linear(16, 3)
        self.value = nn.Linear(16, 1)

    def forward(self, obs):
        h = self.body(obs)
        return self.policy(h), self.value(h).squeeze(-1)


def loop_actor_critic():
    model = ActorCritic()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    obs, next_obs = torch.randn(16, 6), torch.randn(16, 6)
    reward, done = torch.randn(16), (torch.rand(16) > 0.9).float()
    gamma = 0.99

    def train():
        for _ in range(STEPS):
            logits, value = model(obs)
            with torch.no_grad():
                _, next_value = model(next_obs)
            target = reward + gamma * (1 - done) * next_value
            advantage = (target - value).detach()
            dist = torch.distributions.Categorical(logits=logits)
            action = dist.sample()
            policy_loss = -(dist.log_prob(action) * advantage).mean()
            value_loss = F.mse_loss(value, target.detach())
            loss = policy_loss + 0.5 * value_loss - 0.01 * dist.entropy().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


def loop_distillation():
    teacher = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 5)).eval()
    for p in teacher.parameters():
        p.requires_grad_(False)
    student = nn.Sequential(nn.Linear(10, 8), nn.ReLU(), nn.Linear(8, 5))
    opt = torch.optim.Adam(student.parameters(), lr=1e-3)
    x, y = torch.randn(16, 10), torch.randint(0, 5, (16,))
    T = 2.0

    def train():
        for _ in range(STEPS):
            with torch.no_grad():
                t_logits = teacher(x)
            s_logits = student(x)
            soft = F.kl_div(F.log_softmax(s_logits / T, dim=-1), F.softmax(t_logits / T, dim=-1),
                            reduction="batchmean") * T * T
            hard = F.cross_entropy(s_logits, y)
            loss = 0.7 * soft + 0.3 * hard
            opt.zero_grad()
            loss.backward()
            opt.step()
    return [student, teacher], opt, train


# ---------------------------------------------------------------------------- sequence models
class Seq2Seq(nn.Module):
    def __init__(self, vocab: int = 30, d: int = 16) -> None:
        super().__init__()
        self.src_embed = nn.Embedding(vocab, d, padding_idx=0)
        self.tgt_embed = nn.Embedding(vocab, d, padding_idx=0)
        self.encoder = nn.GRU(d, d, batch_first=True)
        self.decoder = nn.GRU(d, d, batch_first=True)
        self.out = nn.Linear(d, vocab)

    def forward(self, src, tgt_in):
        _, h = self.encoder(self.src_embed(src))
        y, _ = self.decoder(self.tgt_embed(tgt_in), h)
        return self.out(y)


def loop_seq2seq_padding_idx():
    vocab = 30
    model = Seq2Seq(vocab)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    src = torch.randint(1, vocab, (4, 7))
    src[1, 5:] = 0
    tgt = torch.randint(3, vocab, (4, 6))
    tgt[:, 0] = 1  # BOS
    tgt[2, 4:] = 0
    tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            logits = model(src, tgt_in)
            loss = F.cross_entropy(logits.reshape(-1, vocab), tgt_out.reshape(-1), ignore_index=0)
            loss.backward()
            opt.step()
    return model, opt, train


class Siamese(nn.Module):
    """One encoder applied to both inputs in every step."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))
        self.head = nn.Linear(1, 1)

    def forward(self, a, b):
        za, zb = self.encoder(a), self.encoder(b)
        return self.head(F.cosine_similarity(za, zb).unsqueeze(-1)).squeeze(-1)


def loop_module_called_twice():
    model = Siamese()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    a, b = torch.randn(16, 8), torch.randn(16, 8)
    same = (torch.rand(16) > 0.5).float()

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            loss = F.binary_cross_entropy_with_logits(model(a, b), same)
            loss.backward()
            opt.step()
    return model, opt, train


class CheckpointedMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(16, 16), nn.GELU()) for _ in range(3)])
        self.out = nn.Linear(16, 2)

    def forward(self, x):
        for blk in self.blocks:
            x = checkpoint(blk, x, use_reentrant=False)
        return self.out(x)


def loop_activation_checkpointing():
    model = CheckpointedMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(8, 16), torch.randint(0, 2, (8,))

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
    return model, opt, train


def loop_dataloader_with_validation():
    g = torch.Generator().manual_seed(0)
    X, Y = torch.randn(40, 6), torch.randn(40, 1)
    train_dl = DataLoader(TensorDataset(X[:32], Y[:32]), batch_size=8, shuffle=True, generator=g)
    val_dl = DataLoader(TensorDataset(X[32:], Y[32:]), batch_size=8)
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Dropout(0.1), nn.Linear(12, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def train():
        for _ in range(2):
            model.train()
            for xb, yb in train_dl:
                opt.zero_grad()
                loss = F.mse_loss(model(xb), yb)
                loss.backward()
                opt.step()
            model.eval()
            total = torch.zeros(())
            with torch.no_grad():
                for xb, yb in val_dl:
                    total += F.mse_loss(model(xb), yb, reduction="sum")
    return model, opt, train


def loop_contrastive_infonce():
    """SimCLR-style: a (N, N) cosine-similarity matrix over two views, cross_entropy on arange."""
    encoder = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Linear(32, 16))
    opt = torch.optim.Adam(encoder.parameters(), lr=1e-3)
    x = torch.randn(12, 10)
    tau = 0.1

    def train():
        for _ in range(STEPS):
            v1, v2 = x + 0.1 * torch.randn_like(x), x + 0.1 * torch.randn_like(x)
            z1, z2 = F.normalize(encoder(v1), dim=-1), F.normalize(encoder(v2), dim=-1)
            sim = z1 @ z2.T / tau  # (N, N)
            # the same similarities through an explicit outer broadcast
            sim_b = (z1[:, None, :] * z2[None, :, :]).sum(-1) / tau
            targets = torch.arange(x.shape[0])
            loss = (F.cross_entropy(sim, targets) + F.cross_entropy(sim_b.T, targets)) / 2
            opt.zero_grad()
            loss.backward()
            opt.step()
    return encoder, opt, train


def loop_masked_mse():
    model = nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 5))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 5), torch.randn(16, 5)
    mask = (torch.rand(16, 5) > 0.3).float()

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            per = F.mse_loss(model(x), y, reduction="none")
            loss = (per * mask).sum() / mask.sum()
            loss.backward()
            opt.step()
    return model, opt, train


class DictModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(6, 16), nn.ReLU())
        self.cls = nn.Linear(16, 3)
        self.reg = nn.Linear(16, 1)

    def forward(self, x):
        h = self.trunk(x)
        return {"logits": self.cls(h), "value": self.reg(h).squeeze(-1), "hidden": h}


def loop_dict_output():
    model = DictModel()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y, v = torch.randn(16, 6), torch.randint(0, 3, (16,)), torch.randn(16)

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            out = model(x)
            loss = F.cross_entropy(out["logits"], y) + F.mse_loss(out["value"], v)
            loss.backward()
            opt.step()
    return model, opt, train


class ShiftingLM(TinyLM):
    """Hugging Face style: `model(input_ids, labels=input_ids)` shifts inside forward."""

    def forward(self, input_ids, labels=None, attention_mask=None):
        T = input_ids.shape[1]
        causal = nn.Transformer.generate_square_subsequent_mask(T)
        pad = attention_mask == 0 if attention_mask is not None else None
        h = self.embed(input_ids) + self.pos[:, :T]
        key_padding = None if pad is None else torch.zeros(pad.shape).masked_fill(pad, float("-inf"))
        h = self.encoder(h, mask=causal, is_causal=True, src_key_padding_mask=key_padding)
        logits = self.head(self.norm(h))
        loss = None
        if labels is not None:
            loss = F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]), labels[:, 1:].reshape(-1))
        return {"loss": loss, "logits": logits}


def loop_lm_shifts_inside_forward():
    torch.manual_seed(0)
    model = ShiftingLM(50)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(1, 50, (4, 10))
    attention_mask = torch.ones(4, 10, dtype=torch.long)
    attention_mask[1, 7:] = 0
    ids = ids.masked_fill(attention_mask == 0, 0)
    labels = ids.masked_fill(attention_mask == 0, -100)

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            out = model(ids, labels=labels, attention_mask=attention_mask)
            out["loss"].backward()
            opt.step()
    return model, opt, train


class Encoder(nn.Module):
    """A bidirectional encoder (no causal mask) with a masked mean pool and two heads."""

    def __init__(self, vocab: int = 40, d: int = 32, classes: int = 3) -> None:
        super().__init__()
        self.embed = nn.Embedding(vocab, d, padding_idx=0)
        layer = nn.TransformerEncoderLayer(d, 4, 2 * d, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.mlm = nn.Linear(d, vocab)
        self.cls = nn.Linear(d, classes)

    def forward(self, input_ids, attention_mask):
        pad = attention_mask == 0
        h = self.encoder(self.embed(input_ids), src_key_padding_mask=pad)
        keep = attention_mask.unsqueeze(-1).to(h.dtype)
        pooled = (h * keep).sum(1) / keep.sum(1).clamp(min=1)
        return self.mlm(h), self.cls(pooled)


def loop_bert_mlm_and_classifier():
    """Masked LM with the 80/10/10 rule (some labels equal the unchanged input token) plus a
    sentence classifier on a padding-masked mean pool."""
    torch.manual_seed(0)
    vocab, MASK = 40, 1
    model = Encoder(vocab)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(2, vocab, (6, 12))
    attention_mask = torch.ones(6, 12, dtype=torch.long)
    attention_mask[2, 8:] = 0
    attention_mask[4, 5:] = 0
    ids = ids.masked_fill(attention_mask == 0, 0)
    y = torch.randint(0, 3, (6,))

    def train():
        for _ in range(STEPS):
            chosen = (torch.rand(ids.shape) < 0.3) & (attention_mask == 1)
            labels = ids.masked_fill(~chosen, -100)
            r = torch.rand(ids.shape)
            inputs = ids.masked_fill(chosen & (r < 0.8), MASK)
            rnd = chosen & (r >= 0.8) & (r < 0.9)
            inputs = torch.where(rnd, torch.randint(2, vocab, ids.shape), inputs)
            opt.zero_grad()
            mlm_logits, cls_logits = model(inputs, attention_mask=attention_mask)
            loss = F.cross_entropy(mlm_logits.reshape(-1, vocab), labels.reshape(-1)) + F.cross_entropy(cls_logits, y)
            loss.backward()
            opt.step()
    return model, opt, train


def loop_token_classification():
    """NER-style tagging: one label per input token, padding labelled -100."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Embedding(30, 16, padding_idx=0), nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 5))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    ids = torch.randint(1, 30, (4, 9))
    ids[3, 6:] = 0
    tags = torch.randint(0, 5, (4, 9)).masked_fill(ids == 0, -100)

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            logits = model(ids)
            loss = F.cross_entropy(logits.transpose(1, 2), tags)
            loss.backward()
            opt.step()
    return model, opt, train


def loop_autoencoder():
    model = nn.Sequential(nn.Linear(8, 3), nn.ReLU(), nn.Linear(3, 8))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.randn(16, 8)

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            noisy = x + 0.1 * torch.randn_like(x)
            loss = F.mse_loss(model(noisy), x)
            loss.backward()
            opt.step()
    return model, opt, train


def loop_softmax_attention_by_hand():
    """Scaled dot-product attention written out: scores / sqrt(d), masked_fill(-inf), softmax."""
    class Attn(nn.Module):
        def __init__(self, d: int = 16) -> None:
            super().__init__()
            self.qkv = nn.Linear(d, 3 * d)
            self.out = nn.Linear(d, 1)

        def forward(self, x):
            q, k, v = self.qkv(x).chunk(3, dim=-1)
            scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            T = x.shape[1]
            scores = scores.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float("-inf"))
            return self.out(torch.softmax(scores, dim=-1) @ v).squeeze(-1)

    model = Attn()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 6, 16), torch.randn(4, 6)

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    return model, opt, train


def loop_running_loss_logging():
    """Logs with loss.item() / detach() and keeps a list of detached losses."""
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    x, y = torch.randn(16, 4), torch.randn(16, 1)
    history = []

    def train():
        running = 0.0
        for _ in range(STEPS + 2):
            opt.zero_grad()
            loss = F.l1_loss(model(x), y)
            loss.backward()
            opt.step()
            running += loss.item()
            history.append(loss.detach())
    return model, opt, train


# ---------------------------------------------------------------------------- conditional computation
class MoE(nn.Module):
    """Top-1 routing: an expert that gets no token in a step gets no gradient in that step."""

    def __init__(self, experts: int = 4) -> None:
        super().__init__()
        self.gate = nn.Linear(6, experts)
        self.experts = nn.ModuleList([nn.Linear(6, 6) for _ in range(experts)])
        self.out = nn.Linear(6, 4)

    def forward(self, x):
        weights = torch.softmax(self.gate(x), -1)
        choice = weights.argmax(-1)
        h = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            sel = choice == e
            if sel.any():
                h[sel] = expert(x[sel]) * weights[sel, e:e + 1]
        return self.out(h)


def loop_mixture_of_experts():
    torch.manual_seed(3)
    model = MoE()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(4, 6) + torch.tensor([3.0, 0, 0, 0, 0, 0]), torch.randint(0, 4, (4,))
    xs = torch.randn(32, 6)

    def train():
        for i in range(4):
            opt.zero_grad()
            batch = x if i < 2 else xs  # the first batches reach one expert only
            F.cross_entropy(model(batch), torch.randint(0, 4, (batch.shape[0],))).backward()
            opt.step()
    return model, opt, train


class AuxHead(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Linear(6, 16)
        self.main = nn.Linear(16, 4)
        self.aux = nn.Linear(16, 1)

    def forward(self, x, with_aux=False):
        h = F.relu(self.body(x))
        return self.main(h), (self.aux(h) if with_aux else None)


def loop_aux_loss_every_third_step():
    model = AuxHead()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y, target = torch.randn(16, 6), torch.randint(0, 4, (16,)), torch.randn(16, 1)

    def train():
        for i in range(6):
            opt.zero_grad()
            logits, aux = model(x, with_aux=i % 3 == 2)
            loss = F.cross_entropy(logits, y)
            if aux is not None:
                loss = loss + 0.1 * F.mse_loss(aux, target)
            loss.backward()
            opt.step()
    return model, opt, train


class StochasticDepth(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(6, 6) for _ in range(4)])
        self.out = nn.Linear(6, 4)

    def forward(self, x):
        for block in self.blocks:
            if self.training and torch.rand(()) < 0.5:
                continue  # the block is dropped for this batch
            x = x + F.relu(block(x))
        return self.out(x)


def loop_stochastic_depth():
    torch.manual_seed(1)
    model = StochasticDepth()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 6), torch.randint(0, 4, (16,))

    def train():
        for _ in range(8):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    return model, opt, train


# ---------------------------------------------------------------------------- more GAN / generative
def loop_wgan_gp_n_critic():
    """WGAN-GP: 5 critic steps per generator step; the penalty differentiates through an
    interpolated input made with requires_grad_(True)."""
    G = nn.Sequential(nn.Linear(2, 8), nn.ReLU(), nn.Linear(8, 4))
    D = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
    optG = torch.optim.Adam(G.parameters(), 1e-4, betas=(0.0, 0.9))
    optD = torch.optim.Adam(D.parameters(), 1e-4, betas=(0.0, 0.9))
    real = torch.randn(8, 4)

    def train():
        for _ in range(2):
            for _ in range(5):
                optD.zero_grad()
                fake = G(torch.randn(8, 2)).detach()
                a = torch.rand(8, 1)
                mixed = (a * real + (1 - a) * fake).requires_grad_(True)
                grad, = torch.autograd.grad(D(mixed).sum(), mixed, create_graph=True)
                penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
                (D(fake).mean() - D(real).mean() + 10 * penalty).backward()
                optD.step()
            optG.zero_grad()
            (-D(G(torch.randn(8, 2))).mean()).backward()
            optG.step()
    return [G, D], [optD, optG], train


class VAE(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Linear(12, 8)
        self.mu = nn.Linear(8, 2)
        self.logvar = nn.Linear(8, 2)
        self.dec = nn.Linear(2, 12)

    def forward(self, x):
        h = F.relu(self.enc(x))
        mu, logvar = self.mu(h), self.logvar(h)
        z = mu + torch.randn_like(mu) * torch.exp(0.5 * logvar)
        return self.dec(z), mu, logvar


def loop_vae():
    model = VAE()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x = torch.rand(16, 12)

    def train():
        for _ in range(STEPS):
            recon, mu, logvar = model(x)
            kl = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp()) / x.shape[0]
            loss = F.binary_cross_entropy_with_logits(recon, x, reduction="sum") / x.shape[0] + kl
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


# ---------------------------------------------------------------------------- more losses
def loop_mixup_soft_targets():
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 6), torch.randint(0, 4, (16,))

    def train():
        for _ in range(STEPS):
            lam, perm = 0.7, torch.randperm(16)
            mixed = lam * x + (1 - lam) * x[perm]
            soft = lam * F.one_hot(y, 4).float() + (1 - lam) * F.one_hot(y[perm], 4).float()
            opt.zero_grad()
            F.cross_entropy(model(mixed), soft).backward()
            opt.step()
    return model, opt, train


def loop_nll_focal_and_bce_on_probabilities():
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(16, 6), torch.randint(0, 4, (16,))

    def train():
        for _ in range(STEPS):
            logits = model(x)
            ce = F.cross_entropy(logits, y, reduction="none")
            focal = ((1 - torch.exp(-ce)) ** 2 * ce).mean()
            loss = (F.nll_loss(F.log_softmax(logits, dim=1), y) + focal
                    + F.binary_cross_entropy(torch.sigmoid(logits), F.one_hot(y, 4).float()))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


def loop_l1_regression():
    """Median regression: L1's bias gradient can cancel exactly when the residuals balance."""
    model = nn.Linear(4, 1)
    x = torch.randn(16, 4)
    with torch.no_grad():
        y = model(x) + torch.tensor([1.0, -1.0]).repeat(8).unsqueeze(1)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            F.l1_loss(model(x), y).backward()
            opt.step()
    return model, opt, train


# ---------------------------------------------------------------------------- schedules and inits
def loop_per_epoch_warmup():
    # (session 15: a factor of 0 at epoch 0, `epoch / 3`, runs the whole first epoch at lr 0 and is
    # `dynamics.warmup_steps_at_lr_zero`, tests/test_sched_s15.py; per-step warm-ups from 0, which lose
    # one step, stay in this zoo: zero_init_residual_with_warmup, linear_schedule_with_warmup_per_batch)
    model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda epoch: min(1.0, (epoch + 1) / 3))
    x, y = torch.randn(16, 6), torch.randint(0, 4, (16,))

    def train():
        for _ in range(3):
            for _ in range(3):
                opt.zero_grad()
                F.cross_entropy(model(x), y).backward()
                opt.step()
            sched.step()
    return model, opt, train


class ZeroInitResidual(nn.Module):
    """Residual block whose last BatchNorm starts at gamma = 0 (Goyal et al., 2017)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(6, 6)
        self.bn = nn.BatchNorm1d(6)
        nn.init.zeros_(self.bn.weight)

    def forward(self, x):
        return F.relu(x + self.bn(self.fc(x)))


def loop_zero_init_residual_with_warmup():
    model = nn.Sequential(ZeroInitResidual(), ZeroInitResidual(), nn.Linear(6, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 5))
    x, y = torch.randn(16, 6), torch.randint(0, 4, (16,))

    def train():
        for _ in range(4):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
            sched.step()
    return model, opt, train


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, rank: int = 2) -> None:
        super().__init__()
        self.base = base.requires_grad_(False)
        self.A = nn.Parameter(torch.randn(rank, base.in_features) * 0.01)
        self.B = nn.Parameter(torch.zeros(base.out_features, rank))  # starts as a no-op

    def forward(self, x):
        return self.base(x) + x @ self.A.T @ self.B.T


def loop_lora():
    model = nn.Sequential(LoRALinear(nn.Linear(6, 16)), nn.ReLU(), LoRALinear(nn.Linear(16, 4)))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3)
    x, y = torch.randn(16, 6), torch.randint(0, 4, (16,))

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
    return model, opt, train


def loop_weight_norm_spectral_norm():
    from torch.nn.utils import parametrizations as P

    model = nn.Sequential(P.weight_norm(nn.Linear(6, 16)), nn.ReLU(), P.spectral_norm(nn.Linear(16, 4)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    x, y = torch.randn(16, 6), torch.randint(0, 4, (16,))

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            F.cross_entropy(model(x), y).backward()
            opt.step()
        model.eval()
        with torch.no_grad():
            model(x)
    return model, opt, train


def loop_sparse_embedding_two_optimizers():
    emb, head = nn.Embedding(50, 8, sparse=True), nn.Linear(8, 4)
    model = nn.ModuleDict({"emb": emb, "head": head})
    opt_sparse = torch.optim.SparseAdam(list(emb.parameters()), lr=1e-2)
    opt_dense = torch.optim.Adam(head.parameters(), lr=1e-3)
    ids, y = torch.randint(0, 50, (16, 5)), torch.randint(0, 4, (16,))

    def train():
        for _ in range(STEPS):
            opt_sparse.zero_grad()
            opt_dense.zero_grad()
            F.cross_entropy(head(emb(ids).mean(1)), y).backward()
            opt_sparse.step()
            opt_dense.step()
    return model, [opt_sparse, opt_dense], train


def loop_attention_sdpa_mha_bf16():
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(30, 16)
            self.qkv = nn.Linear(16, 48)
            self.mha = nn.MultiheadAttention(16, 2, batch_first=True)
            self.out = nn.Linear(16, 30)

        def forward(self, ids):
            h = self.embed(ids)
            B, T, D = h.shape
            q, k, v = self.qkv(h).view(B, T, 3, 2, 8).permute(2, 0, 3, 1, 4)
            h = h + F.scaled_dot_product_attention(q, k, v, is_causal=True).transpose(1, 2).reshape(B, T, D)
            mask = torch.triu(torch.full((T, T), float("-inf")), 1)
            h = h + self.mha(h, h, h, attn_mask=mask, need_weights=False)[0]
            return self.out(h)

    model = Block()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    ids = torch.randint(0, 30, (4, 10))

    def train():
        for _ in range(STEPS):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(ids)
                loss = F.cross_entropy(logits[:, :-1].reshape(-1, 30), ids[:, 1:].reshape(-1))
            opt.zero_grad()
            loss.backward()
            opt.step()
    return model, opt, train


def loop_moco_key_encoder():
    """MoCo-style: a momentum key encoder (with batch norm, in train mode) run under no_grad."""
    query = nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 8))
    key = copy.deepcopy(query).requires_grad_(False)
    opt = torch.optim.SGD(query.parameters(), lr=0.1)
    x = torch.randn(16, 6)

    def train():
        for _ in range(STEPS):
            with torch.no_grad():
                for pk, pq in zip(key.parameters(), query.parameters()):
                    pk.mul_(0.99).add_(pq.detach(), alpha=0.01)
                k = F.normalize(key(x + 0.1 * torch.randn_like(x)), dim=1)
            q = F.normalize(query(x + 0.1 * torch.randn_like(x)), dim=1)
            opt.zero_grad()
            F.cross_entropy(q @ k.T / 0.2, torch.arange(16)).backward()
            opt.step()
    return [query, key], opt, train


def loop_correction_seq2seq():
    """Error correction: the source is the target with 5% of the tokens corrupted; the decoder
    reads the target shifted right (BOS first)."""
    vocab = 40
    model = Seq2Seq(vocab)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    tgt = torch.randint(3, vocab, (8, 12))
    src = torch.where(torch.rand(tgt.shape) < 0.05, torch.randint(3, vocab, tgt.shape), tgt)
    tgt_in = torch.cat([torch.ones(8, 1, dtype=torch.long), tgt[:, :-1]], 1)

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            F.cross_entropy(model(src, tgt_in).reshape(-1, vocab), tgt.reshape(-1)).backward()
            opt.step()
    return model, opt, train


class PackedLSTMClassifier(nn.Module):
    """Variable-length sequences through a packed, bidirectional 2-layer LSTM (issue 10: its
    evaluation under no_grad made views that the gradient tracer could not read)."""

    def __init__(self, vocab: int = 20, classes: int = 3) -> None:
        super().__init__()
        self.emb = nn.Embedding(vocab, 8, padding_idx=0)
        self.lstm = nn.LSTM(8, 16, num_layers=2, bidirectional=True)
        self.out = nn.Linear(32, classes)

    def forward(self, ids: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
        packed = nn.utils.rnn.pack_padded_sequence(self.emb(ids), lengths)
        o, _ = self.lstm(packed)
        o, n = nn.utils.rnn.pad_packed_sequence(o)
        return self.out(o.sum(0) / n.unsqueeze(1))


def loop_lstm_packed_sequences():
    model = PackedLSTMClassifier()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    lengths = torch.tensor([7, 5, 3, 2])
    ids = torch.randint(1, 20, (7, 4)) * (torch.arange(7)[:, None] < lengths).long()
    y = torch.randint(0, 3, (4,))

    def train():
        for _ in range(STEPS + 1):
            model.train()
            opt.zero_grad()
            F.cross_entropy(model(ids, lengths), y).backward()
            opt.step()
            model.eval()
            with torch.no_grad():
                model(ids, lengths)
    return model, opt, train


def loop_lazy_modules():
    """Lazy modules: the optimizer holds parameters that have no size until the first forward."""
    model = nn.Sequential(nn.LazyConv2d(4, 3), nn.LazyBatchNorm2d(), nn.ReLU(), nn.Flatten(), nn.LazyLinear(1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    x, y = torch.randn(8, 3, 6, 6), torch.randn(8, 1)

    def train():
        for _ in range(STEPS):
            opt.zero_grad()
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
    return model, opt, train


# ---------------------------------------------------------------------------- schedules over many steps (issue 19)
def _learnable(n: int = 256):
    g = torch.Generator().manual_seed(3)
    x = torch.randn(n, 8, generator=g)
    return x, (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()


def _mlp():
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 4))


def _batches(x, y, size=16):
    return [(x[i:i + size], y[i:i + size]) for i in range(0, len(x), size)]


def _fit(model, opt, batches, epochs, per_batch=None, per_epoch=None, evaluate=None):
    def train():
        for _ in range(epochs):
            model.train()
            for xb, yb in batches:
                loss = F.cross_entropy(model(xb), yb)
                opt.zero_grad()
                loss.backward()
                opt.step()
                if per_batch is not None:
                    per_batch()
            if evaluate is not None:
                evaluate()
            if per_epoch is not None:
                per_epoch()
    return train


def loop_warmup_then_cosine_per_batch():
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = _learnable()
    batches = _batches(x, y)
    epochs, warmup = 8, 16
    total = epochs * len(batches)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: s / warmup if s < warmup else 0.5 * (1 + math.cos(math.pi * (s - warmup) / (total - warmup))))
    return model, opt, _fit(model, opt, batches, epochs, per_batch=sched.step)


def loop_linear_schedule_with_warmup_per_batch():
    model = _mlp()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    x, y = _learnable()
    batches = _batches(x, y)
    epochs, warmup = 8, 10
    total = epochs * len(batches)  # num_training_steps counts batches: the scheduler steps per batch
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: s / warmup if s < warmup else max(0.0, (total - s) / (total - warmup)))
    return model, opt, _fit(model, opt, batches, epochs, per_batch=sched.step)


def loop_one_cycle_per_batch():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x, y = _learnable()
    batches = _batches(x, y)
    epochs = 8
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.1, epochs=epochs, steps_per_epoch=len(batches))
    return model, opt, _fit(model, opt, batches, epochs, per_batch=sched.step)


def loop_cosine_annealing_per_batch_total_steps():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = _learnable()
    batches = _batches(x, y)
    epochs = 8
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs * len(batches))
    return model, opt, _fit(model, opt, batches, epochs, per_batch=sched.step)


def loop_epoch_schedulers_per_epoch():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = _learnable()
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)
    cos_model = _mlp()
    cos_opt = torch.optim.Adam(cos_model.parameters(), lr=3e-3)
    cos = torch.optim.lr_scheduler.CosineAnnealingLR(cos_opt, T_max=8)
    batches = _batches(x, y)

    def train():
        for _ in range(8):
            for xb, yb in batches:
                for m, o in ((model, opt), (cos_model, cos_opt)):
                    loss = F.cross_entropy(m(xb), yb)
                    o.zero_grad()
                    loss.backward()
                    o.step()
            sched.step()
            cos.step()
    return [model, cos_model], [opt, cos_opt], train


def loop_reduce_on_plateau_with_validation():
    model = nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Dropout(0.1), nn.Linear(32, 4))
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, factor=0.5, patience=1)
    x, y = _learnable(320)
    batches = _batches(x[:256], y[:256])
    xv, yv = x[256:], y[256:]
    accs = []

    def evaluate():
        model.eval()
        with torch.no_grad():
            logits = model(xv)
            accs.append((logits.argmax(dim=1) == yv).float().mean().item())
            sched.step(F.cross_entropy(logits, yv).item())
        model.train()
    return model, opt, _fit(model, opt, batches, 8, evaluate=evaluate)


def loop_exponential_decay_per_batch_gentle():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = _learnable()
    sched = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.995)  # tuned for per-batch stepping
    return model, opt, _fit(model, opt, _batches(x, y), 8, per_batch=sched.step)


def loop_accumulation_divided_with_clipping():
    model = _mlp()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = _learnable()
    batches = _batches(x, y, 8)
    accum = 4

    def train():
        for i, (xb, yb) in enumerate(batches * 2):
            loss = F.cross_entropy(model(xb), yb) / accum
            loss.backward()
            if (i + 1) % accum == 0:
                nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
                opt.zero_grad()
    return model, opt, train


LOOPS = {name[len("loop_"):]: fn for name, fn in sorted(globals().items()) if name.startswith("loop_")}

# loops whose pattern deliberately earns an info: name -> the info codes expected (sorted)
INFOS: dict[str, list[str]] = {
    "frozen_backbone": ["gradient.frozen"],
    "linear_probe_eval_mode": ["gradient.frozen"],
    "lora": ["gradient.frozen", "gradient.frozen"],  # each frozen base layer
}
