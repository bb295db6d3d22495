# A hand-written relative error against a target the script builds once, before the loop; one
# sample's target is 0 (issue 27: the repro loop with a script-built target).
import torch
import torch.nn as nn

torch.manual_seed(0)
n = 256
X = torch.randn(n, 8)
target = torch.rand(n, 1) + 0.5
target[77] = 0.0
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range(5):
    pred = model(X)
    loss = (((pred - target) / target) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
