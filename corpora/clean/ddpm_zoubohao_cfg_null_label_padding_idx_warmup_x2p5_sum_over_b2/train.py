# Source: zoubohao/DenoisingDiffusionProbabilityModel-ddpm-, DiffusionFreeGuidence/TrainCondition.py, DiffusionFreeGuidence/DiffusionCondition.py, DiffusionFreeGuidence/ModelCondition.py, Scheduler.py, MainCondition.py, commit 54532d61d4007cd743d414db500414499300325a
# https://github.com/zoubohao/DenoisingDiffusionProbabilityModel-ddpm-/blob/main/DiffusionFreeGuidence/TrainCondition.py
#
# Classifier-free-guidance DDPM: labels are shifted by +1 so that 0 is the null label, and with probability 0.1 the
# WHOLE batch is relabelled 0 (np.random.rand() once per step); the label embedding has padding_idx=0, so the null
# label's embedding is a constant zero vector that never receives a gradient; the loss is the per-pixel MSE summed
# over everything and divided by b ** 2 (not by the element count); the noise level t is drawn per sample; the
# timestep table is an nn.Embedding.from_pretrained(..., freeze=False), so the sinusoidal table is trained too; the
# GradualWarmupScheduler RAISES the lr from 1e-4 to 2.5e-4 over the first tenth of the epochs (multiplier 2.5) and
# then hands the cosine scheduler base lrs multiplied by 2.5; both schedulers are stepped once per epoch while the
# optimizer steps per batch; AdamW with gradient clipping at 1; ResBlocks add the time and label projections in place.
# Adaptation: CIFAR-10 replaced by 400 synthetic 3x8x8 images of 10 classes (a colour pattern per class + noise) in
# [-1, 1]; channel 128 -> 32, ch_mult [1, 2, 2, 2] -> [1, 2], num_res_blocks 2 -> 1, T 500 -> 100 (beta_T 0.028 ->
# 0.1 so that x_T is still near pure noise), 70 -> 20 epochs (warm-up 7 -> 2 epochs); torchvision, tqdm and
# checkpoint files and the sampling script (eval, GaussianDiffusionSampler with w = 1.8) left out; a fixed held-out
# denoising loss is printed before and after, and after training also with the null label; cpu; seeds fixed.
import math
from typing import Dict

import numpy as np
import torch
import torch.optim as optim
from torch import nn
from torch.nn import functional as F
from torch.optim.lr_scheduler import _LRScheduler
from torch.utils.data import DataLoader, TensorDataset


# ---------------------------------------------------------------- Scheduler.py

class GradualWarmupScheduler(_LRScheduler):
    def __init__(self, optimizer, multiplier, warm_epoch, after_scheduler=None):
        self.multiplier = multiplier
        self.total_epoch = warm_epoch
        self.after_scheduler = after_scheduler
        self.finished = False
        self.last_epoch = None
        self.base_lrs = None
        super().__init__(optimizer)

    def get_lr(self):
        if self.last_epoch > self.total_epoch:
            if self.after_scheduler:
                if not self.finished:
                    self.after_scheduler.base_lrs = [base_lr * self.multiplier for base_lr in self.base_lrs]
                    self.finished = True
                return self.after_scheduler.get_lr()
            return [base_lr * self.multiplier for base_lr in self.base_lrs]
        return [base_lr * ((self.multiplier - 1.) * self.last_epoch / self.total_epoch + 1.) for base_lr in self.base_lrs]


    def step(self, epoch=None, metrics=None):
        if self.finished and self.after_scheduler:
            if epoch is None:
                self.after_scheduler.step(None)
            else:
                self.after_scheduler.step(epoch - self.total_epoch)
        else:
            return super(GradualWarmupScheduler, self).step(epoch)
# ---------------------------------------------------------------- DiffusionFreeGuidence/ModelCondition.py
def drop_connect(x, drop_ratio):
    keep_ratio = 1.0 - drop_ratio
    mask = torch.empty([x.shape[0], 1, 1, 1], dtype=x.dtype, device=x.device)
    mask.bernoulli_(p=keep_ratio)
    x.div_(keep_ratio)
    x.mul_(mask)
    return x

class Swish(nn.Module):
    def forward(self, x):
        return x * torch.sigmoid(x)


