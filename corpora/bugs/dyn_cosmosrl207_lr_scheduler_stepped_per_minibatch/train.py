# Source: nvidia-cosmos/cosmos-rl, cosmos_rl/policy/trainer/grpo_trainer.py (compute_loss, GRPOTrainer.execute_all_reduce, train, step handling), cosmos_rl/policy/trainer/optm/__init__.py (LRSchedulersContainer, build_lr_schedulers), commit b22643a22555274c951b9b6d030b81e3de365760
# Report: https://github.com/nvidia-cosmos/cosmos-rl/pull/207
# GRPO policy training: rollouts grouped per prompt, group-normalised advantages, dual-clip
# PPO loss per token, mini-batches with an optimizer step every COSMOS_GRPO_STEP_INTERVAL
# mini-batches, and a warmup + cosine LambdaLR schedule built for the run's total steps.
# The LLM, the rollout workers and NCCL are replaced by a small token policy on synthetic
# prompts whose reward is the fraction of tokens matching a hidden target.
import functools
import math
import time
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

COSMOS_GRPO_STEP_INTERVAL = 10


class LRSchedulersContainer:
    def __init__(self, optimizers, lr_lambda):
        assert len(optimizers) > 0, "Must have at least one optimizer to create LRScheduler"
        self.schedulers = [LambdaLR(optimizer, lr_lambda) for optimizer in optimizers]

    def __iter__(self):
        return iter(self.schedulers)

    def __len__(self):
        return len(self.schedulers)

    def step(self):
        for scheduler in self.schedulers:
            scheduler.step()

    def get_last_lr(self):
        return self.schedulers[0].get_last_lr()


def build_lr_schedulers(optimizers, config, training_steps):
    warmup_steps = int(config.train.optm_warmup_steps)
    if warmup_steps > training_steps:
        warmup_steps = training_steps

    if config.train.optm_decay_ratio is not None:
        decay_steps = round(training_steps * config.train.optm_decay_ratio)
        if warmup_steps + decay_steps > training_steps:
            decay_steps = training_steps - warmup_steps
    else:
        decay_steps = training_steps - warmup_steps
    # Add a vitual last step to prevent the learning rate from dropping to 0
    stable_steps = training_steps + 1 - warmup_steps - decay_steps
    lr_decay_type = config.train.optm_decay_type
    min_lr_factor = config.train.optm_min_lr_factor

    def linear_warmup_stable_decay(current_step, warmup_steps, stable_steps, decay_steps,
                                   lr_decay_type, min_lr_factor):
        warmup_stable_steps = warmup_steps + stable_steps
        if current_step < warmup_steps:
            # linear warmup
            # 0-indexed step, hence + 1 adjustments
            current_step += 1
            curr_adjustment = float(current_step / warmup_steps)
        elif current_step < warmup_stable_steps:
            curr_adjustment = 1.0
        else:
            # 0-indexed step, hence + 1 adjustments
            current_step += 1
            progress = float(current_step - warmup_stable_steps) / decay_steps

            if lr_decay_type == "linear":
                curr_adjustment = 1 - progress
            elif lr_decay_type == "sqrt":
                curr_adjustment = 1 - math.sqrt(progress)
            elif lr_decay_type == "cosine":
                curr_adjustment = 0.5 * (1.0 + math.cos(math.pi * progress))
            else:
                curr_adjustment = 1.0
            curr_adjustment = min_lr_factor + (1 - min_lr_factor) * curr_adjustment
        return curr_adjustment

    lr_lambda = functools.partial(
        linear_warmup_stable_decay,
        warmup_steps=warmup_steps,
        stable_steps=stable_steps,
        decay_steps=decay_steps,
        lr_decay_type=lr_decay_type,
        min_lr_factor=min_lr_factor,
    )
    return LRSchedulersContainer(optimizers, lr_lambda)


