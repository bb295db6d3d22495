"""Unconditional DDPM training as in diffusers' train_unconditional.py: random timesteps per
image, noisy_images = noise_scheduler.add_noise(clean, noise, t) (sqrt(alpha_bar) mixing),
epsilon-prediction loss F.mse_loss(model_output.float(), noise.float()), clip_grad_norm_(1.0),
AdamW + a cosine schedule with warmup stepped per update, an EMA of the weights (EMAModel.step
with the warmup decay schedule), and loss.detach().item() logging.

Source: huggingface/diffusers, examples/unconditional_image_generation/train_unconditional.py,
commit 58eb52c0803ea9af3abec60841c2a093bdf1f951.
Reduced: diffusers is no test dependency: DDPMScheduler.add_noise (linear betas) and EMAModel.step
are written out; a 3-conv denoiser with a timestep embedding stands for UNet2DModel; 8x8 images,
100 train timesteps, 4 steps. The accelerator calls become their plain torch equivalents.
"""

import copy
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class TinyUNet(nn.Module):
    def __init__(self, ch=8, num_timesteps=100):
        super().__init__()
        self.time_embedding = nn.Embedding(num_timesteps, ch)
        self.conv_in = nn.Conv2d(3, ch, 3, padding=1)
        self.mid = nn.Sequential(nn.GroupNorm(2, ch), nn.SiLU(), nn.Conv2d(ch, ch, 3, padding=1))
        self.conv_out = nn.Conv2d(ch, 3, 3, padding=1)

    def forward(self, x, timesteps):
        h = self.conv_in(x) + self.time_embedding(timesteps)[:, :, None, None]
        return self.conv_out(h + self.mid(h))


class DDPMScheduler:
    def __init__(self, num_train_timesteps=100, beta_start=1e-4, beta_end=0.02):
        self.num_train_timesteps = num_train_timesteps
        self.betas = torch.linspace(beta_start, beta_end, num_train_timesteps, dtype=torch.float32)
        self.alphas_cumprod = torch.cumprod(1.0 - self.betas, dim=0)

    def add_noise(self, original_samples, noise, timesteps):
        sqrt_alpha_prod = self.alphas_cumprod[timesteps] ** 0.5
        sqrt_one_minus_alpha_prod = (1 - self.alphas_cumprod[timesteps]) ** 0.5
        while len(sqrt_alpha_prod.shape) < len(original_samples.shape):
            sqrt_alpha_prod = sqrt_alpha_prod.unsqueeze(-1)
            sqrt_one_minus_alpha_prod = sqrt_one_minus_alpha_prod.unsqueeze(-1)
        return sqrt_alpha_prod * original_samples + sqrt_one_minus_alpha_prod * noise


class EMAModel:
    def __init__(self, parameters, decay=0.9999, inv_gamma=1.0, power=3 / 4):
        self.shadow_params = [p.clone().detach() for p in parameters]
        self.decay, self.inv_gamma, self.power, self.optimization_step = decay, inv_gamma, power, 0

    def get_decay(self, optimization_step):
        step = max(0, optimization_step - 1)
        cur_decay_value = 1 - (1 + step / self.inv_gamma) ** -self.power
        return max(min(cur_decay_value, self.decay), 0.0)

    @torch.no_grad()
    def step(self, parameters):
        self.optimization_step += 1
        one_minus_decay = 1 - self.get_decay(self.optimization_step)
        for s_param, param in zip(self.shadow_params, parameters):
            if param.requires_grad:
                s_param.sub_(one_minus_decay * (s_param - param))
            else:
                s_param.copy_(param)


def build():
    torch.manual_seed(0)
    train_dataloader = [{"input": torch.rand(4, 3, 8, 8) * 2 - 1} for _ in range(4)]
    model = TinyUNet()
    noise_scheduler = DDPMScheduler()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.95, 0.999), weight_decay=1e-6, eps=1e-8)
    total = len(train_dataloader)
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: s / 2 if s < 2 else 0.5 * (1 + math.cos(math.pi * (s - 2) / max(1, total - 2))))
    ema_model = EMAModel(copy.deepcopy(model).parameters(), decay=0.9999)

    def train():
        global_step = 0
        for epoch in range(1):
            model.train()
            for step, batch in enumerate(train_dataloader):
                clean_images = batch["input"]
                noise = torch.randn(clean_images.shape, dtype=clean_images.dtype)
                bsz = clean_images.shape[0]
                timesteps = torch.randint(0, noise_scheduler.num_train_timesteps, (bsz,)).long()
                noisy_images = noise_scheduler.add_noise(clean_images, noise, timesteps)
                model_output = model(noisy_images, timesteps)
                loss = F.mse_loss(model_output.float(), noise.float())
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()
                ema_model.step(model.parameters())
                global_step += 1
                logs = {"loss": loss.detach().item(), "lr": lr_scheduler.get_last_lr()[0], "step": global_step}
        return logs

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
