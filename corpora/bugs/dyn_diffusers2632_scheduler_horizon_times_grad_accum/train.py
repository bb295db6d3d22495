# Source: huggingface/diffusers, examples/text_to_image/train_text_to_image.py (main: scheduler set-up, accelerator.accumulate training loop), commit 92a57a8e84a98a4da87b6a0621615eed4a23edc4
# Report: https://github.com/huggingface/diffusers/issues/2632
# The text-to-image fine-tuning example with --gradient_accumulation_steps 4 and a cosine
# lr schedule: max_train_steps counts optimizer updates, the scheduler is built from it and
# stepped inside accelerator.accumulate (accelerate's prepared scheduler only advances when
# the optimizer really steps). The Stable Diffusion UNet/VAE/CLIP are replaced by a small
# conditional MLP denoiser on synthetic 16-dim latents; EMA, xformers, checkpointing, the
# hub and validation images are removed; transformers' get_scheduler stands in for
# diffusers.optimization.get_scheduler (the same schedules).
import math
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from accelerate import Accelerator
from transformers import get_scheduler


class DDPMScheduler:
    def __init__(self, num_train_timesteps=1000, beta_start=0.00085, beta_end=0.012):
        self.config = SimpleNamespace(num_train_timesteps=num_train_timesteps, prediction_type="epsilon")
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
        return SimpleNamespace(sample=self.out(self.mid(h)))


def make_dataset(n=512, seed=0):
    g = torch.Generator().manual_seed(seed)
    captions = torch.randn(n, 8, generator=g)
    proj = torch.randn(8, 16, generator=g) / math.sqrt(8)
    latents = torch.tanh(captions @ proj) + 0.05 * torch.randn(n, 16, generator=g)
    return torch.utils.data.TensorDataset(latents, captions)


def main():
    args = SimpleNamespace(gradient_accumulation_steps=4, train_batch_size=8, num_train_epochs=6,
                           max_train_steps=None, learning_rate=1e-3, lr_scheduler="cosine", lr_warmup_steps=10,
                           max_grad_norm=1.0, seed=0)
    accelerator = Accelerator(gradient_accumulation_steps=args.gradient_accumulation_steps, cpu=True)
    torch.manual_seed(args.seed)

    unet = TinyUNet()
    noise_scheduler = DDPMScheduler()
    optimizer = torch.optim.AdamW(unet.parameters(), lr=args.learning_rate, betas=(0.9, 0.999),
                                  weight_decay=1e-2, eps=1e-08)
    train_dataloader = torch.utils.data.DataLoader(make_dataset(), shuffle=True, batch_size=args.train_batch_size)

    # Scheduler and math around the number of training steps.
    overrode_max_train_steps = False
    num_update_steps_per_epoch = math.ceil(len(train_dataloader) / args.gradient_accumulation_steps)
    if args.max_train_steps is None:
        args.max_train_steps = args.num_train_epochs * num_update_steps_per_epoch
        overrode_max_train_steps = True

    lr_scheduler = get_scheduler(
        args.lr_scheduler,
        optimizer=optimizer,
        num_warmup_steps=args.lr_warmup_steps * args.gradient_accumulation_steps,
        num_training_steps=args.max_train_steps * args.gradient_accumulation_steps,
    )

    # Prepare everything with our `accelerator`.
    unet, optimizer, train_dataloader, lr_scheduler = accelerator.prepare(
        unet, optimizer, train_dataloader, lr_scheduler
    )
    print(f"Total optimization steps = {args.max_train_steps}, gradient accumulation = {args.gradient_accumulation_steps}")

    global_step = 0
    for epoch in range(args.num_train_epochs):
        unet.train()
        train_loss = 0.0
        for step, batch in enumerate(train_dataloader):
            with accelerator.accumulate(unet):
                latents, encoder_hidden_states = batch
                noise = torch.randn_like(latents)
                bsz = latents.shape[0]
                timesteps = torch.randint(0, noise_scheduler.config.num_train_timesteps, (bsz,))
                timesteps = timesteps.long()
                noisy_latents = noise_scheduler.add_noise(latents, noise, timesteps)
                target = noise

                model_pred = unet(noisy_latents, timesteps, encoder_hidden_states).sample
                loss = F.mse_loss(model_pred.float(), target.float(), reduction="mean")

                avg_loss = accelerator.gather(loss.repeat(args.train_batch_size)).mean()
                train_loss += avg_loss.item() / args.gradient_accumulation_steps

                # Backpropagate
                accelerator.backward(loss)
                if accelerator.sync_gradients:
                    accelerator.clip_grad_norm_(unet.parameters(), args.max_grad_norm)
                optimizer.step()
                lr_scheduler.step()
                optimizer.zero_grad()

            # Checks if the accelerator has performed an optimization step behind the scenes
            if accelerator.sync_gradients:
                global_step += 1
                last_loss, train_loss = train_loss, 0.0
            if global_step >= args.max_train_steps:
                break
        print(f"epoch {epoch} global_step {global_step} loss {last_loss:.4f} "
              f"lr {lr_scheduler.get_last_lr()[0]:.2e}")
    print(f"final lr {lr_scheduler.get_last_lr()[0]:.2e} after {global_step} of {args.max_train_steps} "
          f"optimization steps (peak {args.learning_rate:.0e})")


if __name__ == "__main__":
    main()
