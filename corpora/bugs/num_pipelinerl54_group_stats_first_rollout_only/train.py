# Source: ServiceNow/PipelineRL, pipelinerl/finetune/rl/__init__.py (RLConfig, rl_step, populate_rl_data), commit 62d847027c0e3b1fa972e9f82ffc7bdca86ef30c
# Report: https://github.com/ServiceNow/PipelineRL/pull/54
# GRPO: for every prompt a group of rollouts is sampled from the policy, each rollout gets one
# reward (copied to all its tokens), populate_rl_data turns the rewards into group-normalised
# advantages with pandas, and rl_step computes the clipped policy-gradient loss. The LLM is
# a tiny autoregressive policy over 8 tokens; the task (answer = the prompt's digit) is
# synthetic; vLLM sampling is torch.multinomial.
import numpy as np
import pandas as pd
import torch
import torch.nn.functional as F
from pydantic import BaseModel, Field

VOCAB, EOS, ANSWER_LEN, GROUP, PROMPTS = 10, 9, 4, 8, 8


class RLConfig(BaseModel):
    algo: str = Field(default="grpo", description="Algorithm to use for RL")
    use_advantages: bool = Field(default=True, description="Use advantages instead of rewards to compute the loss")
    epsilon: float = Field(default=0.2, description="Clip parameter for the ration of log probs")
    batch_size: int = Field(default=0, description="Batch size is required for normalization")
    divide_advantage_by_std: bool = Field(default=True, description="Normalize the advantage by the standard deviation")


class Policy(torch.nn.Module):
    def __init__(self, d=32):
        super().__init__()
        self.emb = torch.nn.Embedding(VOCAB, d)
        self.rnn = torch.nn.GRU(d, d, batch_first=True)
        self.head = torch.nn.Linear(d, VOCAB)

    def forward(self, input_ids):
        h, _ = self.rnn(self.emb(input_ids))
        return self.head(h)


@torch.no_grad()
def generate(model, prompts):
    ids = prompts.unsqueeze(1)
    logps = []
    for _ in range(ANSWER_LEN):
        logp = torch.log_softmax(model(ids)[:, -1], dim=-1)
        tok = torch.multinomial(logp.exp(), 1)
        logps.append(logp.gather(1, tok))
        ids = torch.cat([ids, tok], dim=1)
    ids = torch.cat([ids, torch.full((len(prompts), 1), EOS)], dim=1)
    return ids, torch.cat(logps, dim=1)


def populate_rl_data(dataset, eos_token_id, config):
    # Convert to pandas for processing
    df_init = pd.DataFrame(dataset)
    assert isinstance(df_init, pd.DataFrame)

    # Step 1: calculate group-level statistics
    df_stats = df_init[["group_id", "rollout_index"]].copy()
    df_stats["num_tokens"] = df_init["input_ids"].apply(lambda x: len(x))
    # We assume that rewards for all tokens are the same
    df_stats["rollout_reward"] = df_init["rewards"].apply(lambda x: x[0])
    # Check that the reward is the same at each rollout index
    assert df_stats.groupby(["group_id", "rollout_index"])["rollout_reward"].nunique().max() == 1
    # Only keep rollout_index == 0
    df_stats = df_stats[df_stats["rollout_index"] == 0].drop(columns=["rollout_index"])
    df_grouped = (
        df_stats.groupby("group_id")
        .agg(
            rollout_reward_mean=("rollout_reward", "mean"),
            rollout_reward_std=("rollout_reward", "std"),
            group_tokens=("num_tokens", "mean"),
        )
        .reset_index()
    )
    assert df_grouped.columns.tolist() == ["group_id", "rollout_reward_mean", "rollout_reward_std", "group_tokens"]

    # Step 2: calculate advantages for each sample
    df_advantages = pd.merge(
        df_init[["group_id", "rollout_index", "step_index", "rewards"]],
        df_grouped,
        on="group_id",
        how="left"
    )
    assert len(df_advantages) == len(df_init)

    def calculate_advantages(row):
        rewards = row["rewards"]
        mean = row["rollout_reward_mean"]
        std = row["rollout_reward_std"]
        if config.divide_advantage_by_std:
            advantages = [(reward - mean) / (np.nan_to_num(std) + 1e-4) for reward in rewards]
        else:
            advantages = [(reward - mean) for reward in rewards]
        return advantages
    df_advantages["advantages"] = df_advantages.apply(
        calculate_advantages,
        axis=1,
    )
    df_advantages = df_advantages.drop(columns=["rewards", "rollout_reward_mean", "rollout_reward_std"])

    # Step 3: bring advantages and group level stats back to the main df
    df = df_init.drop(columns=["advantages", "group_tokens"])
    df = pd.merge(df, df_advantages, on=["group_id", "rollout_index", "step_index"], how="left")
    assert len(df) == len(df_init)

    # Step 4: make token-level overflow and mean group length information
    df["overflow"] = df.apply(
        lambda row: [0.0] * len(row["overflow"]) if eos_token_id in row["input_ids"] else [1.0] * len(row["overflow"]),
        axis=1,
    )
    df["group_tokens"] = df.apply(lambda row: [row["group_tokens"]] * len(row["input_ids"]), axis=1)

    # Step 5: move the results back to the dataset
    advantages_list = df["advantages"].tolist()
    group_tokens_list = df["group_tokens"].tolist()
    overflow_list = df["overflow"].tolist()
    for i, entry in enumerate(dataset):
        entry["advantages"] = advantages_list[i]
        entry["group_tokens"] = group_tokens_list[i]
        entry["overflow"] = overflow_list[i]
    return dataset


