# The NaN is born at step 20 in a hand-written advantage normalization (0 / 0 on an all-zero
# reward batch); the update makes the policy NaN, and at step 21 torch.distributions'
# argument check raises (issue 27).
import torch
import torch.nn as nn

torch.manual_seed(0)
policy = nn.Sequential(nn.Linear(4, 16), nn.Tanh(), nn.Linear(16, 2))
opt = torch.optim.Adam(policy.parameters(), lr=1e-2)
for step in range(40):
    obs = torch.randn(16, 4)
    out = policy(obs)
    dist = torch.distributions.Normal(out[:, 0], out[:, 1].exp())
    action = dist.sample()
    reward = torch.rand(16) if step != 20 else torch.zeros(16)
    weight = reward / reward.sum()
    loss = -(dist.log_prob(action) * weight).sum()
    opt.zero_grad()
    loss.backward()
    opt.step()
