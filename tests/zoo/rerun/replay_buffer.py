# An RL update built from a replay buffer: one reward of +Inf from the environment at
# iteration 20 makes the advantage NaN (issue 27).
import random, torch, torch.nn as nn
torch.manual_seed(0); random.seed(0)
policy = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))
opt = torch.optim.Adam(policy.parameters(), lr=1e-3)
buffer = []
for it in range(30):
    s = torch.randn(4)
    a = random.randrange(2)
    r = 1.0 if it != 20 else float("inf")   # a bad reward from the environment
    buffer.append((s, a, r))
    if len(buffer) < 8:
        continue
    batch = buffer[-8:]
    states = torch.stack([b[0] for b in batch])
    actions = torch.tensor([b[1] for b in batch])
    rewards = torch.tensor([b[2] for b in batch])
    logp = torch.log_softmax(policy(states), -1).gather(1, actions[:, None]).squeeze(1)
    adv = rewards - rewards.mean()
    loss = -(logp * adv).mean()
    opt.zero_grad(); loss.backward(); opt.step()