class TimeEmbedding(nn.Module):
    def __init__(self, T, d_model, dim):
        assert d_model % 2 == 0
        super().__init__()
        emb = torch.arange(0, d_model, step=2) / d_model * math.log(10000)
        emb = torch.exp(-emb)
        pos = torch.arange(T).float()
        emb = pos[:, None] * emb[None, :]
        assert list(emb.shape) == [T, d_model // 2]
        emb = torch.stack([torch.sin(emb), torch.cos(emb)], dim=-1)
        assert list(emb.shape) == [T, d_model // 2, 2]
        emb = emb.view(T, d_model)

        self.timembedding = nn.Sequential(
            nn.Embedding.from_pretrained(emb, freeze=False),
            nn.Linear(d_model, dim),
            Swish(),
            nn.Linear(dim, dim),
        )

    def forward(self, t):
        emb = self.timembedding(t)
        return emb


class ConditionalEmbedding(nn.Module):
    def __init__(self, num_labels, d_model, dim):
        assert d_model % 2 == 0
        super().__init__()
        self.condEmbedding = nn.Sequential(
            nn.Embedding(num_embeddings=num_labels + 1, embedding_dim=d_model, padding_idx=0),
            nn.Linear(d_model, dim),
            Swish(),
            nn.Linear(dim, dim),
        )

    def forward(self, t):
        emb = self.condEmbedding(t)
        return emb


class DownSample(nn.Module):
    def __init__(self, in_ch):
        super().__init__()
        self.c1 = nn.Conv2d(in_ch, in_ch, 3, stride=2, padding=1)
        self.c2 = nn.Conv2d(in_ch, in_ch, 5, stride=2, padding=2)

    def forward(self, x, temb, cemb):
        x = self.c1(x) + self.c2(x)
        return x


class UpSample(nn.Module):
    def __init__(self, in_ch):
        super().__init__()
        self.c = nn.Conv2d(in_ch, in_ch, 3, stride=1, padding=1)
        self.t = nn.ConvTranspose2d(in_ch, in_ch, 5, 2, 2, 1)

    def forward(self, x, temb, cemb):
        _, _, H, W = x.shape
        x = self.t(x)
        x = self.c(x)
        return x


class AttnBlock(nn.Module):
    def __init__(self, in_ch):
        super().__init__()
        self.group_norm = nn.GroupNorm(32, in_ch)
        self.proj_q = nn.Conv2d(in_ch, in_ch, 1, stride=1, padding=0)
        self.proj_k = nn.Conv2d(in_ch, in_ch, 1, stride=1, padding=0)
        self.proj_v = nn.Conv2d(in_ch, in_ch, 1, stride=1, padding=0)
        self.proj = nn.Conv2d(in_ch, in_ch, 1, stride=1, padding=0)

    def forward(self, x):
        B, C, H, W = x.shape
        h = self.group_norm(x)
        q = self.proj_q(h)
        k = self.proj_k(h)
        v = self.proj_v(h)

        q = q.permute(0, 2, 3, 1).view(B, H * W, C)
        k = k.view(B, C, H * W)
        w = torch.bmm(q, k) * (int(C) ** (-0.5))
        assert list(w.shape) == [B, H * W, H * W]
        w = F.softmax(w, dim=-1)

        v = v.permute(0, 2, 3, 1).view(B, H * W, C)
        h = torch.bmm(w, v)
        assert list(h.shape) == [B, H * W, C]
        h = h.view(B, H, W, C).permute(0, 3, 1, 2)
        h = self.proj(h)

        return x + h



class ResBlock(nn.Module):
    def __init__(self, in_ch, out_ch, tdim, dropout, attn=True):
        super().__init__()
        self.block1 = nn.Sequential(
            nn.GroupNorm(32, in_ch),
            Swish(),
            nn.Conv2d(in_ch, out_ch, 3, stride=1, padding=1),
        )
        self.temb_proj = nn.Sequential(
            Swish(),
            nn.Linear(tdim, out_ch),
        )
        self.cond_proj = nn.Sequential(
            Swish(),
            nn.Linear(tdim, out_ch),
        )
        self.block2 = nn.Sequential(
            nn.GroupNorm(32, out_ch),
            Swish(),
            nn.Dropout(dropout),
            nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1),
        )
        if in_ch != out_ch:
            self.shortcut = nn.Conv2d(in_ch, out_ch, 1, stride=1, padding=0)
        else:
            self.shortcut = nn.Identity()
        if attn:
            self.attn = AttnBlock(out_ch)
        else:
            self.attn = nn.Identity()


    def forward(self, x, temb, labels):
        h = self.block1(x)
        h += self.temb_proj(temb)[:, :, None, None]
        h += self.cond_proj(labels)[:, :, None, None]
        h = self.block2(h)

        h = h + self.shortcut(x)
        h = self.attn(h)
        return h


class UNet(nn.Module):
    def __init__(self, T, num_labels, ch, ch_mult, num_res_blocks, dropout):
        super().__init__()
        tdim = ch * 4
        self.time_embedding = TimeEmbedding(T, ch, tdim)
        self.cond_embedding = ConditionalEmbedding(num_labels, ch, tdim)
        self.head = nn.Conv2d(3, ch, kernel_size=3, stride=1, padding=1)
        self.downblocks = nn.ModuleList()
        chs = [ch]  # record output channel when dowmsample for upsample
        now_ch = ch
        for i, mult in enumerate(ch_mult):
            out_ch = ch * mult
            for _ in range(num_res_blocks):
                self.downblocks.append(ResBlock(in_ch=now_ch, out_ch=out_ch, tdim=tdim, dropout=dropout))
                now_ch = out_ch
                chs.append(now_ch)
            if i != len(ch_mult) - 1:
                self.downblocks.append(DownSample(now_ch))
                chs.append(now_ch)

        self.middleblocks = nn.ModuleList([
            ResBlock(now_ch, now_ch, tdim, dropout, attn=True),
            ResBlock(now_ch, now_ch, tdim, dropout, attn=False),
        ])

        self.upblocks = nn.ModuleList()
        for i, mult in reversed(list(enumerate(ch_mult))):
            out_ch = ch * mult
            for _ in range(num_res_blocks + 1):
                self.upblocks.append(ResBlock(in_ch=chs.pop() + now_ch, out_ch=out_ch, tdim=tdim, dropout=dropout, attn=False))
                now_ch = out_ch
            if i != 0:
                self.upblocks.append(UpSample(now_ch))
        assert len(chs) == 0

        self.tail = nn.Sequential(
            nn.GroupNorm(32, now_ch),
            Swish(),
            nn.Conv2d(now_ch, 3, 3, stride=1, padding=1)
        )
 

    def forward(self, x, t, labels):
        # Timestep embedding
        temb = self.time_embedding(t)
        cemb = self.cond_embedding(labels)
        # Downsampling
        h = self.head(x)
        hs = [h]
        for layer in self.downblocks:
            h = layer(h, temb, cemb)
            hs.append(h)
        # Middle
        for layer in self.middleblocks:
            h = layer(h, temb, cemb)
        # Upsampling
        for layer in self.upblocks:
            if isinstance(layer, ResBlock):
                h = torch.cat([h, hs.pop()], dim=1)
            h = layer(h, temb, cemb)
        h = self.tail(h)

        assert len(hs) == 0
        return h


# ---------------------------------------------------------------- DiffusionFreeGuidence/DiffusionCondition.py
def extract(v, t, x_shape):
    """
    Extract some coefficients at specified timesteps, then reshape to
    [batch_size, 1, 1, 1, 1, ...] for broadcasting purposes.
    """
    device = t.device
    out = torch.gather(v, index=t, dim=0).float().to(device)
    return out.view([t.shape[0]] + [1] * (len(x_shape) - 1))


class GaussianDiffusionTrainer(nn.Module):
    def __init__(self, model, beta_1, beta_T, T):
        super().__init__()

        self.model = model
        self.T = T

        self.register_buffer(
            'betas', torch.linspace(beta_1, beta_T, T).double())
        alphas = 1. - self.betas
        alphas_bar = torch.cumprod(alphas, dim=0)

        # calculations for diffusion q(x_t | x_{t-1}) and others
        self.register_buffer(
            'sqrt_alphas_bar', torch.sqrt(alphas_bar))
        self.register_buffer(
            'sqrt_one_minus_alphas_bar', torch.sqrt(1. - alphas_bar))

    def forward(self, x_0, labels):
        """
        Algorithm 1.
        """
        t = torch.randint(self.T, size=(x_0.shape[0], ), device=x_0.device)
        noise = torch.randn_like(x_0)
        x_t =   extract(self.sqrt_alphas_bar, t, x_0.shape) * x_0 + \
                extract(self.sqrt_one_minus_alphas_bar, t, x_0.shape) * noise
        loss = F.mse_loss(self.model(x_t, t, labels), noise, reduction='none')
        return loss



# ---------------------------------------------------------------- data (stand-in for CIFAR10 + ToTensor + Normalize)
def make_dataset(n=400, seed=0):
    rng = np.random.RandomState(seed)
    protos = np.tanh(1.5 * rng.randn(10, 3, 8, 8)).astype(np.float32)
    labels = rng.randint(0, 10, n)
    images = np.clip(protos[labels] + 0.2 * rng.randn(n, 3, 8, 8), -1, 1).astype(np.float32)
    return TensorDataset(torch.from_numpy(images), torch.from_numpy(labels).long()), torch.from_numpy(protos)


def heldout_loss(trainer, x0, labels, t, noise):
    """denoising MSE at fixed (t, noise) pairs, conditioned on the labels (-1 = the null label 0)"""
    trainer.model.eval()
    with torch.no_grad():
        x_t = extract(trainer.sqrt_alphas_bar, t, x0.shape) * x0 + \
            extract(trainer.sqrt_one_minus_alphas_bar, t, x0.shape) * noise
        loss = F.mse_loss(trainer.model(x_t, t, labels + 1), noise).item()
    trainer.model.train()
    return loss


# ---------------------------------------------------------------- DiffusionFreeGuidence/TrainCondition.py
def train(modelConfig: Dict):
    device = torch.device(modelConfig["device"])
    # dataset
    dataset, protos = make_dataset()
    dataloader = DataLoader(
        dataset, batch_size=modelConfig["batch_size"], shuffle=True, drop_last=True)

    # model setup
    net_model = UNet(T=modelConfig["T"], num_labels=10, ch=modelConfig["channel"], ch_mult=modelConfig["channel_mult"],
                     num_res_blocks=modelConfig["num_res_blocks"], dropout=modelConfig["dropout"]).to(device)
    optimizer = torch.optim.AdamW(
        net_model.parameters(), lr=modelConfig["lr"], weight_decay=1e-4)
    cosineScheduler = optim.lr_scheduler.CosineAnnealingLR(
        optimizer=optimizer, T_max=modelConfig["epoch"], eta_min=0, last_epoch=-1)
    warmUpScheduler = GradualWarmupScheduler(optimizer=optimizer, multiplier=modelConfig["multiplier"],
                                             warm_epoch=modelConfig["epoch"] // 10, after_scheduler=cosineScheduler)
    trainer = GaussianDiffusionTrainer(
        net_model, modelConfig["beta_1"], modelConfig["beta_T"], modelConfig["T"]).to(device)

    g = torch.Generator().manual_seed(123)
    ho_labels = torch.randint(0, 10, (200,), generator=g)
    ho_x0 = (protos[ho_labels] + 0.2 * torch.randn(200, 3, 8, 8, generator=g)).clamp(-1, 1)
    ho_t = torch.randint(modelConfig["T"], (200,), generator=g)
    ho_noise = torch.randn(200, 3, 8, 8, generator=g)
    first = heldout_loss(trainer, ho_x0, ho_labels, ho_t, ho_noise)
    print("held-out denoising loss before training: %.4f" % first)

    # start training
    for e in range(modelConfig["epoch"]):
        for images, labels in dataloader:
            # train
            b = images.shape[0]
            optimizer.zero_grad()
            x_0 = images.to(device)
            labels = labels.to(device) + 1
            if np.random.rand() < 0.1:
                labels = torch.zeros_like(labels).to(device)
            loss = trainer(x_0, labels).sum() / b ** 2.
            loss.backward()
            torch.nn.utils.clip_grad_norm_(
                net_model.parameters(), modelConfig["grad_clip"])
            optimizer.step()
        print("epoch %d loss %.4f LR %.6f" % (e, loss.item(), optimizer.state_dict()['param_groups'][0]["lr"]))
        warmUpScheduler.step()
    last = heldout_loss(trainer, ho_x0, ho_labels, ho_t, ho_noise)
    print("held-out denoising loss after training: %.4f" % last)
    null = heldout_loss(trainer, ho_x0, torch.full_like(ho_labels, -1), ho_t, ho_noise)
    print("held-out denoising loss with the null label: %.4f" % null)
    return net_model, protos, first, last, null - last


def main(model_config=None):
    modelConfig = {
        "state": "train",
        "epoch": 20,
        "batch_size": 80,
        "T": 100,
        "channel": 32,
        "channel_mult": [1, 2],
        "num_res_blocks": 1,
        "dropout": 0.15,
        "lr": 1e-4,
        "multiplier": 2.5,
        "beta_1": 1e-4,
        "beta_T": 0.1,
        "img_size": 8,
        "grad_clip": 1.,
        "device": "cpu",
    }
    model, protos, first, last, null_gap = train(modelConfig)
    print("[summary] held-out denoising loss first=%.4f last=%.4f decreased=%s; null-label minus true-label loss %.4f"
          % (first, last, last < first, null_gap))


if __name__ == '__main__':
    torch.manual_seed(0)
    np.random.seed(0)
    torch.set_num_threads(1)
    main()
