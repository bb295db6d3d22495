# Source: X-GenGroup/Flow-Factory, src/flow_factory/trainers/grpo.py (GRPOTrainer.sample, optimize), src/flow_factory/scheduler/flow_match_euler_discrete.py (FlowMatchEulerDiscreteSDEScheduler.step, Flow-SDE), src/flow_factory/models/abc.py (use_ref_parameters), commit 70584077a10593cda04f5e3a58c9fb4465d859d7
# Report: https://github.com/X-GenGroup/Flow-Factory/issues/122
# Flow-GRPO fine-tuning of a flow-matching generator with LoRA: rollouts are sampled with the
# Flow-SDE scheduler (noise on the SDE window of steps), rewarded, turned into group-normalised
# advantages, and the policy is optimised with the PPO-style clipped ratio of the SDE step
# log-probabilities plus a velocity-space ('v-based') KL penalty to the reference model (the
# LoRA adapters disabled, as use_ref_parameters does with PEFT). The diffusion transformer is
# replaced by a small MLP velocity model over 8-dim latents with 4 prompt embeddings,
# pre-trained here with flow matching; the reward model by a distance to a per-prompt goal;
# accelerate by a plain loop with gradient accumulation over batches and timesteps.
import math
from collections import defaultdict
from contextlib import contextmanager

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

DIM = 8
N_PROMPTS = 4


class TrainingArgs:
    num_inference_steps = 10
    sde_steps = [1, 2, 3]
    noise_level = 0.7
    group_size = 8
    per_device_batch_size = 8
    gradient_step_per_epoch = 2
    num_inner_epochs = 1
    clip_range = (-1e-4, 1e-4)
    adv_clip_range = (-5.0, 5.0)
    kl_type = 'v-based'
    kl_beta = 0.05
    learning_rate = 3e-3
    max_grad_norm = 1.0
    num_epochs = 30
    seed = 42


# ---- model: velocity network with LoRA adapters ----
class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r=4, alpha=8):
        super().__init__()
        self.base = base
        self.lora_A = nn.Parameter(torch.randn(r, base.in_features) / math.sqrt(base.in_features))
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        self.scaling = alpha / r
        self.disabled = False

    def forward(self, x):
        out = self.base(x)
        if not self.disabled:
            out = out + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling
        return out


class VelocityModel(nn.Module):
    def __init__(self, hidden=128):
        super().__init__()
        self.prompt_emb = nn.Embedding(N_PROMPTS, 16)
        self.l1 = nn.Linear(DIM + 16 + 16, hidden)
        self.l2 = nn.Linear(hidden, hidden)
        self.l3 = nn.Linear(hidden, DIM)

    def time_emb(self, t):
        freqs = torch.exp(torch.arange(8) * -(math.log(1000.0) / 8))
        ang = (t / 1000.0)[:, None] * 1000.0 * freqs[None]
        return torch.cat([ang.sin(), ang.cos()], -1)

    def forward(self, latents, t, prompt_ids):
        h = torch.cat([latents, self.time_emb(t), self.prompt_emb(prompt_ids)], -1)
        h = torch.nn.functional.silu(self.l1(h))
        h = torch.nn.functional.silu(self.l2(h))
        return self.l3(h)

    def add_lora(self):
        for p in self.parameters():
            p.requires_grad_(False)
        self.l1, self.l2, self.l3 = LoRALinear(self.l1), LoRALinear(self.l2), LoRALinear(self.l3)


