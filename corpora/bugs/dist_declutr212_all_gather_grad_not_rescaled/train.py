# Report: https://github.com/JohnGiorgi/DeCLUTR/pull/212
# Run: torchrun --nproc-per-node 2 train.py
import copy

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def all_gather_anchor_positive_pairs(anchors, positives):
    anchors_list = [torch.ones_like(anchors) for _ in range(dist.get_world_size())]
    positives_list = [torch.ones_like(positives) for _ in range(dist.get_world_size())]
    dist.all_gather(anchors_list, anchors)
    dist.all_gather(positives_list, positives)
    anchors_list[dist.get_rank()] = anchors
    positives_list[dist.get_rank()] = positives
    return torch.cat(anchors_list), torch.cat(positives_list)


def nt_xent(anchors, positives, temperature=0.1):
    a, p = F.normalize(anchors, dim=-1), F.normalize(positives, dim=-1)
    logits = a @ p.T / temperature
    return F.cross_entropy(logits, torch.arange(len(a)))


class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.Tanh(), nn.Linear(64, 16))

    def forward(self, x):
        return self.net(x)


def make_batch(rank, step):
    g = torch.Generator().manual_seed(100 * step + rank)
    docs = torch.randn(16, 32, generator=g)
    return docs + 0.1 * torch.randn(16, 32, generator=g), docs + 0.1 * torch.randn(16, 32, generator=g)


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    encoder = Encoder()
    reference = copy.deepcopy(encoder)
    model = DDP(encoder)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    ref_opt = torch.optim.SGD(reference.parameters(), lr=0.3)
    for step in range(30):
        anchor_text, positive_text = make_batch(rank, step)
        anchors, positives = model(anchor_text), model(positive_text)
        anchors, positives = all_gather_anchor_positive_pairs(anchors, positives)
        loss = nt_xent(anchors, positives)
        optimizer.zero_grad()
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9).item()
        optimizer.step()

        batches = [make_batch(r, step) for r in range(world)]
        ref_loss = nt_xent(reference(torch.cat([b[0] for b in batches])), reference(torch.cat([b[1] for b in batches])))
        ref_opt.zero_grad()
        ref_loss.backward()
        ref_norm = torch.nn.utils.clip_grad_norm_(reference.parameters(), 1e9).item()
        ref_opt.step()
        if rank == 0 and step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f} grad_norm {grad_norm:.4f} | single-process full batch: "
                  f"loss {ref_loss.item():.4f} grad_norm {ref_norm:.4f} (ratio {grad_norm / ref_norm:.3f})")
    if rank == 0:
        print(f"final loss {loss.item():.4f} vs single-process {ref_loss.item():.4f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
