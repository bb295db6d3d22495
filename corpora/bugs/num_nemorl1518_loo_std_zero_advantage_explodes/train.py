# Source: NVIDIA-NeMo/RL, nemo_rl/algorithms/utils.py and nemo_rl/algorithms/grpo.py, commit 004395398158769ab93f3f693983f1db6a239273
# Report: https://github.com/NVIDIA-NeMo/RL/issues/1518
# GRPO with the leave-one-out (RLOO) baseline and reward normalization, on a toy "environment":
# 16 prompts, a policy choosing one of 8 answers, binary pass/fail reward, 4 generations per prompt.
import torch
import torch.nn as nn


def calculate_baseline_and_std_per_prompt(
    prompts: torch.Tensor,
    rewards: torch.Tensor,
    valid_mask: torch.Tensor,
    leave_one_out_baseline: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Function to compute a baseline for each (prompt, response) pair in the batch.

    The same baseline is calculated for each prompt. Samples set to 0 in 'valid_mask'
    are not included in the baseline calculation.
    """
    unique_prompts = torch.unique(prompts, dim=0)

    baseline = torch.zeros_like(rewards)
    sq_baseline = torch.zeros_like(rewards)
    std = torch.zeros_like(rewards)
    reward_device = torch.device("cpu")

    for i in range(len(unique_prompts)):
        is_matching_prompt = (prompts == unique_prompts[i]).all(1)
        prompt_idx = torch.arange(len(prompts), device=reward_device)[
            is_matching_prompt
        ]

        if leave_one_out_baseline:
            baseline_mask_matrix = (1 - torch.eye(len(prompt_idx))).to(reward_device)
        else:
            baseline_mask_matrix = torch.ones((len(prompt_idx), len(prompt_idx))).to(
                reward_device
            )

        if valid_mask[prompt_idx].sum() <= 1:
            baseline[prompt_idx] = rewards[prompt_idx]
        else:
            num_valid = valid_mask[prompt_idx].float().sum() - int(
                leave_one_out_baseline
            )
            prompt_baseline = (
                torch.matmul(
                    baseline_mask_matrix, rewards[prompt_idx] * valid_mask[prompt_idx]
                )
                / num_valid
            )
            prompt_baseline_square = (
                torch.matmul(
                    baseline_mask_matrix,
                    torch.pow(rewards[prompt_idx], 2) * valid_mask[prompt_idx],
                )
                / num_valid
            )

            baseline[prompt_idx] = prompt_baseline
            sq_baseline[prompt_idx] = prompt_baseline_square
            std[prompt_idx] = (
                (
                    (prompt_baseline_square - prompt_baseline.square())
                    * (num_valid / (num_valid - 1))
                )
                .sqrt()
                .nan_to_num(0)
            )

    return baseline, std


def normalize_advantages_with_epsilon(
    advantages: torch.Tensor, std: torch.Tensor, epsilon: float = 1e-6
) -> torch.Tensor:
    return advantages / (std.unsqueeze(-1) + epsilon)


master_config = {
    "grpo": {"normalize_rewards": True, "use_leave_one_out_baseline": True,
             "num_prompts_per_step": 32, "num_generations_per_prompt": 4},
    "policy": {"max_grad_norm": 1.0, "lr": 0.01},
}


def main():
    torch.manual_seed(0)
    num_prompts, num_answers = 32, 24
    correct = torch.randint(0, num_answers, (num_prompts,))
    policy = nn.Sequential(nn.Embedding(num_prompts, 32), nn.Tanh(), nn.Linear(32, num_answers))
    optimizer = torch.optim.AdamW(policy.parameters(), lr=master_config["policy"]["lr"])
    n_gen = master_config["grpo"]["num_generations_per_prompt"]
    for step in range(120):
        prompt_ids = torch.arange(num_prompts).repeat_interleave(n_gen)
        input_ids = prompt_ids[:, None].repeat(1, 3)
        with torch.no_grad():
            answers = torch.distributions.Categorical(logits=policy(prompt_ids)).sample()
        rewards = (answers == correct[prompt_ids]).float()

        baseline, std = calculate_baseline_and_std_per_prompt(
            input_ids, rewards, torch.ones_like(rewards),
            leave_one_out_baseline=master_config["grpo"]["use_leave_one_out_baseline"],
        )
        advantages = (rewards - baseline).unsqueeze(-1)
        if master_config["grpo"]["normalize_rewards"]:
            advantages = normalize_advantages_with_epsilon(advantages=advantages, std=std)

        logprobs = torch.log_softmax(policy(prompt_ids), -1).gather(1, answers[:, None])
        loss = -(advantages * logprobs).mean()
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(policy.parameters(), master_config["policy"]["max_grad_norm"])
        optimizer.step()
        if step % 15 == 0 or step == 119:
            with torch.no_grad():
                greedy = (policy(torch.arange(num_prompts)).argmax(-1) == correct).float().mean().item()
            print(f"step {step} reward {rewards.mean().item():.3f} greedy accuracy {greedy:.3f} "
                  f"advantages min {advantages.min().item():.1f} max {advantages.max().item():.1f} "
                  f"loss {loss.item():.4g} grad_norm {grad_norm.item():.3g}")


if __name__ == "__main__":
    main()
