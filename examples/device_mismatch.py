"""Device fault: the model was built on the meta device (shapes only) and never materialized;
the batch is on the CPU. (On a GPU machine the same mistake reads cuda vs cpu.)"""

import torch
import torch.nn as nn

with torch.device("meta"):  # e.g. to build a large model without allocating it
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
# missing: model.to_empty(device="cpu") and loading the weights

x = torch.randn(4, 8)
y = torch.randn(4, 1)
loss = nn.functional.mse_loss(model(x), y)
loss.backward()
