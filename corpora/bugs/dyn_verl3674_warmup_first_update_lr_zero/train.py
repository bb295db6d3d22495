# Source: volcengine/verl, verl/workers/fsdp_workers.py (ActorRolloutRefWorker._build_model_optimizer, update_actor), verl/workers/actor/dp_actor.py (DataParallelPPOActor.update_policy), verl/utils/torch_functional.py (get_constant_schedule_with_warmup), commit 3eaaf24d5a2c7bd0653fdf9b791d54ec3d93a665
# Report: https://github.com/verl-project/verl/issues/3674
# verl PPO/GRPO actor update: the actor worker builds AdamW with a constant-with-warmup LambdaLR,
# update_actor runs update_policy (ppo_epochs x mini-batches of clipped policy-gradient loss, grad
# clipping, optimizer.step) and then steps the lr scheduler and logs actor/lr. The FSDP language
# model is replaced by a tiny policy over a 16-token vocabulary that answers a prompt with one
# token; rollouts are sampled from the policy, the reward is 1 for the right answer, and the
# advantage is the GRPO group-normalised reward.
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

VOCAB = 16
N_PROMPTS = 16


def get_constant_schedule_with_warmup(optimizer, num_warmup_steps, last_epoch=-1):
    def lr_lambda(current_step):
        return min(1, float(current_step) / float(max(1, num_warmup_steps)))

    return LambdaLR(optimizer, lr_lambda, last_epoch)


class TinyPolicy(nn.Module):
    def __init__(self, hidden=32):
        super().__init__()
        self.embed = nn.Embedding(N_PROMPTS, hidden)
        self.mlp = nn.Sequential(nn.Linear(hidden, hidden), nn.Tanh(), nn.Linear(hidden, VOCAB))

    def forward(self, prompts):
        return self.mlp(self.embed(prompts))


def compute_policy_loss(old_log_prob, log_prob, advantages, cliprange):
    negative_approx_kl = log_prob - old_log_prob
    ratio = torch.exp(negative_approx_kl)
    pg_losses = -advantages * ratio
    pg_losses2 = -advantages * torch.clamp(ratio, 1.0 - cliprange, 1.0 + cliprange)
    pg_loss = torch.max(pg_losses, pg_losses2).mean()
    pg_clipfrac = torch.gt(pg_losses2, pg_losses).float().mean()
    return pg_loss, pg_clipfrac


class DataParallelPPOActor:
    def __init__(self, config, actor_module, actor_optimizer):
        self.config = config
        self.actor_module = actor_module
        self.actor_optimizer = actor_optimizer

    def compute_log_prob(self, prompts, responses):
        logits = self.actor_module(prompts)
        return torch.log_softmax(logits, dim=-1).gather(-1, responses.unsqueeze(-1)).squeeze(-1)

    def update_policy(self, data):
        self.actor_module.train()
        metrics = {"actor/pg_loss": [], "actor/grad_norm": [], "actor/applied_lr": []}
        n = data["prompts"].shape[0]
        mini = self.config["ppo_mini_batch_size"]
        for _ in range(self.config["ppo_epochs"]):
            for start in range(0, n, mini):
                idx = slice(start, start + mini)
                self.actor_optimizer.zero_grad()
                log_prob = self.compute_log_prob(data["prompts"][idx], data["responses"][idx])
                pg_loss, _ = compute_policy_loss(data["old_log_probs"][idx], log_prob,
                                                 data["advantages"][idx], self.config["clip_ratio"])
                pg_loss.backward()
                grad_norm = nn.utils.clip_grad_norm_(self.actor_module.parameters(),
                                                     max_norm=self.config["grad_clip"])
                self.actor_optimizer.step()
                metrics["actor/pg_loss"].append(pg_loss.item())
                metrics["actor/grad_norm"].append(grad_norm.item())
                metrics["actor/applied_lr"].append(self.actor_optimizer.param_groups[0]["lr"])
        return metrics


