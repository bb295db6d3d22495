# Source: huggingface/diffusers, examples/text_to_image/train_text_to_image.py (EMAModel, main), commit ab0e92fdc8b42e1739840d10bb0b1dc7edaf2ff3
# Report: https://github.com/huggingface/diffusers/issues/1864
# The text-to-image fine-tuning example: a noise-prediction network trained with the DDPM
# epsilon objective, AdamW, a constant lr scheduler and an EMA copy of the weights that is
# copied into the model at the end. The Stable Diffusion UNet, VAE and text encoder are
# replaced by a small conditional MLP denoiser on synthetic 16-dim "latents"; accelerate,
# xformers, the hub and the pipeline saving are removed.
import math
from typing import Iterable

import torch
import torch.nn as nn
import torch.nn.functional as F


# Adapted from torch-ema https://github.com/fadel/pytorch_ema/blob/master/torch_ema/ema.py#L14
class EMAModel:
    """
    Exponential Moving Average of models weights
    """

    def __init__(self, parameters: Iterable[torch.nn.Parameter], decay=0.9999):
        parameters = list(parameters)
        self.shadow_params = [p.clone().detach() for p in parameters]

        self.decay = decay
        self.optimization_step = 0

    def get_decay(self, optimization_step):
        """
        Compute the decay factor for the exponential moving average.
        """
        value = (1 + optimization_step) / (10 + optimization_step)
        return 1 - min(self.decay, value)

    @torch.no_grad()
    def step(self, parameters):
        parameters = list(parameters)

        self.optimization_step += 1
        self.decay = self.get_decay(self.optimization_step)

        for s_param, param in zip(self.shadow_params, parameters):
            if param.requires_grad:
                tmp = self.decay * (s_param - param)
                s_param.sub_(tmp)
            else:
                s_param.copy_(param)

    def copy_to(self, parameters: Iterable[torch.nn.Parameter]) -> None:
        parameters = list(parameters)
        for s_param, param in zip(self.shadow_params, parameters):
            param.data.copy_(s_param.data)


class DDPMScheduler:
    def __init__(self, num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012):
        self.num_train_timesteps = num_train_timesteps
        betas = torch.linspace(beta_start ** 0.5, beta_end ** 0.5, num_train_timesteps) ** 2
        self.alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)

    def add_noise(self, original_samples, noise, timesteps):
        sqrt_alpha_prod = self.alphas_cumprod[timesteps].sqrt().unsqueeze(-1)
        sqrt_one_minus_alpha_prod = (1 - self.alphas_cumprod[timesteps]).sqrt().unsqueeze(-1)
        return sqrt_alpha_prod * original_samples + sqrt_one_minus_alpha_prod * noise


class TinyUNet(nn.Module):
    def __init__(self, dim=16, cond_dim=8, hidden=64):
        super().__init__()
        self.time_embed = nn.Sequential(nn.Linear(32, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.inp = nn.Linear(dim + cond_dim, hidden)
        self.mid = nn.Sequential(nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, hidden))
        self.out = nn.Linear(hidden, dim)

    def forward(self, x, timesteps, encoder_hidden_states):
        half = 16
        freqs = torch.exp(-math.log(10000) * torch.arange(half) / half)
        args = timesteps.float()[:, None] * freqs[None]
        temb = self.time_embed(torch.cat([args.sin(), args.cos()], dim=-1))
        h = self.inp(torch.cat([x, encoder_hidden_states], dim=-1)) + temb
        return self.out(self.mid(h))


def make_dataset(n=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    captions = torch.randn(n, 8, generator=g)
    proj = torch.randn(8, 16, generator=g) / math.sqrt(8)
    latents = torch.tanh(captions @ proj) + 0.05 * torch.randn(n, 16, generator=g)
    return latents, captions


def main():
    torch.manual_seed(0)
    latents_all, captions_all = make_dataset()
    unet = TinyUNet()
    optimizer = torch.optim.AdamW(unet.parameters(), lr=3e-3, betas=(0.9, 0.999), weight_decay=1e-2, eps=1e-08)
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    noise_scheduler = DDPMScheduler()
    ema_unet = EMAModel(unet.parameters())

    train_batch_size = 32
    num_train_epochs = 15
    global_step = 0
    decays = []
    for epoch in range(num_train_epochs):
        unet.train()
        train_loss = 0.0
        perm = torch.randperm(len(latents_all))
        for step in range(len(latents_all) // train_batch_size):
            idx = perm[step * train_batch_size:(step + 1) * train_batch_size]
            latents = latents_all[idx]
            encoder_hidden_states = captions_all[idx]
            noise = torch.randn_like(latents)
            bsz = latents.shape[0]
            timesteps = torch.randint(0, noise_scheduler.num_train_timesteps, (bsz,))
            noisy_latents = noise_scheduler.add_noise(latents, noise, timesteps)
            target = noise

            model_pred = unet(noisy_latents, timesteps, encoder_hidden_states)
            loss = F.mse_loss(model_pred.float(), target.float(), reduction="mean")
            train_loss += loss.item()

            loss.backward()
            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad()

            ema_unet.step(unet.parameters())
            decays.append(ema_unet.decay)
            global_step += 1

        if epoch % 5 == 4:
            live = torch.cat([p.detach().flatten() for p in unet.parameters()])
            shadow = torch.cat([s.flatten() for s in ema_unet.shadow_params])
            print(f"epoch {epoch} step {global_step} train_loss {train_loss / (step + 1):.4f} "
                  f"ema.decay {ema_unet.decay:.4f} |ema - live| / |live| {((shadow - live).norm() / live.norm()).item():.5f}")

    print("ema.decay over the first 12 steps:", " ".join(f"{d:.3f}" for d in decays[:12]))
    ema_unet.copy_to(unet.parameters())
    print("EMA weights copied into the model for saving")


if __name__ == "__main__":
    main()