def pretrain(model, mus, steps=400):
    opt = torch.optim.Adam(model.parameters(), lr=2e-3)
    for _ in range(steps):
        ids = torch.randint(0, N_PROMPTS, (128,))
        x0 = mus[ids] + 0.3 * torch.randn(128, DIM)
        x1 = torch.randn(128, DIM)
        sigma = torch.rand(128)
        xt = (1 - sigma[:, None]) * x0 + sigma[:, None] * x1
        loss = ((model(xt, sigma * 1000, ids) - (x1 - x0)) ** 2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


# ---- scheduler: FlowMatchEulerDiscreteSDEScheduler.step, dynamics_type='Flow-SDE' ----
class SDEScheduler:
    def __init__(self, num_inference_steps, noise_level, sde_steps):
        self.sigmas = torch.linspace(1.0, 0.0, num_inference_steps + 1)
        self.timesteps = self.sigmas[:-1] * 1000
        self.noise_level = noise_level
        self.train_timesteps = list(sde_steps)

    def step(self, noise_pred, sigma, sigma_prev, latents, next_latents=None, noise_level=0.0,
             compute_log_prob=True, generator=None):
        sigma = sigma.view(-1, 1)
        sigma_prev = sigma_prev.view(-1, 1)
        dt = sigma_prev - sigma
        if noise_level == 0.0:
            next_latents_mean = latents + noise_pred * dt
            if next_latents is None:
                next_latents = next_latents_mean
            return next_latents, next_latents_mean, torch.zeros(latents.shape[0]), dt
        sigma_max = self.sigmas[1].item()
        std_dev_t = torch.sqrt(sigma / (1 - torch.where(sigma == 1.0, torch.full_like(sigma, sigma_max), sigma))) * noise_level
        next_latents_mean = latents * (1 + std_dev_t**2 / (2 * sigma) * dt) + noise_pred * (1 + std_dev_t**2 * (1 - sigma) / (2 * sigma)) * dt
        if next_latents is None:
            variance_noise = torch.randn(noise_pred.shape, generator=generator)
            next_latents = next_latents_mean + std_dev_t * torch.sqrt(-1 * dt) * variance_noise
        log_prob = None
        if compute_log_prob:
            std_variance = (std_dev_t * torch.sqrt(-1 * dt))
            log_prob = (
                -((next_latents.detach() - next_latents_mean) ** 2) / (2 * std_variance ** 2)
                - torch.log(std_variance)
                - torch.log(torch.sqrt(2 * torch.as_tensor(math.pi)))
            )
            log_prob = log_prob.mean(dim=tuple(range(1, log_prob.ndim)))
        return next_latents, next_latents_mean, log_prob, dt


class Output:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class Adapter:
    def __init__(self, model, scheduler):
        self.model = model
        self.scheduler = scheduler

    def get_trainable_parameters(self):
        return [p for p in self.model.parameters() if p.requires_grad]

    @contextmanager
    def use_ref_parameters(self):
        loras = [m for m in self.model.modules() if isinstance(m, LoRALinear)]
        for m in loras:
            m.disabled = True
        try:
            yield
        finally:
            for m in loras:
                m.disabled = False

    def forward(self, t_index, latents, prompt_ids, next_latents=None, compute_log_prob=True,
                noise_level=0.0, return_kwargs=('log_prob',)):
        sigma = self.scheduler.sigmas[t_index].expand(latents.shape[0])
        sigma_prev = self.scheduler.sigmas[t_index + 1].expand(latents.shape[0])
        noise_pred = self.model(latents, sigma * 1000, prompt_ids)
        nxt, mean, log_prob, dt = self.scheduler.step(
            noise_pred, sigma, sigma_prev, latents, next_latents=next_latents,
            noise_level=noise_level, compute_log_prob=compute_log_prob)
        out = {'log_prob': log_prob, 'noise_pred': noise_pred, 'next_latents': nxt,
               'next_latents_mean': mean, 'dt': dt}
        return Output(**{k: out[k] for k in return_kwargs})

    @torch.no_grad()
    def inference(self, prompt_ids, generator):
        latents = torch.randn(prompt_ids.shape[0], DIM, generator=generator)
        all_latents, log_probs = [latents], []
        for i in range(len(self.scheduler.timesteps)):
            noise_level = self.scheduler.noise_level if i in self.scheduler.train_timesteps else 0.0
            out = self.forward(i, latents, prompt_ids, noise_level=noise_level,
                               return_kwargs=('next_latents', 'log_prob'))
            latents = out.next_latents
            all_latents.append(latents)
            log_probs.append(out.log_prob)
        return torch.stack(all_latents, 1), torch.stack(log_probs, 1)


class GRPOTrainer:
    def __init__(self, adapter, args, goals, mus):
        self.adapter = adapter
        self.training_args = args
        self.goals = goals
        self.mus = mus
        self.optimizer = torch.optim.AdamW(adapter.get_trainable_parameters(), lr=args.learning_rate,
                                           weight_decay=1e-4)
        self.epoch = 0
        self.step = 0

    @property
    def enable_kl_loss(self):
        return self.training_args.kl_beta > 0

    def reward(self, x0, prompt_ids):
        return -((x0 - self.goals[prompt_ids]) ** 2).sum(-1)

    def sample(self):
        gen = torch.Generator().manual_seed(self.training_args.seed + self.epoch)
        prompt_ids = torch.arange(N_PROMPTS).repeat_interleave(self.training_args.group_size)
        all_latents, log_probs = self.adapter.inference(prompt_ids, gen)
        rewards = self.reward(all_latents[:, -1], prompt_ids)
        grouped = rewards.view(N_PROMPTS, -1)
        adv = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)
        return {'prompt_ids': prompt_ids, 'all_latents': all_latents, 'log_probs': log_probs,
                'advantage': adv, 'rewards': rewards}

    def optimize(self, samples):
        args = self.training_args
        n = samples['prompt_ids'].shape[0]
        n_batches = n // args.per_device_batch_size
        accum = (n_batches // args.gradient_step_per_epoch) * len(self.adapter.scheduler.train_timesteps)
        for inner_epoch in range(args.num_inner_epochs):
            perm_gen = torch.Generator().manual_seed(args.seed * 1000 + self.epoch * 10 + inner_epoch)
            perm = torch.randperm(n, generator=perm_gen)
            loss_info = defaultdict(list)
            micro = 0
            for b in range(n_batches):
                idx = perm[b * args.per_device_batch_size:(b + 1) * args.per_device_batch_size]
                batch = {k: v[idx] for k, v in samples.items()}
                for timestep_index in self.adapter.scheduler.train_timesteps:
                    old_log_prob = batch['log_probs'][:, timestep_index]
                    latents = batch['all_latents'][:, timestep_index]
                    next_latents = batch['all_latents'][:, timestep_index + 1]
                    forward_inputs = dict(t_index=timestep_index, latents=latents,
                                          prompt_ids=batch['prompt_ids'], next_latents=next_latents,
                                          compute_log_prob=True, noise_level=self.adapter.scheduler.noise_level)
                    if self.enable_kl_loss:
                        return_kwargs = ['log_prob', 'noise_pred', 'dt']
                    else:
                        return_kwargs = ['log_prob', 'dt']
                    forward_inputs['return_kwargs'] = return_kwargs
                    output = self.adapter.forward(**forward_inputs)

                    adv = batch['advantage']
                    adv = torch.clamp(adv, args.adv_clip_range[0], args.adv_clip_range[1])
                    ratio = torch.exp(output.log_prob - old_log_prob)
                    ratio_clip_range = args.clip_range
                    unclipped_loss = -adv * ratio
                    clipped_loss = -adv * torch.clamp(ratio, 1.0 + ratio_clip_range[0], 1.0 + ratio_clip_range[1])
                    policy_loss = torch.mean(torch.maximum(unclipped_loss, clipped_loss))

                    loss = policy_loss

                    if self.enable_kl_loss:
                        with torch.no_grad(), self.adapter.use_ref_parameters():
                            ref_forward_inputs = forward_inputs.copy()
                            ref_forward_inputs['compute_log_prob'] = False
                            ref_forward_inputs['return_kwargs'] = ['noise_pred']
                            ref_output = self.adapter.forward(**ref_forward_inputs)
                            kl_div = torch.mean(
                                ((output.noise_pred - ref_output.noise_pred) ** 2),
                                dim=tuple(range(1, output.noise_pred.ndim)), keepdim=True
                            )

                        kl_div = torch.mean(kl_div)
                        kl_loss = args.kl_beta * kl_div
                        loss += kl_loss
                        loss_info['kl_div'].append(kl_div.detach())
                        loss_info['kl_loss'].append(kl_loss.detach())

                    loss_info['policy_loss'].append(policy_loss.detach())
                    loss_info['loss'].append(loss.detach())

                    (loss / accum).backward()
                    micro += 1
                    if micro % accum == 0:
                        torch.nn.utils.clip_grad_norm_(self.adapter.get_trainable_parameters(), args.max_grad_norm)
                        self.optimizer.step()
                        self.optimizer.zero_grad()
                        self.step += 1
            return {k: torch.stack(v).mean().item() for k, v in loss_info.items()}


@torch.no_grad()
def evaluate(adapter, goals, mus):
    """ODE samples from the policy and the reference model for 256 fixed noises."""
    prompt_ids = torch.arange(N_PROMPTS).repeat_interleave(64)
    gen = torch.Generator().manual_seed(1234)
    x = torch.randn(prompt_ids.shape[0], DIM, generator=gen)
    xs = {}
    for name in ['policy', 'ref']:
        lat = x.clone()
        ctx = adapter.use_ref_parameters() if name == 'ref' else contextmanager(lambda: (yield))()
        with ctx:
            for i in range(len(adapter.scheduler.timesteps)):
                lat = adapter.forward(i, lat, prompt_ids, return_kwargs=('next_latents',)).next_latents
        xs[name] = lat
    reward = -((xs['policy'] - goals[prompt_ids]) ** 2).sum(-1).mean().item()
    drift = (xs['policy'] - xs['ref']).norm(dim=-1).mean().item()
    return reward, drift


def main():
    args = TrainingArgs()
    mus = torch.randn(N_PROMPTS, DIM) * 1.5
    goals = mus + torch.randn(N_PROMPTS, DIM) * 1.5
    model = VelocityModel()
    pretrain(model, mus)
    model.add_lora()
    adapter = Adapter(model, SDEScheduler(args.num_inference_steps, args.noise_level, args.sde_steps))
    trainer = GRPOTrainer(adapter, args, goals, mus)
    for epoch in range(args.num_epochs):
        trainer.epoch = epoch
        samples = trainer.sample()
        info = trainer.optimize(samples)
        if epoch % 5 == 4:
            reward, drift = evaluate(adapter, goals, mus)
            print(f"epoch {epoch}: train reward {samples['rewards'].mean().item():.3f} | "
                  f"policy_loss {info['policy_loss']:.4f} kl_div {info['kl_div']:.4f} | "
                  f"eval ODE reward {reward:.3f}, distance of samples from reference model {drift:.3f}")


if __name__ == '__main__':
    main()
