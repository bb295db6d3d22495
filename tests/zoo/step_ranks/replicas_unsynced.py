# Models an optimizer steps on two gloo ranks, each rank drawing its own batches. The first
# argument picks how the loop is written:
#   unwrapped    a model never wrapped, no gradient sync            (drifts)
#   second       a DDP policy plus a value net beside it, unsynced   (the value net drifts)
#   unwrap_call  DDP built, every call goes through .module          (drifts, the call is named)
#   quiet        three correct models in one loop (no finding): the policy's gradients all-reduced and
#                averaged by hand, a value net averaged every 2 steps (local SGD), and a model per
#                rank on purpose (seeded by rank: different before the first step)
import datetime
import sys

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def unwrap(m):
    return m.module if isinstance(m, DDP) else m


class Agent:
    def __init__(self, mode):
        self.policy = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
        self.value = nn.Sequential(nn.Linear(6, 8), nn.ReLU(), nn.Linear(8, 1))
        if mode in ("second", "unwrap_call"):
            self.policy = DDP(self.policy)
        self.opt = torch.optim.SGD(self.policy.parameters(), lr=0.05)
        self.value_opt = torch.optim.Adam(self.value.parameters(), lr=1e-2)


def main(mode):
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    agent = Agent(mode)
    torch.manual_seed(rank)
    own = nn.Linear(6, 3)  # a model per rank, on purpose
    own_opt = torch.optim.SGD(own.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(100 + rank)
    for step in range(8):
        x, y, r = torch.randn(8, 6, generator=g), torch.randint(0, 3, (8,), generator=g), torch.randn(8, 1, generator=g)
        net = unwrap(agent.policy) if mode == "unwrap_call" else agent.policy
        loss = F.cross_entropy(net(x), y)  # CALL
        agent.opt.zero_grad()
        loss.backward()
        if mode == "quiet":
            for p in agent.policy.parameters():
                dist.all_reduce(p.grad)
                p.grad /= world
        agent.opt.step()  # STEP
        if mode == "second":
            v_loss = F.mse_loss(agent.value(x), r)
            agent.value_opt.zero_grad()
            v_loss.backward()
            agent.value_opt.step()  # VALUE_STEP
        if mode == "quiet":
            v_loss = F.mse_loss(agent.value(x), r)
            agent.value_opt.zero_grad()
            v_loss.backward()
            agent.value_opt.step()
            if step % 2 == 1:
                with torch.no_grad():
                    for p in agent.value.parameters():
                        dist.all_reduce(p)
                        p /= world
            own_loss = F.cross_entropy(own(x), y)
            own_opt.zero_grad()
            own_loss.backward()
            own_opt.step()
    dist.destroy_process_group()


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "quiet")
