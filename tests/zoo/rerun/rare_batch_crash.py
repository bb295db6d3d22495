# A hand-written relative error meets one rare batch at step 40 (a zero target), then the
# script stops on the non-finite loss (issue 27).
import torch, torch.nn as nn
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(60):
    x = torch.randn(32, 8)
    y = torch.rand(32, 1) + 0.5
    if step == 40:
        y[3] = 0.0          # the one rare batch: a zero target
    pred = model(x)
    rel = (pred - y) / y    # hand-written relative error
    loss = rel.pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
    if not torch.isfinite(loss):
        raise RuntimeError(f"loss diverged at step {step}")
