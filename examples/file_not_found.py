"""Environment fault: a relative path that only works from this folder (seed appendix G.1).

`labels.csv` sits next to this script; run it from the repository root and the relative path
resolves against the working directory instead.
"""

import torch
import torch.nn as nn

model = nn.Linear(3, 1)
with open("labels.csv") as fh:  # should be Path(__file__).resolve().parent / "labels.csv"
    rows = [list(map(float, line.split(","))) for line in fh if line.strip()]
data = torch.tensor(rows)
loss = nn.functional.mse_loss(model(data[:, :3]), data[:, 3:])
loss.backward()
