# Hugging Face accelerate on CPU (gloo, under `accelerate launch --multi_gpu`): rank 1's batch at
# step 2 holds a NaN that the all-reduce inside accelerator.backward() hands to rank 0.
import datetime

import torch
import torch.nn as nn
from accelerate import Accelerator
from accelerate.utils import InitProcessGroupKwargs

acc = Accelerator(cpu=True, kwargs_handlers=[InitProcessGroupKwargs(timeout=datetime.timedelta(seconds=60))])
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
model, opt = acc.prepare(model, opt)
g = torch.Generator().manual_seed(acc.process_index)
for step in range(4):
    x = torch.randn(8, 4, generator=g)
    if acc.process_index == 1 and step == 2:
        x[3, 1] = float("nan")  # a corrupt sample on one rank
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    acc.backward(loss)
    opt.step()
acc.wait_for_everyone()
