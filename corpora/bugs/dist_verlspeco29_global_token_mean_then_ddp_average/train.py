# Report: https://github.com/verl-project/verl-SpeCo/pull/29
# Run: torchrun --nproc-per-node 2 train.py
import copy

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class Drafter(nn.Module):
    def __init__(self, vocab=32, hidden=48):
        super().__init__()
        self.embed = nn.Embedding(vocab, hidden)
        self.fc = nn.Sequential(nn.Linear(hidden, hidden), nn.SiLU())
        self.lm_head = nn.Linear(hidden, vocab)

    def forward(self, ids):
        return self.lm_head(self.fc(self.embed(ids)))


def make_batch(rank, step):
    g = torch.Generator().manual_seed(1000 * step + rank)
    n_tokens = 40 + 24 * rank
    ids = torch.randint(0, 32, (n_tokens,), generator=g)
    labels = (ids * 5 + 3) % 32
    return ids, labels


def _training_step_on_batch(model, optimizer, ids, labels):
    logits = model(ids)
    loss_sum = F.cross_entropy(logits, labels, reduction="sum")
    token_count = torch.tensor(float(labels.numel()))
    stats = torch.stack([loss_sum.detach(), token_count])
    dist.all_reduce(stats)
    global_tokens = stats[1]
    loss = loss_sum / global_tokens
    optimizer.zero_grad()
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm=1e9)
    optimizer.step()
    return (stats[0] / global_tokens).item(), grad_norm.item()


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    base = Drafter()
    reference = copy.deepcopy(base)
    model = DDP(base)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.5)
    for step in range(40):
        ids, labels = make_batch(rank, step)
        loss, grad_norm = _training_step_on_batch(model, optimizer, ids, labels)
        batches = [make_batch(r, step) for r in range(world)]
        all_ids = torch.cat([b[0] for b in batches])
        all_labels = torch.cat([b[1] for b in batches])
        ref_loss = F.cross_entropy(reference(all_ids), all_labels)
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), max_norm=1e9).item()
        ref_opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss:.4f} grad_norm {grad_norm:.4f} | single-process global token mean: "
                  f"loss {ref_loss.item():.4f} grad_norm {ref_norm:.4f} (ratio {grad_norm / ref_norm:.3f})")
    if rank == 0:
        print(f"final loss {loss:.4f} vs single-process {ref_loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
