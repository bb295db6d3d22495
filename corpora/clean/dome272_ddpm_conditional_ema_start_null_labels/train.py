# Source: dome272/Diffusion-Models-pytorch, ddpm_conditional.py, modules.py, utils.py, commit be352208d0576039fec061238c0e4385a562a2d4
# https://github.com/dome272/Diffusion-Models-pytorch
#
# Class-conditional DDPM with classifier-free guidance: with probability 0.1 the WHOLE batch is trained with
# labels=None (the unconditional model), the label embedding is added in place to the time encoding, timesteps
# are drawn from [1, noise_steps) (t=0 is never trained), an EMA copy built with copy.deepcopy(...).eval()
# .requires_grad_(False) whose update replaces ma_params.data, and step_start_ema=2000 is longer than this run
# so the "EMA" is reset to a copy of the model at every step (load_state_dict); the sampler mixes conditional
# and unconditional predictions with torch.lerp(uncond, cond, cfg_scale) (extrapolation, cfg_scale 3 > 1).
# Adaptation: torchvision/ImageFolder (CIFAR-10 64x64) replaced by 10 classes of synthetic 3x16x16 images made
# with a fixed seed; the UNet keeps its layout with channels 64/128/256/512 -> 16/32/32/32 and SelfAttention
# sizes for 16x16 inputs; tqdm, tensorboard, image saving and checkpoints dropped; epochs 300 -> 4 of 24
# batches of 14; a held-out diffusion MSE (fixed t and noise) and a short guided sampling on the EMA model
# with 1000 -> 50 noise steps are printed instead of saved images; device cuda -> cpu.
import copy
import logging

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.utils.data import DataLoader, TensorDataset

logging.basicConfig(format="%(asctime)s - %(levelname)s: %(message)s", level=logging.INFO, datefmt="%I:%M:%S")


# ------------------------------------------------------------------------------------------------ modules.py
class EMA:
    def __init__(self, beta):
        super().__init__()
        self.beta = beta
        self.step = 0

    def update_model_average(self, ma_model, current_model):
        for current_params, ma_params in zip(current_model.parameters(), ma_model.parameters()):
            old_weight, up_weight = ma_params.data, current_params.data
            ma_params.data = self.update_average(old_weight, up_weight)

    def update_average(self, old, new):
        if old is None:
            return new
        return old * self.beta + (1 - self.beta) * new

    def step_ema(self, ema_model, model, step_start_ema=2000):
        if self.step < step_start_ema:
            self.reset_parameters(ema_model, model)
            self.step += 1
            return
        self.update_model_average(ema_model, model)
        self.step += 1

    def reset_parameters(self, ema_model, model):
        ema_model.load_state_dict(model.state_dict())


class SelfAttention(nn.Module):
    def __init__(self, channels, size):
        super(SelfAttention, self).__init__()
        self.channels = channels
        self.size = size
        self.mha = nn.MultiheadAttention(channels, 4, batch_first=True)
        self.ln = nn.LayerNorm([channels])
        self.ff_self = nn.Sequential(
            nn.LayerNorm([channels]),
            nn.Linear(channels, channels),
            nn.GELU(),
            nn.Linear(channels, channels),
        )

    def forward(self, x):
        x = x.view(-1, self.channels, self.size * self.size).swapaxes(1, 2)
        x_ln = self.ln(x)
        attention_value, _ = self.mha(x_ln, x_ln, x_ln)
        attention_value = attention_value + x
        attention_value = self.ff_self(attention_value) + attention_value
        return attention_value.swapaxes(2, 1).view(-1, self.channels, self.size, self.size)


class DoubleConv(nn.Module):
    def __init__(self, in_channels, out_channels, mid_channels=None, residual=False):
        super().__init__()
        self.residual = residual
        if not mid_channels:
            mid_channels = out_channels
        self.double_conv = nn.Sequential(
            nn.Conv2d(in_channels, mid_channels, kernel_size=3, padding=1, bias=False),
            nn.GroupNorm(1, mid_channels),
            nn.GELU(),
            nn.Conv2d(mid_channels, out_channels, kernel_size=3, padding=1, bias=False),
            nn.GroupNorm(1, out_channels),
        )

    def forward(self, x):
        if self.residual:
            return F.gelu(x + self.double_conv(x))
        else:
            return self.double_conv(x)


class Down(nn.Module):
    def __init__(self, in_channels, out_channels, emb_dim=256):
        super().__init__()
        self.maxpool_conv = nn.Sequential(
            nn.MaxPool2d(2),
            DoubleConv(in_channels, in_channels, residual=True),
            DoubleConv(in_channels, out_channels),
        )

        self.emb_layer = nn.Sequential(
            nn.SiLU(),
            nn.Linear(
                emb_dim,
                out_channels
            ),
        )

    def forward(self, x, t):
        x = self.maxpool_conv(x)
        emb = self.emb_layer(t)[:, :, None, None].repeat(1, 1, x.shape[-2], x.shape[-1])
        return x + emb


