# Source: KellerJordan/Muon, muon.py (zeropower_via_newtonschulz5, muon_update, adam_update, SingleDeviceMuonWithAuxAdam), README.md (Usage), commit 857d1adc159e098212f828d927460782d3da59e9
# Report: https://github.com/KellerJordan/Muon/issues/54
# Fine-tuning with the Muon optimizer as its README prescribes: hidden 2-D weights of model.body in a
# Muon group, gains/biases, head and embedding in an AdamW-style group, both with weight decay. A
# small MLP is first pretrained on task A with torch.optim.AdamW; for task B the embedding and the
# first body layer are frozen (requires_grad_(False)) and the rest is fine-tuned with
# SingleDeviceMuonWithAuxAdam built from model.body / model.head / model.embed as in the README.
# Synthetic data from a fixed random teacher network; muon.py is kept as released.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


def zeropower_via_newtonschulz5(G, steps: int):
    """
    Newton-Schulz iteration to compute the zeroth power / orthogonalization of G. We opt to use a
    quintic iteration whose coefficients are selected to maximize the slope at zero. For the purpose
    of minimizing steps, it turns out to be empirically effective to keep increasing the slope at
    zero even beyond the point where the iteration no longer converges all the way to one everywhere
    on the interval. This iteration therefore does not produce UV^T but rather something like US'V^T
    where S' is diagonal with S_{ii}' ~ Uniform(0.5, 1.5), which turns out not to hurt model
    performance at all relative to UV^T, where USV^T = G is the SVD.
    """
    assert G.ndim >= 2 # batched Muon implementation by @scottjmaddox, and put into practice in the record by @YouJiacheng
    a, b, c = (3.4445, -4.7750,  2.0315)
    X = G.bfloat16()
    if G.size(-2) > G.size(-1):
        X = X.mT

    # Ensure spectral norm is at most 1
    X = X / (X.norm(dim=(-2, -1), keepdim=True) + 1e-7)
    # Perform the NS iterations
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A # quintic computation strategy adapted from suggestion by @jxbz, @leloykun, and @YouJiacheng
        X = a * X + B @ X
    
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def muon_update(grad, momentum, beta=0.95, ns_steps=5, nesterov=True):
    momentum.lerp_(grad, 1 - beta)
    update = grad.lerp_(momentum, beta) if nesterov else momentum
    if update.ndim == 4: # for the case of conv filters
        update = update.view(len(update), -1)
    update = zeropower_via_newtonschulz5(update, steps=ns_steps)
    update *= max(1, grad.size(-2) / grad.size(-1))**0.5
    return update



def adam_update(grad, buf1, buf2, step, betas, eps):
    buf1.lerp_(grad, 1 - betas[0])
    buf2.lerp_(grad.square(), 1 - betas[1])
    buf1c = buf1 / (1 - betas[0]**step)
    buf2c = buf2 / (1 - betas[1]**step)
    return buf1c / (buf2c.sqrt() + eps)


class SingleDeviceMuonWithAuxAdam(torch.optim.Optimizer):
    """
    Non-distributed variant of MuonWithAuxAdam.
    """
    def __init__(self, param_groups):
        for group in param_groups:
            assert "use_muon" in group
            if group["use_muon"]:
                # defaults
                group["lr"] = group.get("lr", 0.02)
                group["momentum"] = group.get("momentum", 0.95)
                group["weight_decay"] = group.get("weight_decay", 0)
                assert set(group.keys()) == set(["params", "lr", "momentum", "weight_decay", "use_muon"])
            else:
                # defaults
                group["lr"] = group.get("lr", 3e-4)
                group["betas"] = group.get("betas", (0.9, 0.95))
                group["eps"] = group.get("eps", 1e-10)
                group["weight_decay"] = group.get("weight_decay", 0)
                assert set(group.keys()) == set(["params", "lr", "betas", "eps", "weight_decay", "use_muon"])
        super().__init__(param_groups, dict())

    @torch.no_grad()
    def step(self, closure=None):

        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            if group["use_muon"]:
                for p in group["params"]:
                    if p.grad is None:
                        # continue
                        p.grad = torch.zeros_like(p)  # Force synchronization
                    state = self.state[p]
                    if len(state) == 0:
                        state["momentum_buffer"] = torch.zeros_like(p)
                    update = muon_update(p.grad, state["momentum_buffer"], beta=group["momentum"])
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                    p.add_(update.reshape(p.shape), alpha=-group["lr"])
            else:
                for p in group["params"]:
                    if p.grad is None:
                        # continue
                        p.grad = torch.zeros_like(p)  # Force synchronization
                    state = self.state[p]
                    if len(state) == 0:
                        state["exp_avg"] = torch.zeros_like(p)
                        state["exp_avg_sq"] = torch.zeros_like(p)
                        state["step"] = 0
                    state["step"] += 1
                    update = adam_update(p.grad, state["exp_avg"], state["exp_avg_sq"],
                                         state["step"], group["betas"], group["eps"])
                    p.mul_(1 - group["lr"] * group["weight_decay"])
                    p.add_(update, alpha=-group["lr"])

        return loss


