# Source: voicepaw/so-vits-svc-fork, src/so_vits_svc_fork/train.py (VitsLightning), commit 94a062bc9dfc650f2f860408b12174f53f3312a7
# Report: https://github.com/voicepaw/so-vits-svc-fork/pull/291
# VitsLightning after the move to PyTorch Lightning: manual optimization (generator and
# discriminator AdamW optimizers, toggle/untoggle, manual_backward), ExponentialLR schedulers
# returned from configure_optimizers. SynthesizerTrn / MultiPeriodDiscriminator are reduced to
# a small conv generator and a conv discriminator, the speech dataset to synthetic
# content-feature / waveform pairs; the loss functions are VITS' (LSGAN + feature matching + L1).
from types import SimpleNamespace
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def feature_loss(fmap_r, fmap_g):
    loss = 0
    for dr, dg in zip(fmap_r, fmap_g):
        for rl, gl in zip(dr, dg):
            rl = rl.float().detach()
            gl = gl.float()
            loss += torch.mean(torch.abs(rl - gl))
    return loss * 2


def discriminator_loss(disc_real_outputs, disc_generated_outputs):
    loss = 0
    r_losses = []
    g_losses = []
    for dr, dg in zip(disc_real_outputs, disc_generated_outputs):
        dr = dr.float()
        dg = dg.float()
        r_loss = torch.mean((1 - dr) ** 2)
        g_loss = torch.mean(dg**2)
        loss += r_loss + g_loss
        r_losses.append(r_loss.item())
        g_losses.append(g_loss.item())
    return loss, r_losses, g_losses


def generator_loss(disc_outputs):
    loss = 0
    gen_losses = []
    for dg in disc_outputs:
        dg = dg.float()
        l = torch.mean((1 - dg) ** 2)
        gen_losses.append(l)
        loss += l
    return loss, gen_losses


class SynthesizerTrn(nn.Module):
    def __init__(self, in_channels, hidden_channels, upsample_rate):
        super().__init__()
        self.pre = nn.Conv1d(in_channels, hidden_channels, 3, padding=1)
        self.up = nn.ConvTranspose1d(hidden_channels, hidden_channels // 2, upsample_rate * 2, upsample_rate,
                                     padding=upsample_rate // 2)
        self.post = nn.Conv1d(hidden_channels // 2, 1, 7, padding=3)

    def forward(self, c):
        x = F.leaky_relu(self.pre(c), 0.1)
        x = F.leaky_relu(self.up(x), 0.1)
        return torch.tanh(self.post(x))


class DiscriminatorS(nn.Module):
    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv1d(1, 16, 15, 1, padding=7), nn.Conv1d(16, 32, 41, 4, groups=4, padding=20)])
        self.conv_post = nn.Conv1d(32, 1, 3, 1, padding=1)

    def forward(self, x):
        fmap = []
        for l in self.convs:
            x = F.leaky_relu(l(x), 0.1)
            fmap.append(x)
        x = self.conv_post(x)
        fmap.append(x)
        return torch.flatten(x, 1, -1), fmap


class MultiPeriodDiscriminator(nn.Module):
    def __init__(self, use_spectral_norm=False):
        super().__init__()
        self.discriminators = nn.ModuleList([DiscriminatorS()])

    def forward(self, y, y_hat):
        y_d_rs, y_d_gs, fmap_rs, fmap_gs = [], [], [], []
        for d in self.discriminators:
            y_d_r, fmap_r = d(y)
            y_d_g, fmap_g = d(y_hat)
            y_d_rs.append(y_d_r)
            y_d_gs.append(y_d_g)
            fmap_rs.append(fmap_r)
            fmap_gs.append(fmap_g)
        return y_d_rs, y_d_gs, fmap_rs, fmap_gs


