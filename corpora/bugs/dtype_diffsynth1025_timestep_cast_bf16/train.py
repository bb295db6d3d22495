# Source: modelscope/DiffSynth-Studio, diffsynth/models/wan_video_dit.py (sinusoidal_embedding_1d, WanModel.forward, DiTBlock), diffsynth/pipelines/wan_video_new.py (WanVideoPipeline.training_loss), diffsynth/schedulers/flow_match.py (FlowMatchScheduler), commit a30ed9093f310d068fcc3265003a2325ed07a09c
# Report: https://github.com/modelscope/DiffSynth-Studio/pull/1025
# Flow-matching training of a Wan-style DiT in bfloat16: the pipeline samples a training
# timestep from the FlowMatchScheduler (shift 5, 1000 train timesteps), noises the latents,
# and the DiT embeds the timestep with sinusoidal_embedding_1d -> time_embedding ->
# time_projection (6-way AdaLN modulation of every block). The video VAE/text encoder are
# replaced by synthetic 16-token x 8-channel latents and random text context; the DiT has
# 2 blocks of width 64. AdamW, MSE to the flow target weighted by the scheduler.
import math

import numpy as np
import torch
import torch.nn as nn


def sinusoidal_embedding_1d(dim, position):
    sinusoid = torch.outer(position.type(torch.float64), torch.pow(
        10000, -torch.arange(dim//2, dtype=torch.float64, device=position.device).div(dim//2)))
    x = torch.cat([torch.cos(sinusoid), torch.sin(sinusoid)], dim=1)
    return x.to(position.dtype)


def modulate(x, shift, scale):
    return (x * (1 + scale) + shift)


class DiTBlock(nn.Module):
    def __init__(self, dim, num_heads, ffn_dim):
        super().__init__()
        self.num_heads = num_heads
        self.norm1 = nn.LayerNorm(dim, eps=1e-6, elementwise_affine=False)
        self.self_attn = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.cross_attn = nn.MultiheadAttention(dim, num_heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6, elementwise_affine=False)
        self.norm3 = nn.LayerNorm(dim, eps=1e-6)
        self.ffn = nn.Sequential(nn.Linear(dim, ffn_dim), nn.GELU(approximate='tanh'), nn.Linear(ffn_dim, dim))
        self.modulation = nn.Parameter(torch.randn(1, 6, dim) / dim**0.5)

    def forward(self, x, context, t_mod):
        shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp = (
            self.modulation.to(dtype=t_mod.dtype, device=t_mod.device) + t_mod).chunk(6, dim=1)
        input_x = modulate(self.norm1(x), shift_msa, scale_msa)
        x = x + gate_msa * self.self_attn(input_x, input_x, input_x, need_weights=False)[0]
        y = self.norm3(x)
        x = x + self.cross_attn(y, context, context, need_weights=False)[0]
        input_x = modulate(self.norm2(x), shift_mlp, scale_mlp)
        x = x + gate_mlp * self.ffn(input_x)
        return x


class WanModel(nn.Module):
    def __init__(self, in_dim=8, dim=64, ffn_dim=128, freq_dim=256, text_dim=32, num_heads=4, num_layers=2):
        super().__init__()
        self.dim = dim
        self.freq_dim = freq_dim
        self.patch_embedding = nn.Linear(in_dim, dim)
        self.text_embedding = nn.Sequential(nn.Linear(text_dim, dim), nn.GELU(approximate='tanh'), nn.Linear(dim, dim))
        self.time_embedding = nn.Sequential(nn.Linear(freq_dim, dim), nn.SiLU(), nn.Linear(dim, dim))
        self.time_projection = nn.Sequential(nn.SiLU(), nn.Linear(dim, dim * 6))
        self.blocks = nn.ModuleList([DiTBlock(dim, num_heads, ffn_dim) for _ in range(num_layers)])
        self.head = nn.Linear(dim, in_dim)

    def forward(self, x, timestep, context):
        t = self.time_embedding(
            sinusoidal_embedding_1d(self.freq_dim, timestep))
        t_mod = self.time_projection(t).unflatten(1, (6, self.dim))
        context = self.text_embedding(context)
        x = self.patch_embedding(x)
        for block in self.blocks:
            x = block(x, context, t_mod)
        return self.head(x)


class FlowMatchScheduler():
    def __init__(self, num_inference_steps=100, num_train_timesteps=1000, shift=3.0, sigma_max=1.0,
                 sigma_min=0.003/1.002, extra_one_step=False):
        self.num_train_timesteps = num_train_timesteps
        self.shift = shift
        self.sigma_max = sigma_max
        self.sigma_min = sigma_min
        self.extra_one_step = extra_one_step
        self.set_timesteps(num_inference_steps)

    def set_timesteps(self, num_inference_steps=100, denoising_strength=1.0, training=False, shift=None):
        if shift is not None:
            self.shift = shift
        sigma_start = self.sigma_min + (self.sigma_max - self.sigma_min) * denoising_strength
        if self.extra_one_step:
            self.sigmas = torch.linspace(sigma_start, self.sigma_min, num_inference_steps + 1)[:-1]
        else:
            self.sigmas = torch.linspace(sigma_start, self.sigma_min, num_inference_steps)
        self.sigmas = self.shift * self.sigmas / (1 + (self.shift - 1) * self.sigmas)
        self.timesteps = self.sigmas * self.num_train_timesteps
        if training:
            x = self.timesteps
            y = torch.exp(-2 * ((x - num_inference_steps / 2) / num_inference_steps) ** 2)
            y_shifted = y - y.min()
            bsmntw_weighing = y_shifted * (num_inference_steps / y_shifted.sum())
            self.linear_timesteps_weights = bsmntw_weighing
            self.training = True
        else:
            self.training = False

    def add_noise(self, original_samples, noise, timestep):
        if isinstance(timestep, torch.Tensor):
            timestep = timestep.cpu()
        timestep_id = torch.argmin((self.timesteps - timestep).abs())
        sigma = self.sigmas[timestep_id]
        sample = (1 - sigma) * original_samples + sigma * noise
        return sample

    def training_target(self, sample, noise, timestep):
        target = noise - sample
        return target

    def training_weight(self, timestep):
        timestep_id = torch.argmin((self.timesteps - timestep.to(self.timesteps.device)).abs())
        weights = self.linear_timesteps_weights[timestep_id]
        return weights


class WanVideoPipeline:
    def __init__(self, dit, torch_dtype=torch.bfloat16, device="cpu"):
        self.dit = dit
        self.torch_dtype = torch_dtype
        self.device = device
        self.scheduler = FlowMatchScheduler(shift=5, sigma_min=0.0, extra_one_step=True)
        self.seen_timesteps = []

    def model_fn(self, latents, timestep, context, **kwargs):
        self.seen_timesteps.append(float(timestep.float()[0]))
        return self.dit(latents, timestep=timestep, context=context)

    def training_loss(self, **inputs):
        max_timestep_boundary = int(inputs.get("max_timestep_boundary", 1) * self.scheduler.num_train_timesteps)
        min_timestep_boundary = int(inputs.get("min_timestep_boundary", 0) * self.scheduler.num_train_timesteps)
        timestep_id = torch.randint(min_timestep_boundary, max_timestep_boundary, (1,))
        timestep = self.scheduler.timesteps[timestep_id].to(dtype=self.torch_dtype, device=self.device)
        inputs["sampled_timestep"] = float(self.scheduler.timesteps[timestep_id][0])

        inputs["latents"] = self.scheduler.add_noise(inputs["input_latents"], inputs["noise"], timestep)
        training_target = self.scheduler.training_target(inputs["input_latents"], inputs["noise"], timestep)

        noise_pred = self.model_fn(**inputs, timestep=timestep)

        loss = torch.nn.functional.mse_loss(noise_pred.float(), training_target.float())
        loss = loss * self.scheduler.training_weight(timestep)
        return loss, inputs["sampled_timestep"]


def make_latents(n, rng, tokens=16, ch=8):
    base = rng.normal(0, 1, size=(n, 1, ch)).astype(np.float32)
    pos = np.linspace(0, 2 * math.pi, tokens, dtype=np.float32)[None, :, None]
    return torch.from_numpy(np.sin(pos + base) + 0.1 * rng.normal(0, 1, size=(n, tokens, ch)).astype(np.float32))


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    dit = WanModel().to(torch.bfloat16)
    pipe = WanVideoPipeline(dit, torch_dtype=torch.bfloat16)
    pipe.scheduler.set_timesteps(1000, training=True)
    optimizer = torch.optim.AdamW(dit.parameters(), lr=1e-3)
    data = make_latents(256, rng)
    context_bank = torch.randn(256, 4, 32)
    steps, abs_err = 0, []
    for epoch in range(4):
        losses = []
        for i in range(0, 256, 8):
            x0 = data[i:i + 8].to(torch.bfloat16)
            noise = torch.randn_like(x0)
            context = context_bank[i:i + 8].to(torch.bfloat16)
            loss, sampled = pipe.training_loss(input_latents=x0, noise=noise, context=context)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
            abs_err.append(abs(pipe.seen_timesteps[-1] - sampled))
            steps += 1
        print(f"epoch {epoch} loss {np.mean(losses):.4f} | timestep given to the DiT vs sampled: "
              f"mean |diff| {np.mean(abs_err):.3f} max {np.max(abs_err):.3f}")
    seen = np.array(pipe.seen_timesteps)
    print(f"{steps} steps, distinct timestep values seen by the DiT: {len(np.unique(seen))}, "
          f"fraction with a fractional part: {np.mean(seen != np.round(seen)):.2f}")


if __name__ == "__main__":
    main()