class Net(nn.Module):
    def __init__(self, d_in=32, width=128, n_cls=10):
        super().__init__()
        self.embed = nn.Linear(d_in, width)
        self.body = nn.Sequential(nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU(),
                                  nn.Linear(width, width), nn.LayerNorm(width), nn.ReLU())
        self.head = nn.Linear(width, n_cls)

    def forward(self, x):
        return self.head(self.body(F.relu(self.embed(x))))


def make_task(seed, n, d_in=32, n_cls=10):
    g = torch.Generator().manual_seed(seed)
    teacher = [torch.randn(d_in, 64, generator=g) / d_in ** 0.5, torch.randn(64, n_cls, generator=g) / 8.0]
    x = torch.randn(n, d_in, generator=g)
    y = (torch.tanh(x @ teacher[0]) @ teacher[1]).argmax(1)
    return x, y


def batches(x, y, bs, g):
    idx = torch.randperm(len(x), generator=g)
    for s in range(0, len(x) - bs + 1, bs):
        b = idx[s:s + bs]
        yield x[b], y[b]


@torch.no_grad()
def accuracy(model, x, y):
    model.eval()
    acc = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return 100.0 * acc


def main():
    g = torch.Generator().manual_seed(0)
    xa, ya = make_task(1, 6000)
    x_b, y_b = make_task(2, 5000)
    xb, yb, xb_test, yb_test = x_b[:3000], y_b[:3000], x_b[3000:], y_b[3000:]
    # task B shares task A's inputs distribution; pretraining on A gives the frozen features
    model = Net()

    opt = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    for epoch in range(8):
        for x, y in batches(xa, ya, 128, g):
            loss = F.cross_entropy(model(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    print(f"pretrained on task A: acc {accuracy(model, xa, ya):.2f}")

    for p in [*model.embed.parameters(), *model.body[0].parameters(), *model.body[1].parameters()]:
        p.requires_grad_(False)
    frozen = {n: p.detach().clone() for n, p in model.named_parameters() if not p.requires_grad}
    n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    print(f"fine-tuning on task B: {len(frozen)} frozen tensors, {n_trainable} trainable parameters")

    hidden_weights = [p for p in model.body.parameters() if p.ndim >= 2]
    hidden_gains_biases = [p for p in model.body.parameters() if p.ndim < 2]
    nonhidden_params = [*model.head.parameters(), *model.embed.parameters()]
    param_groups = [
        dict(params=hidden_weights, use_muon=True,
             lr=0.02, weight_decay=0.1),
        dict(params=hidden_gains_biases + nonhidden_params, use_muon=False,
             lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1),
    ]
    optimizer = SingleDeviceMuonWithAuxAdam(param_groups)

    step = 0
    for epoch in range(12):
        for x, y in batches(xb, yb, 64, g):
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            step += 1
        drift = max((p - frozen[n]).abs().max().item() for n, p in model.named_parameters() if n in frozen)
        ratio = model.body[0].weight.norm().item() / frozen["body.0.weight"].norm().item()
        print(f"epoch {epoch} step {step}: loss {loss.item():.4f}  test acc {accuracy(model, xb_test, yb_test):.2f}  "
              f"frozen params max change {drift:.4f}  body.0.weight norm / pretrained {ratio:.3f}")


if __name__ == "__main__":
    main()