class VitsLightning(pl.LightningModule):
    def __init__(self, reset_optimizer: bool = False, **hparams: Any):
        super().__init__()
        self.save_hyperparameters("reset_optimizer")
        self.save_hyperparameters(*[k for k in hparams.keys()])
        torch.manual_seed(self.hparams.train.seed)
        self.net_g = SynthesizerTrn(
            self.hparams.model.ssl_dim,
            self.hparams.model.hidden_channels,
            self.hparams.data.hop_length,
        )
        self.net_d = MultiPeriodDiscriminator(self.hparams.model.use_spectral_norm)
        self.automatic_optimization = False
        self.optim_g = torch.optim.AdamW(
            self.net_g.parameters(),
            self.hparams.train.learning_rate,
            betas=self.hparams.train.betas,
            eps=self.hparams.train.eps,
        )
        self.optim_d = torch.optim.AdamW(
            self.net_d.parameters(),
            self.hparams.train.learning_rate,
            betas=self.hparams.train.betas,
            eps=self.hparams.train.eps,
        )
        self.scheduler_g = torch.optim.lr_scheduler.ExponentialLR(
            self.optim_g, gamma=self.hparams.train.lr_decay
        )
        self.scheduler_d = torch.optim.lr_scheduler.ExponentialLR(
            self.optim_d, gamma=self.hparams.train.lr_decay
        )
        self.optimizers_count = 2

    def configure_optimizers(self):
        return [self.optim_g, self.optim_d], [self.scheduler_g, self.scheduler_d]

    def training_step(self, batch, batch_idx: int) -> None:
        self.net_g.train()
        self.net_d.train()

        # get optims
        optim_g, optim_d = self.optimizers()

        # Generator
        # train
        self.toggle_optimizer(optim_g)
        c, y = batch
        y_hat = self.net_g(c)

        # generator loss
        y_d_hat_r, y_d_hat_g, fmap_r, fmap_g = self.net_d(y, y_hat)

        loss_mel = F.l1_loss(y, y_hat) * self.hparams.train.c_mel
        loss_fm = feature_loss(fmap_r, fmap_g)
        loss_gen, losses_gen = generator_loss(y_d_hat_g)
        loss_gen_all = loss_gen + loss_fm + loss_mel

        self.log("lr", self.optim_g.param_groups[0]["lr"])
        self.log_dict({"loss/g/total": loss_gen_all, "loss/g/mel": loss_mel}, prog_bar=True)

        # optimizer
        optim_g.zero_grad()
        self.manual_backward(loss_gen_all)
        optim_g.step()
        self.untoggle_optimizer(optim_g)

        # Discriminator
        # train
        self.toggle_optimizer(optim_d)
        y_d_hat_r, y_d_hat_g, _, _ = self.net_d(y, y_hat.detach())

        # discriminator loss
        loss_disc, losses_disc_r, losses_disc_g = discriminator_loss(
            y_d_hat_r, y_d_hat_g
        )
        loss_disc_all = loss_disc

        self.log("loss/d/total", loss_disc_all, prog_bar=True)

        # optimizer
        optim_d.zero_grad()
        self.manual_backward(loss_disc_all)
        optim_d.step()
        self.untoggle_optimizer(optim_d)

    def on_train_epoch_end(self) -> None:
        m = self.trainer.callback_metrics
        print(f"epoch {self.current_epoch} lr_g {self.optim_g.param_groups[0]['lr']:.3e} "
              f"lr_d {self.optim_d.param_groups[0]['lr']:.3e} loss/g/mel {float(m['loss/g/mel']):.4f} "
              f"loss/d/total {float(m['loss/d/total']):.4f}")


def main():
    hparams = dict(
        train=SimpleNamespace(seed=1234, learning_rate=2e-4, betas=(0.8, 0.99), eps=1e-9, lr_decay=0.7, c_mel=45,
                              batch_size=8, epochs=6),
        data=SimpleNamespace(hop_length=4),
        model=SimpleNamespace(ssl_dim=16, hidden_channels=32, use_spectral_norm=False),
    )
    g = torch.Generator().manual_seed(0)
    c = torch.randn(64, 16, 32, generator=g)
    proj = torch.randn(16, 4, generator=g) * 0.2
    y = torch.tanh(torch.einsum("bct,cu->btu", c, proj).reshape(64, 1, 128))
    loader = DataLoader(TensorDataset(c, y), batch_size=hparams["train"].batch_size, shuffle=True)
    model = VitsLightning(**hparams)
    trainer = pl.Trainer(max_epochs=hparams["train"].epochs, accelerator="cpu", logger=False,
                         enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, train_dataloaders=loader)


if __name__ == "__main__":
    main()
