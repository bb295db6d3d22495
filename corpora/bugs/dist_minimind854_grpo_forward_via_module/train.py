# Report: https://github.com/jingyaogong/minimind/pull/854
# Run: torchrun --nproc-per-node 2 train.py
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


class MiniMindForCausalLM(nn.Module):
    def __init__(self, vocab_size=16, hidden_size=32, max_len=12):
        super().__init__()
        self.embed_tokens = nn.Embedding(vocab_size, hidden_size)
        self.pos = nn.Embedding(max_len, hidden_size)
        self.mlp = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.SiLU())
        self.lm_head = nn.Linear(hidden_size, vocab_size)

    def forward(self, input_ids, attention_mask=None):
        h = self.embed_tokens(input_ids) + self.pos(torch.arange(input_ids.shape[1]))
        h = torch.cumsum(h, dim=1) / torch.arange(1, input_ids.shape[1] + 1).view(1, -1, 1)
        return {"logits": self.lm_head(self.mlp(h))}


@torch.no_grad()
def generate(model, prompt, max_new_tokens=8):
    out = prompt
    for _ in range(max_new_tokens):
        logits = model(out)["logits"][:, -1]
        out = torch.cat([out, torch.multinomial(F.softmax(logits, -1), 1)], 1)
    return out


def reward_fn(completions, target_token=3):
    return (completions == target_token).float().mean(1)


def grpo_train_epoch(model, optimizer, prompts, num_generations=4, steps=30):
    for step in range(steps):
        model_unwrapped = model.module if isinstance(model, DistributedDataParallel) else model
        prompt = prompts[step % len(prompts)].repeat_interleave(num_generations, 0)
        outputs = generate(model_unwrapped, prompt)
        full_mask = torch.ones_like(outputs)
        completion = outputs[:, prompt.shape[1]:]
        rewards = reward_fn(completion).view(-1, num_generations)
        advantages = ((rewards - rewards.mean(1, keepdim=True)) / (rewards.std(1, keepdim=True) + 1e-4)).view(-1, 1)
        res = model_unwrapped(outputs, attention_mask=full_mask)
        logits = res["logits"][:, prompt.shape[1] - 1:-1]
        per_token_logps = torch.gather(F.log_softmax(logits, -1), 2, completion.unsqueeze(-1)).squeeze(-1)
        loss = -(advantages * per_token_logps).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return rewards.mean().item()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(42)
    model = MiniMindForCausalLM()
    model = DistributedDataParallel(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    torch.manual_seed(1000 + rank)
    prompts = [torch.randint(0, 16, (2, 4)) for _ in range(8)]
    for epoch in range(3):
        mean_reward = grpo_train_epoch(model, optimizer, prompts)
        w = torch.cat([p.detach().flatten() for p in model.module.parameters()])
        other = w.clone()
        dist.broadcast(other, src=1)
        if rank == 0:
            print(f"epoch {epoch} reward {mean_reward:.3f} max |policy rank0 - policy rank1| {(w - other).abs().max().item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
