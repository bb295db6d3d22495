# Source: modelscope/DiffSynth-Studio, diffsynth/diffusion/loss.py (TrajectoryImitationLoss.fetch_trajectory, align_trajectory, forward), diffsynth/diffusion/flow_match.py (FlowMatchScheduler.set_timesteps_wan, set_timesteps, step), commit 0e6976a0ae1e21062f697e294042d4edab8c581f
# Report: https://github.com/modelscope/DiffSynth-Studio/pull/1293
# Few-step distillation with DiffSynth's TrajectoryImitationLoss: a frozen teacher denoiser
# samples a 50-step flow-matching trajectory (Wan schedule, shift 5) from noise; the student,
# run on an 8-step schedule, is trained at every one of its steps to predict the velocity that
# moves the teacher's latent at its timestep to the teacher's latent at the next student
# timestep, (latents_next - latents) / (sigma_next - sigma). The DiT/VAE are replaced by a
# timestep-conditioned MLP on 16-d latents, classifier-free guidance (cfg 2 for the teacher)
# by a single conditional pass, and the LPIPS regularisation term is dropped.
import copy

import numpy as np
import torch
import torch.nn as nn


class FlowMatchScheduler():
    def __init__(self):
        self.num_train_timesteps = 1000

    @staticmethod
    def set_timesteps_wan(num_inference_steps=100, denoising_strength=1.0, shift=None):
        sigma_min = 0.0
        sigma_max = 1.0
        shift = 5 if shift is None else shift
        num_train_timesteps = 1000
        sigma_start = sigma_min + (sigma_max - sigma_min) * denoising_strength
        sigmas = torch.linspace(sigma_start, sigma_min, num_inference_steps + 1)[:-1]
        sigmas = shift * sigmas / (1 + (shift - 1) * sigmas)
        timesteps = sigmas * num_train_timesteps
        return sigmas, timesteps

    def set_timesteps(self, num_inference_steps=100, denoising_strength=1.0, training=False, **kwargs):
        self.sigmas, self.timesteps = self.set_timesteps_wan(num_inference_steps=num_inference_steps,
                                                             denoising_strength=denoising_strength)
        if training:
            self.set_training_weight()
            self.training = True
        else:
            self.training = False

    def set_training_weight(self):
        steps = 1000
        x = self.timesteps
        y = torch.exp(-2 * ((x - steps / 2) / steps) ** 2)
        y_shifted = y - y.min()
        bsmntw_weighing = y_shifted * (steps / y_shifted.sum())
        if len(self.timesteps) != 1000:
            # This is an empirical formula.
            bsmntw_weighing = bsmntw_weighing * (len(self.timesteps) / steps)
            bsmntw_weighing = bsmntw_weighing + bsmntw_weighing[1]
        self.linear_timesteps_weights = bsmntw_weighing

    def training_weight(self, timestep):
        timestep_id = torch.argmin((self.timesteps - timestep.to(self.timesteps.device)).abs())
        return self.linear_timesteps_weights[timestep_id]

    def step(self, model_output, timestep, sample, to_final=False, **kwargs):
        if isinstance(timestep, torch.Tensor):
            timestep = timestep.cpu()
        timestep_id = torch.argmin((self.timesteps - timestep).abs())
        sigma = self.sigmas[timestep_id]
        if to_final or timestep_id + 1 >= len(self.timesteps):
            sigma_ = 0
        else:
            sigma_ = self.sigmas[timestep_id + 1]
        prev_sample = sample + model_output * (sigma_ - sigma)
        return prev_sample


