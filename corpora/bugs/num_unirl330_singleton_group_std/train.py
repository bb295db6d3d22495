# Source: Tencent-Hunyuan/UniRL, unirl/algorithms/normalizers.py, commit 1a7b501e8fe8517b432a130220d2ff462f9b5afa
# Report: https://github.com/Tencent-Hunyuan/UniRL/issues/330
# GRPO-style training with per-prompt (group) advantage normalization. The policy is a small MLP
# answering 16 synthetic prompts with one of 6 answers; 4 rollouts per prompt, and rollouts that time
# out are dropped before the advantages are computed, so a group can be left with a single sample.
from typing import Dict, List, Optional

import torch
import torch.nn as nn


def normalize_grouped(
    rewards: torch.Tensor,
    group_indices: List[List[int]],
    epsilon: float = 1e-8,
    clip_max: Optional[float] = None,
    trim_outliers_ratio: float = 0.0,
    use_global_std: bool = False,
) -> torch.Tensor:
    advantages = torch.zeros_like(rewards)
    batch_std = rewards.std() + epsilon if use_global_std else None

    for indices in group_indices:
        if not indices:
            continue

        group_rewards = rewards[indices]

        if trim_outliers_ratio > 0 and len(indices) > 2:
            sorted_rewards, _ = torch.sort(group_rewards)
            trim_size = int(len(sorted_rewards) * trim_outliers_ratio)
            if trim_size > 0 and trim_size * 2 < len(sorted_rewards):
                trimmed = sorted_rewards[trim_size:-trim_size]
            else:
                trimmed = sorted_rewards
            group_mean = trimmed.mean()
            group_std = batch_std if use_global_std else (trimmed.std() + epsilon)
        else:
            group_mean = group_rewards.mean()
            group_std = batch_std if use_global_std else (group_rewards.std() + epsilon)

        advantages[indices] = (group_rewards - group_mean) / group_std

    if clip_max is not None:
        advantages = torch.clamp(advantages, -clip_max, clip_max)

    return advantages


def build_group_index_map(group_ids: List[str]) -> Dict[str, List[int]]:
    ordered_groups: Dict[str, List[int]] = {}
    for sample_idx, gid in enumerate(group_ids):
        ordered_groups.setdefault(gid, []).append(sample_idx)
    return ordered_groups


class Policy(nn.Module):
    def __init__(self, n_prompts=16, n_answers=6):
        super().__init__()
        self.net = nn.Sequential(nn.Embedding(n_prompts, 32), nn.Tanh(), nn.Linear(32, n_answers))

    def forward(self, prompts):
        return self.net(prompts)


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    n_prompts, group_size = 16, 4
    correct = torch.randint(0, 6, (n_prompts,), generator=gen)
    policy = Policy(n_prompts)
    optimizer = torch.optim.Adam(policy.parameters(), lr=0.05)
    for step in range(300):
        prompts = torch.randperm(n_prompts, generator=gen)[:8].repeat_interleave(group_size)
        with torch.no_grad():
            dist = torch.distributions.Categorical(logits=policy(prompts))
            answers = dist.sample()
        finished = torch.rand(len(prompts), generator=gen) > 0.15
        prompts, answers = prompts[finished], answers[finished]
        rewards = (answers == correct[prompts]).float()
        groups = build_group_index_map([str(p) for p in prompts.tolist()])
        advantages = normalize_grouped(rewards, list(groups.values()))

        logp = torch.distributions.Categorical(logits=policy(prompts)).log_prob(answers)
        loss = -(advantages * logp).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 25 == 0:
            with torch.no_grad():
                acc = (policy(torch.arange(n_prompts)).argmax(-1) == correct).float().mean().item()
            print("step %d loss %.4f reward %.3f greedy accuracy %.3f" % (step, loss.item(), rewards.mean().item(), acc))


if __name__ == "__main__":
    main()
