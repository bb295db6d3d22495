# A correct DDP loop with no_sync() accumulation, watched with tests/_syncs.SyncCounter pushed:
# each rank writes, per optimizer step, the calls torchtriage made that would make the host wait
# for the device (the distributed check's local-gradient sums and first-step fingerprints must
# ride the sentinel's one read per step).
import datetime
import json
import os
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
from tests._syncs import SyncCounter

import torchtriage

dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 3)))
opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
g = torch.Generator().manual_seed(rank)
counter = SyncCounter()
per_step = []
with counter:
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as session:
        for step in range(6):
            n0 = len(counter.calls)
            x, y = torch.randn(2, 8, 6, generator=g), torch.randint(0, 3, (2, 8), generator=g)
            with model.no_sync():
                (F.cross_entropy(model(x[0]), y[0]) / 2).backward()
            (F.cross_entropy(model(x[1]), y[1]) / 2).backward()
            opt.step()
            opt.zero_grad()
            per_step.append([[name, list(chain)] for name, chain in counter.calls[n0:]])
with open(os.path.join(sys.argv[1], f"reads-{rank}.json"), "w") as fh:
    json.dump({"per_step": per_step, "findings": [f.code for f in session.report.findings]}, fh)
dist.destroy_process_group()