def compute_loss(current_token_logps, old_per_token_logps, current_advantages, cu_seqlens,
                 config, logprob_masks):
    # Turn current_advantages from [batch_size, max_len] to [n_logprob_tokens]
    current_advantages = torch.masked_select(current_advantages, logprob_masks)
    assert current_token_logps.shape == current_advantages.shape
    assert old_per_token_logps.shape == current_token_logps.shape

    coef_1 = torch.clamp(current_token_logps - old_per_token_logps, min=-20.0, max=20.0)
    coef_1 = torch.exp(coef_1)

    # the standard grpo loss with dual-clip PPO: https://arxiv.org/pdf/1912.09729
    coef_2 = torch.clamp(coef_1, 1 - config.train.train_policy.epsilon_low,
                         1 + config.train.train_policy.epsilon_high)
    per_token_loss1 = coef_1 * current_advantages
    per_token_loss2 = coef_2 * current_advantages
    per_token_loss3 = -config.train.train_policy.lower_bound_ratio * current_advantages
    clip_losses1 = -torch.min(per_token_loss1, per_token_loss2)
    clip_losses2 = torch.min(per_token_loss3, clip_losses1)
    per_token_loss = torch.where(current_advantages < 0, clip_losses2, clip_losses1)

    bsz, max_len = logprob_masks.shape
    per_token_loss_seq_sum = torch.zeros(bsz, dtype=per_token_loss.dtype)
    for i in range(bsz):
        per_token_loss_seq_sum[i] = per_token_loss[cu_seqlens[i]: cu_seqlens[i + 1]].sum()
    shifted_length = cu_seqlens[1:] - cu_seqlens[:-1]
    # seq-mean-token-mean
    per_token_loss = (per_token_loss_seq_sum / shifted_length).mean()
    return per_token_loss


