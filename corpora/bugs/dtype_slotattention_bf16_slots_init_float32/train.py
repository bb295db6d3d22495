# Source: lucidrains/slot-attention, slot_attention/slot_attention.py, README.md, commit 0f751eb38b04879a51d8af69c8ffb08bc8fcbd89
# Report: https://github.com/lucidrains/slot-attention/commit/d98bc1717d203b7d1c2b5e56d238a34bf73deae1
# Slot Attention (the package's SlotAttention module, as in its README) trained in bfloat16
# to find the cluster centres of 2-D point sets: points are embedded, the slots are read out
# to 2-D and matched to the true centres with a Chamfer loss. The whole model and the inputs
# are cast to bfloat16 to halve memory, as one does on an accelerator.
import torch
from torch import nn
from torch.nn import init


class SlotAttention(nn.Module):
    def __init__(self, num_slots, dim, iters = 3, eps = 1e-8, hidden_dim = 128):
        super().__init__()
        self.num_slots = num_slots
        self.iters = iters
        self.eps = eps
        self.scale = dim ** -0.5

        self.slots_mu = nn.Parameter(torch.randn(1, 1, dim))

        self.slots_logsigma = nn.Parameter(torch.zeros(1, 1, dim))
        init.xavier_uniform_(self.slots_logsigma)

        self.to_q = nn.Linear(dim, dim)
        self.to_k = nn.Linear(dim, dim)
        self.to_v = nn.Linear(dim, dim)

        self.gru = nn.GRUCell(dim, dim)

        hidden_dim = max(dim, hidden_dim)

        self.mlp = nn.Sequential(
            nn.Linear(dim, hidden_dim),
            nn.ReLU(inplace = True),
            nn.Linear(hidden_dim, dim)
        )

        self.norm_input  = nn.LayerNorm(dim)
        self.norm_slots  = nn.LayerNorm(dim)
        self.norm_pre_ff = nn.LayerNorm(dim)

    def forward(self, inputs, num_slots = None):
        b, n, d, device = *inputs.shape, inputs.device
        n_s = num_slots if num_slots is not None else self.num_slots

        mu = self.slots_mu.expand(b, n_s, -1)
        sigma = self.slots_logsigma.exp().expand(b, n_s, -1)

        slots = mu + sigma * torch.randn(mu.shape, device = device)

        inputs = self.norm_input(inputs)
        k, v = self.to_k(inputs), self.to_v(inputs)

        for _ in range(self.iters):
            slots_prev = slots

            slots = self.norm_slots(slots)
            q = self.to_q(slots)

            dots = torch.einsum('bid,bjd->bij', q, k) * self.scale
            attn = dots.softmax(dim=1) + self.eps
            attn = attn / attn.sum(dim=-1, keepdim=True)

            updates = torch.einsum('bjd,bij->bid', v, attn)

            slots = self.gru(
                updates.reshape(-1, d),
                slots_prev.reshape(-1, d)
            )

            slots = slots.reshape(b, -1, d)
            slots = slots + self.mlp(self.norm_pre_ff(slots))

        return slots


class ClusterFinder(nn.Module):
    def __init__(self, num_slots=3, dim=32):
        super().__init__()
        self.embed = nn.Sequential(nn.Linear(2, dim), nn.ReLU(), nn.Linear(dim, dim))
        self.slot_attn = SlotAttention(num_slots=num_slots, dim=dim, iters=3, hidden_dim=64)
        self.readout = nn.Linear(dim, 2)

    def forward(self, points):
        return self.readout(self.slot_attn(self.embed(points)))


def make_batch(b, n=48, k=3, generator=None):
    centres = torch.rand(b, k, 2, generator=generator) * 4 - 2
    assign = torch.randint(0, k, (b, n), generator=generator)
    points = centres.gather(1, assign[..., None].expand(-1, -1, 2))
    points = points + 0.15 * torch.randn(b, n, 2, generator=generator)
    return points, centres


def chamfer(pred, target):
    d = torch.cdist(pred.float(), target.float())
    return d.min(dim=2).values.mean() + d.min(dim=1).values.mean()


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(1)
    dtype = torch.bfloat16

    model = ClusterFinder().to(dtype)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)

    for step in range(1, 301):
        points, centres = make_batch(32, generator=g)
        pred = model(points.to(dtype))
        loss = chamfer(pred, centres)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if step == 1 or step % 50 == 0:
            print("step %d chamfer %.4f" % (step, loss.item()))

    with torch.no_grad():
        points, centres = make_batch(256, generator=g)
        print("held-out chamfer %.4f" % chamfer(model(points.to(dtype)), centres).item())


if __name__ == "__main__":
    main()