def rl_step(model, batch, config):
    logits = model(batch["input_ids"][:, :-1])
    logprobs = F.log_softmax(logits, dim=-1)
    new_logprobs = torch.gather(logprobs, dim=2, index=batch["input_ids"][:, 1:].unsqueeze(2)).squeeze(2)
    masks_shifted = batch["labels"][:, 1:] != -100
    advantages = batch["advantages"][:, 1:]
    old_logprobs = batch["old_logprobs"][:, 1:]
    tokens_weights = torch.ones_like(advantages) / config.batch_size

    log_ratio_new_old = new_logprobs - old_logprobs
    ratio_new_old = torch.exp(log_ratio_new_old)
    log_p_weights = advantages
    surr1 = ratio_new_old * log_p_weights
    clamped_ratio = torch.clamp(ratio_new_old, 1 - config.epsilon, 1 + config.epsilon)
    surr2 = clamped_ratio * log_p_weights
    policy_loss = torch.min(surr1, surr2)
    final_loss = -(policy_loss * tokens_weights * masks_shifted).sum()
    stats = {
        "max_advantage": advantages[masks_shifted].max().item(),
        "min_advantage": advantages[masks_shifted].min().item(),
    }
    return final_loss, stats


def main():
    torch.manual_seed(0)
    model = Policy()
    config = RLConfig(batch_size=PROMPTS * GROUP)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(60):
        prompts = torch.randint(0, PROMPTS, (PROMPTS,)).repeat_interleave(GROUP)
        ids, old_lp = generate(model, prompts)
        answers = ids[:, 1:1 + ANSWER_LEN]
        reward = (answers == prompts.unsqueeze(1)).float().mean(1)
        dataset = []
        for i in range(len(prompts)):
            n = ids.shape[1]
            dataset.append({
                "group_id": i // GROUP, "rollout_index": i % GROUP, "step_index": 0,
                "input_ids": ids[i].tolist(), "labels": [-100] + ids[i, 1:].tolist(),
                "rewards": [reward[i].item()] * n, "overflow": [0.0] * n,
                "advantages": [0.0] * n, "group_tokens": [0.0] * n,
                "old_logprobs": [0.0] + old_lp[i].tolist() + [0.0],
            })
        dataset = populate_rl_data(dataset, EOS, config)
        batch = {k: torch.tensor([e[k] for e in dataset]) for k in ("input_ids", "labels", "advantages", "old_logprobs")}
        batch["labels"][:, -1] = -100
        loss, stats = rl_step(model, batch, config)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if step % 6 == 0 or step == 59:
            print("step %2d reward %.3f loss %.2f grad_norm %.2f advantage min %.1f max %.1f" % (
                step, reward.mean().item(), loss.item(), grad_norm.item(),
                stats["min_advantage"], stats["max_advantage"]))


if __name__ == "__main__":
    main()
