# A loop written for Hugging Face Accelerate, run by `accelerate launch` (two gloo ranks on CPU).
# Accelerate shards the loader by batch: rank r gets batches r, r+2, ...; sample 43 is in batch 5,
# rank 1's third batch (step 2). `clean` as the first argument leaves it intact.
import datetime
import sys

import torch
import torch.nn as nn
from accelerate import Accelerator, InitProcessGroupKwargs
from torch.utils.data import DataLoader, TensorDataset

accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=60))])
g = torch.Generator().manual_seed(0)
x = torch.randn(64, 4, generator=g)
y = torch.randn(64, 1, generator=g)
if sys.argv[1:] != ["clean"]:
    x[43, 1] = float("nan")  # one corrupt sample in the dataset
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(x, y), batch_size=8)
model, opt, loader = accelerator.prepare(model, opt, loader)
for xb, yb in loader:
    loss = nn.functional.mse_loss(model(xb), yb)
    opt.zero_grad()
    accelerator.backward(loss)
    opt.step()
accelerator.print(f"trained on {accelerator.num_processes} processes")
