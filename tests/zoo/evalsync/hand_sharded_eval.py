"""An evaluation set cut per rank by hand (two gloo ranks): "bug" evaluates each rank's part and
only rank 0 reports, nothing reduced; "fixed" evaluates the whole set on every rank; "reduced"
keeps the parts and all-reduces the counts."""
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel

mode = sys.argv[1]
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
x = torch.randn(320, 8); y = (x[:, 0] > 0).long()
train_x, train_y, val_x, val_y = x[:256], y[:256], x[256:], y[256:]
model = DistributedDataParallel(nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


def batches(xs, ys, shard):
    idx = torch.arange(len(xs))
    if shard:
        idx = idx[rank::world]
    for i in range(0, len(idx), 8):
        yield xs[idx[i:i + 8]], ys[idx[i:i + 8]]


for epoch in range(3):
    model.train()
    for xb, yb in batches(train_x, train_y, True):
        opt.zero_grad(); F.cross_entropy(model(xb), yb).backward(); opt.step()
    model.eval()
    correct = torch.zeros(2)
    with torch.no_grad():
        for xb, yb in batches(val_x, val_y, mode != "fixed"):
            logits = model(xb)  # HERE
            correct += torch.tensor([float((logits.argmax(1) == yb).sum()), float(len(yb))])
    if mode == "reduced":
        dist.all_reduce(correct)
    if rank == 0:
        print(f"epoch {epoch} accuracy {correct[0] / correct[1]:.3f} over {int(correct[1])}")
dist.destroy_process_group()
