# Source: KellerJordan/modded-nanogpt, train_gpt2.py (DistributedDataLoader, training loop and loss logging), before PR #3
# Report: https://github.com/KellerJordan/modded-nanogpt/issues/2
# Run: torchrun --nproc-per-node 2 train.py
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class DistributedDataLoader:
    def __init__(self, shards, B, T, process_rank, num_processes):
        self.B, self.T = B, T
        self.process_rank, self.num_processes = process_rank, num_processes
        self.tokens = shards[process_rank]
        self.reset()

    def reset(self):
        self.current_position = 0

    def next_batch(self):
        B, T = self.B, self.T
        buf = self.tokens[self.current_position:self.current_position + B * T + 1]
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        self.current_position += B * T
        if self.current_position + B * T + 1 > len(self.tokens):
            self.reset()
        return x, y


class GPT(nn.Module):
    def __init__(self, vocab_size=64, n_embd=64):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets):
        x = self.wte(idx)
        logits = self.lm_head(x + self.mlp(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def make_shard(n, branching, seed, vocab_size=64):
    nxt = torch.randint(0, vocab_size, (vocab_size, 8), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    toks = [0]
    choice = torch.randint(0, branching, (n,), generator=g)
    for i in range(n - 1):
        toks.append(int(nxt[toks[-1], choice[i]]))
    return torch.tensor(toks)


def main():
    dist.init_process_group(backend="gloo")
    ddp_rank, ddp_world_size = dist.get_rank(), dist.get_world_size()
    master_process = ddp_rank == 0
    torch.manual_seed(0)
    # the shards come from different sources: shard 0 is highly regular text, shard 1 much less so
    shards = [make_shard(8000, 2, seed=1), make_shard(8000, 8, seed=2)]
    train_loader = DistributedDataLoader(shards, 8, 32, ddp_rank, ddp_world_size)
    model = DDP(GPT())
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95))
    x, y = train_loader.next_batch()
    for step in range(76):
        model.train()
        _, loss = model(x, y)
        x, y = train_loader.next_batch()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        lossf = loss.item()  # keep track of the mean loss
        check = loss.detach().clone()
        dist.all_reduce(check, op=dist.ReduceOp.AVG)
        if master_process and step % 25 == 0:
            print(f"step {step:4d} | train loss {lossf:.6f} | (mean over the {ddp_world_size} ranks: {check.item():.6f})")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