class Up(nn.Module):
    def __init__(self, in_channels, out_channels, emb_dim=256):
        super().__init__()

        self.up = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)
        self.conv = nn.Sequential(
            DoubleConv(in_channels, in_channels, residual=True),
            DoubleConv(in_channels, out_channels, in_channels // 2),
        )

        self.emb_layer = nn.Sequential(
            nn.SiLU(),
            nn.Linear(
                emb_dim,
                out_channels
            ),
        )

    def forward(self, x, skip_x, t):
        x = self.up(x)
        x = torch.cat([skip_x, x], dim=1)
        x = self.conv(x)
        emb = self.emb_layer(t)[:, :, None, None].repeat(1, 1, x.shape[-2], x.shape[-1])
        return x + emb


class UNet_conditional(nn.Module):
    def __init__(self, c_in=3, c_out=3, time_dim=64, num_classes=None, device="cpu"):
        super().__init__()
        self.device = device
        self.time_dim = time_dim
        self.inc = DoubleConv(c_in, 16)
        self.down1 = Down(16, 32, emb_dim=time_dim)
        self.sa1 = SelfAttention(32, 8)
        self.down2 = Down(32, 32, emb_dim=time_dim)
        self.sa2 = SelfAttention(32, 4)
        self.down3 = Down(32, 32, emb_dim=time_dim)
        self.sa3 = SelfAttention(32, 2)

        self.bot1 = DoubleConv(32, 64)
        self.bot2 = DoubleConv(64, 64)
        self.bot3 = DoubleConv(64, 32)

        self.up1 = Up(64, 32, emb_dim=time_dim)
        self.sa4 = SelfAttention(32, 4)
        self.up2 = Up(64, 16, emb_dim=time_dim)
        self.sa5 = SelfAttention(16, 8)
        self.up3 = Up(32, 16, emb_dim=time_dim)
        self.sa6 = SelfAttention(16, 16)
        self.outc = nn.Conv2d(16, c_out, kernel_size=1)

        if num_classes is not None:
            self.label_emb = nn.Embedding(num_classes, time_dim)

    def pos_encoding(self, t, channels):
        inv_freq = 1.0 / (
            10000
            ** (torch.arange(0, channels, 2, device=self.device).float() / channels)
        )
        pos_enc_a = torch.sin(t.repeat(1, channels // 2) * inv_freq)
        pos_enc_b = torch.cos(t.repeat(1, channels // 2) * inv_freq)
        pos_enc = torch.cat([pos_enc_a, pos_enc_b], dim=-1)
        return pos_enc

    def forward(self, x, t, y):
        t = t.unsqueeze(-1).type(torch.float)
        t = self.pos_encoding(t, self.time_dim)

        if y is not None:
            t += self.label_emb(y)

        x1 = self.inc(x)
        x2 = self.down1(x1, t)
        x2 = self.sa1(x2)
        x3 = self.down2(x2, t)
        x3 = self.sa2(x3)
        x4 = self.down3(x3, t)
        x4 = self.sa3(x4)

        x4 = self.bot1(x4)
        x4 = self.bot2(x4)
        x4 = self.bot3(x4)

        x = self.up1(x4, x3, t)
        x = self.sa4(x)
        x = self.up2(x, x2, t)
        x = self.sa5(x)
        x = self.up3(x, x1, t)
        x = self.sa6(x)
        output = self.outc(x)
        return output


# -------------------------------------------------------------------------------------------------- utils.py
def make_images(n, seed):
    """CIFAR stand-in: each class is a colour and a stripe orientation/frequency, in [-1, 1]."""
    g = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 10, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(16.), torch.arange(16.), indexing="ij")
    colours = torch.rand(10, 3, generator=torch.Generator().manual_seed(123)) * 1.6 - 0.8
    imgs = []
    for c in labels.tolist():
        freq = 0.4 + 0.15 * (c % 5)
        stripes = torch.sin(freq * (xx if c < 5 else yy) + torch.rand(1, generator=g) * 6.28)
        img = colours[c][:, None, None] * (0.6 + 0.4 * stripes) + 0.05 * torch.randn(3, 16, 16, generator=g)
        imgs.append(img.clamp(-1, 1))
    return torch.stack(imgs), labels


def get_data(args):
    images, labels = make_images(args.n_train, seed=0)
    dataset = TensorDataset(images, labels)
    dataloader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    return dataloader


# ------------------------------------------------------------------------------------- ddpm_conditional.py
class Diffusion:
    def __init__(self, noise_steps=1000, beta_start=1e-4, beta_end=0.02, img_size=256, device="cuda"):
        self.noise_steps = noise_steps
        self.beta_start = beta_start
        self.beta_end = beta_end

        self.beta = self.prepare_noise_schedule().to(device)
        self.alpha = 1. - self.beta
        self.alpha_hat = torch.cumprod(self.alpha, dim=0)

        self.img_size = img_size
        self.device = device

    def prepare_noise_schedule(self):
        return torch.linspace(self.beta_start, self.beta_end, self.noise_steps)

    def noise_images(self, x, t):
        sqrt_alpha_hat = torch.sqrt(self.alpha_hat[t])[:, None, None, None]
        sqrt_one_minus_alpha_hat = torch.sqrt(1 - self.alpha_hat[t])[:, None, None, None]
        Ɛ = torch.randn_like(x)
        return sqrt_alpha_hat * x + sqrt_one_minus_alpha_hat * Ɛ, Ɛ

    def sample_timesteps(self, n):
        return torch.randint(low=1, high=self.noise_steps, size=(n,))

    def sample(self, model, n, labels, cfg_scale=3):
        logging.info(f"Sampling {n} new images....")
        model.eval()
        with torch.no_grad():
            x = torch.randn((n, 3, self.img_size, self.img_size)).to(self.device)
            for i in reversed(range(1, self.noise_steps)):
                t = (torch.ones(n) * i).long().to(self.device)
                predicted_noise = model(x, t, labels)
                if cfg_scale > 0:
                    uncond_predicted_noise = model(x, t, None)
                    predicted_noise = torch.lerp(uncond_predicted_noise, predicted_noise, cfg_scale)
                alpha = self.alpha[t][:, None, None, None]
                alpha_hat = self.alpha_hat[t][:, None, None, None]
                beta = self.beta[t][:, None, None, None]
                if i > 1:
                    noise = torch.randn_like(x)
                else:
                    noise = torch.zeros_like(x)
                x = 1 / torch.sqrt(alpha) * (x - ((1 - alpha) / (torch.sqrt(1 - alpha_hat))) * predicted_noise) + torch.sqrt(beta) * noise
        model.train()
        x = (x.clamp(-1, 1) + 1) / 2
        x = (x * 255).type(torch.uint8)
        return x


def heldout_mse(model, diffusion, images, labels):
    """Diffusion loss on held-out images with fixed timesteps and noise (what the MSE curve estimates)."""
    g = torch.Generator().manual_seed(7)
    t = torch.randint(1, diffusion.noise_steps, (images.shape[0],), generator=g)
    eps = torch.randn(images.shape, generator=g)
    x_t = torch.sqrt(diffusion.alpha_hat[t])[:, None, None, None] * images + \
        torch.sqrt(1 - diffusion.alpha_hat[t])[:, None, None, None] * eps
    model.eval()
    with torch.no_grad():
        mse = F.mse_loss(model(x_t, t, labels), eps).item()
    model.train()
    return mse


def train(args):
    device = args.device
    dataloader = get_data(args)
    model = UNet_conditional(num_classes=args.num_classes).to(device)
    optimizer = optim.AdamW(model.parameters(), lr=args.lr)
    mse = nn.MSELoss()
    diffusion = Diffusion(img_size=args.image_size, device=device)
    l = len(dataloader)
    ema = EMA(0.995)
    ema_model = copy.deepcopy(model).eval().requires_grad_(False)
    val_images, val_labels = make_images(128, seed=1)
    history = [heldout_mse(model, diffusion, val_images, val_labels)]
    print(f"epoch -1 heldout_mse {history[0]:.4f}")

    for epoch in range(args.epochs):
        logging.info(f"Starting epoch {epoch}:")
        running = []
        for i, (images, labels) in enumerate(dataloader):
            images = images.to(device)
            labels = labels.to(device)
            t = diffusion.sample_timesteps(images.shape[0]).to(device)
            x_t, noise = diffusion.noise_images(images, t)
            if np.random.random() < 0.1:
                labels = None
            predicted_noise = model(x_t, t, labels)
            loss = mse(noise, predicted_noise)

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            ema.step_ema(ema_model, model)

            running.append(loss.item())
        history.append(heldout_mse(ema_model, diffusion, val_images, val_labels))
        print(f"epoch {epoch} step {(epoch + 1) * l} train_mse {np.mean(running):.4f} heldout_mse(ema) {history[-1]:.4f}")

    short = Diffusion(noise_steps=50, beta_start=1e-4 * 20, beta_end=0.02 * 20, img_size=args.image_size, device=device)
    labels = torch.arange(10).long().to(device)
    ema_sampled_images = short.sample(ema_model, n=len(labels), labels=labels)
    print(f"sampled {tuple(ema_sampled_images.shape)} uint8, mean pixel {ema_sampled_images.float().mean():.1f}")
    print(f"[summary] heldout_mse first={history[0]:.4f} last={history[-1]:.4f} decreased={history[-1] < history[0]}")


def launch():
    import argparse
    parser = argparse.ArgumentParser()
    args = parser.parse_args([])
    args.run_name = "DDPM_conditional"
    args.epochs = 4
    args.batch_size = 14
    args.image_size = 16
    args.num_classes = 10
    args.n_train = 14 * 24
    args.device = "cpu"
    args.lr = 3e-4
    train(args)


if __name__ == '__main__':
    torch.manual_seed(0)
    np.random.seed(0)
    launch()