class ActorRolloutRefWorker:
    def __init__(self, config):
        self.config = config
        self._build_model_optimizer(config["actor"]["optim"])
        self.actor = DataParallelPPOActor(config["actor"], self.actor_module, self.actor_optimizer)

    def _build_model_optimizer(self, optim_config):
        self.actor_module = TinyPolicy()
        self.actor_optimizer = torch.optim.AdamW(self.actor_module.parameters(), lr=optim_config["lr"],
                                                 betas=optim_config.get("betas", (0.9, 0.999)),
                                                 weight_decay=optim_config.get("weight_decay", 1e-2))
        total_steps = optim_config.get("total_training_steps", 0)
        num_warmup_steps = int(optim_config.get("lr_warmup_steps", -1))
        if num_warmup_steps < 0:
            num_warmup_steps_ratio = optim_config.get("lr_warmup_steps_ratio", 0.0)
            num_warmup_steps = int(num_warmup_steps_ratio * total_steps)
        print(f"Total steps: {total_steps}, num_warmup_steps: {num_warmup_steps}")
        self.actor_lr_scheduler = get_constant_schedule_with_warmup(optimizer=self.actor_optimizer,
                                                                    num_warmup_steps=num_warmup_steps)

    @torch.no_grad()
    def generate_sequences(self, prompts, generator):
        logits = self.actor_module(prompts)
        responses = torch.multinomial(torch.softmax(logits, dim=-1), 1, generator=generator).squeeze(-1)
        return responses

    @torch.no_grad()
    def compute_log_prob(self, prompts, responses):
        return self.actor.compute_log_prob(prompts, responses)

    def update_actor(self, data):
        metrics = self.actor.update_policy(data=data)
        self.actor_lr_scheduler.step()
        lr = self.actor_lr_scheduler.get_last_lr()[0]
        metrics["actor/lr"] = lr
        return metrics


def compute_grpo_outcome_advantage(rewards, index, epsilon=1e-6):
    scores = rewards.clone()
    for uid in index.unique():
        m = index == uid
        scores[m] = (rewards[m] - rewards[m].mean()) / (rewards[m].std() + epsilon)
    return scores


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    config = {"actor": {"ppo_mini_batch_size": 32, "ppo_epochs": 2, "clip_ratio": 0.2, "grad_clip": 1.0,
                        "optim": {"lr": 3e-2, "total_training_steps": 12, "lr_warmup_steps_ratio": 0.25}},
              "rollout_n": 8}
    worker = ActorRolloutRefWorker(config)
    answer = (torch.arange(N_PROMPTS) * 5 + 3) % VOCAB
    gen = torch.Generator().manual_seed(1)
    for step in range(1, config["actor"]["optim"]["total_training_steps"] + 1):
        prompts = torch.arange(N_PROMPTS).repeat_interleave(config["rollout_n"])
        responses = worker.generate_sequences(prompts, gen)
        rewards = (responses == answer[prompts]).float()
        old_log_probs = worker.compute_log_prob(prompts, responses)
        advantages = compute_grpo_outcome_advantage(rewards, prompts)
        data = {"prompts": prompts, "responses": responses, "old_log_probs": old_log_probs,
                "advantages": advantages}
        before = torch.cat([p.detach().flatten().clone() for p in worker.actor_module.parameters()])
        metrics = worker.update_actor(data)
        after = torch.cat([p.detach().flatten() for p in worker.actor_module.parameters()])
        applied = metrics["actor/applied_lr"]
        print(f"step {step:2d} reward {rewards.mean().item():.3f} pg_loss {np.mean(metrics['actor/pg_loss']):+.4f} "
              f"grad_norm {np.mean(metrics['actor/grad_norm']):.3f} lr applied in update {min(applied):.2e}..{max(applied):.2e} "
              f"logged actor/lr {metrics['actor/lr']:.2e} param change {(after - before).norm().item():.4f}")
    with torch.no_grad():
        acc = (worker.actor_module(torch.arange(N_PROMPTS)).argmax(-1) == answer).float().mean().item()
    print(f"greedy accuracy after training {acc:.3f}")
    assert math.isfinite(acc)


if __name__ == "__main__":
    main()