class TokenPolicy(nn.Module):
    """Stands in for the LLM: logits for each of max_len completion tokens given the prompt."""

    def __init__(self, prompt_dim, vocab, max_len, hidden=64):
        super().__init__()
        self.max_len = max_len
        self.vocab = vocab
        self.body = nn.Sequential(nn.Linear(prompt_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh())
        self.head = nn.Linear(hidden, max_len * vocab)

    def forward(self, prompts):
        return self.head(self.body(prompts)).view(-1, self.max_len, self.vocab)


class GRPOTrainer:
    def __init__(self, config, model):
        self.config = config
        self.model = model
        self.optimizers = [torch.optim.AdamW(model.parameters(), lr=config.train.optm_lr, weight_decay=0.0)]
        self.lr_schedulers = build_lr_schedulers(self.optimizers, self.config, 1e6)
        self.lr_schedulers_step_updated = False
        self.mini_batch = config.train.train_policy.mini_batch
        self.mu_iterations = config.train.train_policy.mu_iterations
        self.old_per_token_logps = []
        self.mini_step = 0
        self.lrs_this_step = []

    def handle_step(self, command, prompts, completions, rewards):
        report_data = self.train(prompts, completions, rewards,
                                 current_step=command.global_step,
                                 total_steps=command.total_steps)
        if not self.lr_schedulers_step_updated:
            assert command.total_steps is not None and command.total_steps > 0, \
                "Total steps must be set for lr scheduler"
            self.lr_schedulers = build_lr_schedulers(self.optimizers, self.config, command.total_steps)
            self.lr_schedulers_step_updated = True
        return report_data

    def execute_all_reduce(self):
        all_params = [p for p in self.model.parameters()]
        grad_norm = torch.nn.utils.clip_grad_norm_(all_params, self.config.train.optm_grad_norm_clip)
        self.lrs_this_step.append(self.optimizers[0].param_groups[0]["lr"])
        for optimizer in self.optimizers:
            optimizer.step()
        self.lr_schedulers.step()
        for optimizer in self.optimizers:
            optimizer.zero_grad()
        return grad_norm

    def compute_logprobs(self, prompts, completions):
        logits = self.model(prompts)
        logps = torch.gather(F.log_softmax(logits, dim=-1), 2, completions.unsqueeze(-1)).squeeze(-1)
        logprob_masks = torch.ones_like(completions, dtype=torch.bool)
        lengths = logprob_masks.sum(1)
        cu_seqlens = torch.cat([torch.zeros(1, dtype=torch.long), torch.cumsum(lengths, 0)])
        return torch.masked_select(logps, logprob_masks), cu_seqlens, logprob_masks

    def train(self, prompts, completions, rewards, current_step, total_steps):
        # group-normalised advantages (n_generation samples per prompt)
        n_gen = self.config.rollout.n_generation
        grouped = rewards.view(-1, n_gen)
        advantages_t = ((grouped - grouped.mean(1, keepdim=True)) / (grouped.std(1, keepdim=True) + 1e-4)).view(-1)

        batch_size = completions.shape[0]
        mini_batch_size = min(self.mini_batch, batch_size) if self.mini_batch > 0 else batch_size
        assert batch_size % mini_batch_size == 0, "Batch size should be divided evenly by mini_batch"
        num_mini_batch = batch_size // mini_batch_size
        self.old_per_token_logps = [None for _ in range(num_mini_batch)]
        self.lrs_this_step = []

        loss_sum = torch.tensor(0.0)
        grad_norm_sum = torch.tensor(0.0)
        loss_count = 0
        self.model.train()
        for i_mu in range(self.mu_iterations):
            local_mini_step = 0
            for i in range(0, batch_size, mini_batch_size):
                end = min(i + mini_batch_size, batch_size)
                max_len = completions.shape[1]
                minibatched_advantages = advantages_t[i:end].unsqueeze(1).expand(-1, max_len)

                current_per_token_logprobs, cu_seqlens, logprob_masks = self.compute_logprobs(
                    prompts[i:end], completions[i:end])
                current_advantages = logprob_masks * minibatched_advantages
                if self.old_per_token_logps[local_mini_step] is None:
                    assert i_mu == 0, "Only first iteration should append `old_per_token_logps`"
                    self.old_per_token_logps[local_mini_step] = current_per_token_logprobs.detach()
                loss = compute_loss(current_per_token_logprobs, self.old_per_token_logps[local_mini_step],
                                    current_advantages, cu_seqlens, self.config, logprob_masks)
                loss = loss / num_mini_batch
                loss.backward()
                loss_sum += loss.item()
                loss_count += 1
                self.mini_step += 1
                local_mini_step += 1
                if (local_mini_step % COSMOS_GRPO_STEP_INTERVAL == 0) and local_mini_step > 1:
                    all_reduced = True
                    grad_norm_sum += self.execute_all_reduce()
                else:
                    all_reduced = False
            if not all_reduced:
                grad_norm_sum += self.execute_all_reduce()
        self.old_per_token_logps = []

        loss = (loss_sum / loss_count) if loss_count > 0 else loss_sum
        return {"train/loss": loss.item(), "train/grad_norm": grad_norm_sum.item(),
                "train/lrs": list(self.lrs_this_step)}


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    config = SimpleNamespace(
        train=SimpleNamespace(
            optm_lr=3e-3, optm_warmup_steps=4, optm_decay_ratio=None, optm_decay_type="cosine",
            optm_min_lr_factor=0.05, optm_grad_norm_clip=1.0,
            train_policy=SimpleNamespace(epsilon_low=0.2, epsilon_high=0.2, lower_bound_ratio=3.0,
                                         mini_batch=2, mu_iterations=1)),
        rollout=SimpleNamespace(n_generation=5),
    )
    prompt_dim, vocab, max_len = 16, 8, 4
    n_prompts_per_step, total_steps = 8, 24
    # hidden target tokens: a fixed linear map of the prompt
    target_map = torch.randn(prompt_dim, max_len, vocab)

    def reward_fn(prompts, completions):
        target = torch.einsum("bd,dlv->blv", prompts, target_map).argmax(-1)
        return (completions == target).float().mean(1)

    policy = TokenPolicy(prompt_dim, vocab, max_len)
    trainer = GRPOTrainer(config, policy)
    eval_prompts = torch.randn(256, prompt_dim)
    t0 = time.time()
    for global_step in range(1, total_steps + 1):
        prompts = torch.randn(n_prompts_per_step, prompt_dim)
        prompts = prompts.repeat_interleave(config.rollout.n_generation, 0)
        with torch.no_grad():
            probs = F.softmax(policy(prompts), dim=-1)
            completions = torch.distributions.Categorical(probs=probs).sample()
        rewards = reward_fn(prompts, completions)
        command = SimpleNamespace(global_step=global_step, total_steps=total_steps)
        report = trainer.handle_step(command, prompts, completions, rewards)
        with torch.no_grad():
            greedy = policy(eval_prompts).argmax(-1)
            eval_reward = reward_fn(eval_prompts, greedy).mean().item()
        print("step %2d/%d rollout reward %.3f greedy eval reward %.3f loss %+.4f | lr at optimizer steps: %s"
              % (global_step, total_steps, rewards.mean().item(), eval_reward, report["train/loss"],
                 " ".join("%.2e" % lr for lr in report["train/lrs"])))
    print("optimizer steps per global step: %d; final lr %.2e; done in %.1fs"
          % (len(report["train/lrs"]), trainer.optimizers[0].param_groups[0]["lr"], time.time() - t0))


if __name__ == "__main__":
    main()