class Denoiser(nn.Module):
    def __init__(self, dim=16, hidden=64, freq_dim=32):
        super().__init__()
        self.freq_dim = freq_dim
        self.net = nn.Sequential(nn.Linear(dim + freq_dim + 8, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, dim))

    def forward(self, latents, timestep, context):
        freqs = torch.pow(10000, -torch.arange(self.freq_dim // 2, dtype=torch.float32) / (self.freq_dim // 2))
        emb = timestep.float()[:, None] * freqs[None]
        emb = torch.cat([emb.cos(), emb.sin()], dim=-1).expand(latents.shape[0], -1)
        return self.net(torch.cat([latents, emb, context], dim=-1))


class Pipeline:
    def __init__(self, dit):
        self.dit = dit
        self.scheduler = FlowMatchScheduler()
        self.in_iteration_models = ("dit",)
        self.torch_dtype = torch.float32
        self.device = "cpu"

    def model_fn(self, dit, latents, timestep, context, **kwargs):
        return dit(latents, timestep, context)

    def cfg_guided_model_fn(self, model_fn, cfg_scale, inputs_shared, inputs_posi, inputs_nega, **kwargs):
        return model_fn(**kwargs, **{k: v for k, v in inputs_shared.items() if k != "teacher"}, **inputs_posi)

    def step(self, scheduler, progress_id, noise_pred, latents, **kwargs):
        return scheduler.step(noise_pred, scheduler.timesteps[progress_id], latents)


class TrajectoryImitationLoss(torch.nn.Module):
    def fetch_trajectory(self, pipe, timesteps_student, inputs_shared, inputs_posi, inputs_nega, num_inference_steps, cfg_scale):
        trajectory = [inputs_shared["latents"].clone()]

        pipe.scheduler.set_timesteps(num_inference_steps)
        models = {name: getattr(pipe, name) for name in pipe.in_iteration_models}
        for progress_id, timestep in enumerate(pipe.scheduler.timesteps):
            timestep = timestep.unsqueeze(0).to(dtype=pipe.torch_dtype, device=pipe.device)
            noise_pred = pipe.cfg_guided_model_fn(
                pipe.model_fn, cfg_scale,
                inputs_shared, inputs_posi, inputs_nega,
                **models, timestep=timestep, progress_id=progress_id
            )
            inputs_shared["latents"] = pipe.step(pipe.scheduler, progress_id=progress_id, noise_pred=noise_pred.detach(), **inputs_shared)

            trajectory.append(inputs_shared["latents"].clone())
        return pipe.scheduler.timesteps, trajectory

    def align_trajectory(self, pipe, timesteps_teacher, trajectory_teacher, inputs_shared, inputs_posi, inputs_nega, num_inference_steps, cfg_scale):
        loss = 0
        pipe.scheduler.set_timesteps(num_inference_steps, training=True)
        models = {name: getattr(pipe, name) for name in pipe.in_iteration_models}
        for progress_id, timestep in enumerate(pipe.scheduler.timesteps):
            timestep = timestep.unsqueeze(0).to(dtype=pipe.torch_dtype, device=pipe.device)

            progress_id_teacher = torch.argmin((timesteps_teacher - timestep).abs())
            inputs_shared["latents"] = trajectory_teacher[progress_id_teacher]

            noise_pred = pipe.cfg_guided_model_fn(
                pipe.model_fn, cfg_scale,
                inputs_shared, inputs_posi, inputs_nega,
                **models, timestep=timestep, progress_id=progress_id
            )

            sigma = pipe.scheduler.sigmas[progress_id]
            sigma_ = 0 if progress_id + 1 >= len(pipe.scheduler.timesteps) else pipe.scheduler.sigmas[progress_id + 1]
            if progress_id + 1 >= len(pipe.scheduler.timesteps):
                latents_ = trajectory_teacher[-1]
            else:
                progress_id_teacher = torch.argmin((timesteps_teacher - pipe.scheduler.timesteps[progress_id + 1]).abs())
                latents_ = trajectory_teacher[progress_id_teacher]

            target = (latents_ - inputs_shared["latents"]) / (sigma_ - sigma).clamp(min=1e-6)
            loss = loss + torch.nn.functional.mse_loss(noise_pred.float(), target.float()) * pipe.scheduler.training_weight(timestep)
        return loss

    def forward(self, pipe, inputs_shared, inputs_posi, inputs_nega):
        with torch.no_grad():
            pipe.scheduler.set_timesteps(8)
            teacher_pipe = Pipeline(inputs_shared["teacher"])
            timesteps_teacher, trajectory_teacher = self.fetch_trajectory(teacher_pipe, pipe.scheduler.timesteps, inputs_shared, inputs_posi, inputs_nega, 50, 2)
            timesteps_teacher = timesteps_teacher.to(dtype=pipe.torch_dtype, device=pipe.device)
        loss_1 = self.align_trajectory(pipe, timesteps_teacher, trajectory_teacher, inputs_shared, inputs_posi, inputs_nega, 8, 1)
        return loss_1


@torch.no_grad()
def sample(pipe, noise, context, steps):
    pipe.scheduler.set_timesteps(steps)
    latents = noise
    for progress_id, timestep in enumerate(pipe.scheduler.timesteps):
        v = pipe.model_fn(pipe.dit, latents, timestep.unsqueeze(0), context)
        latents = pipe.step(pipe.scheduler, progress_id, v, latents)
    return latents


def main():
    torch.manual_seed(0)
    teacher = Denoiser()
    for p in teacher.parameters():
        p.requires_grad_(False)
    student = copy.deepcopy(teacher)
    for p in student.parameters():
        p.requires_grad_(True)
    pipe = Pipeline(student)
    loss_fn = TrajectoryImitationLoss()
    optimizer = torch.optim.AdamW(student.parameters(), lr=1e-3)
    eval_noise, eval_ctx = torch.randn(64, 16), torch.randn(64, 8)
    ref = sample(Pipeline(teacher), eval_noise.clone(), eval_ctx, 50)
    for step in range(1, 61):
        inputs_shared = {"latents": torch.randn(16, 16), "teacher": teacher}
        inputs_posi = {"context": torch.randn(16, 8)}
        loss = loss_fn(pipe, inputs_shared, inputs_posi, {})
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0:
            out = sample(pipe, eval_noise.clone(), eval_ctx, 8)
            err = (out - ref).pow(2).mean().item()
            print(f"step {step} loss {loss.item():.4e} | 8-step student vs 50-step teacher samples: mse {err:.4e}")


if __name__ == "__main__":
    main()
