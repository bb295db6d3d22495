# Source: geoopt/geoopt, geoopt/optim/radam.py (RiemannianAdam.step) + geoopt/optim/mixin.py (OptimMixin) + geoopt/manifolds/euclidean.py, commit 244bcd0ed85eb7c32ebfec96565a99f1c4c3680f
# Report: https://github.com/geoopt/geoopt/issues/164
# RiemannianAdam from geoopt used as the optimizer of an ordinary network (parameters that are
# not ManifoldParameters live on geoopt's default Euclidean manifold, where the Riemannian
# update is plain Adam). The optimizer class is kept verbatim with the Euclidean manifold's
# egrad2rgrad / component_inner / retr_transp; the model is a small MLP classifier on a
# synthetic two-rings task.
import math
import time

import torch
import torch.nn as nn
import torch.optim

torch.set_num_threads(1)


def copy_or_set_(dest, source):
    if dest.stride() != source.stride():
        return dest.copy_(source)
    else:
        return dest.set_(source)


class Euclidean:
    ndim = 0

    def egrad2rgrad(self, x, u):
        return u

    def component_inner(self, x, u, v=None):
        if v is None:
            return u.pow(2)
        return u * v

    def retr_transp(self, x, u, v):
        return x + u, v

    def projx(self, x):
        return x


class ManifoldParameter(nn.Parameter):
    pass


ManifoldTensor = ManifoldParameter


class OptimMixin(object):
    _default_manifold = Euclidean()

    def __init__(self, *args, stabilize=None, **kwargs):
        self._stabilize = stabilize
        super().__init__(*args, **kwargs)

    def add_param_group(self, param_group: dict):
        param_group.setdefault("stabilize", self._stabilize)
        return super().add_param_group(param_group)

    def stabilize_group(self, group):
        pass


class RiemannianAdam(OptimMixin, torch.optim.Adam):
    r"""
    Riemannian Adam with the same API as :class:`torch.optim.Adam`.
    """

    def step(self, closure=None):
        loss = None
        if closure is not None:
            loss = closure()
        with torch.no_grad():
            for group in self.param_groups:
                if "step" not in group:
                    group["step"] = 0
                betas = group["betas"]
                weight_decay = group["weight_decay"]
                eps = group["eps"]
                learning_rate = group["lr"]
                amsgrad = group["amsgrad"]
                for point in group["params"]:
                    grad = point.grad
                    if grad is None:
                        continue
                    if isinstance(point, (ManifoldParameter, ManifoldTensor)):
                        manifold = point.manifold
                    else:
                        manifold = self._default_manifold

                    if grad.is_sparse:
                        raise RuntimeError(
                            "RiemannianAdam does not support sparse gradients, use SparseRiemannianAdam instead"
                        )

                    state = self.state[point]

                    # State initialization
                    if len(state) == 0:
                        state["step"] = 0
                        # Exponential moving average of gradient values
                        state["exp_avg"] = torch.zeros_like(point)
                        # Exponential moving average of squared gradient values
                        state["exp_avg_sq"] = torch.zeros_like(point)
                        if amsgrad:
                            # Maintains max of all exp. moving avg. of sq. grad. values
                            state["max_exp_avg_sq"] = torch.zeros_like(point)
                    # make local variables for easy access
                    exp_avg = state["exp_avg"]
                    exp_avg_sq = state["exp_avg_sq"]
                    # actual step
                    grad.add_(point, alpha=weight_decay)
                    grad = manifold.egrad2rgrad(point, grad)
                    exp_avg.mul_(betas[0]).add_(grad, alpha=1 - betas[0])
                    exp_avg_sq.mul_(betas[1]).add_(
                        manifold.component_inner(point, grad), alpha=1 - betas[1]
                    )
                    if amsgrad:
                        max_exp_avg_sq = state["max_exp_avg_sq"]
                        # Maintains the maximum of all 2nd moment running avg. till now
                        torch.max(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
                        # Use the max. for normalizing running avg. of gradient
                        denom = max_exp_avg_sq.sqrt().add_(eps)
                    else:
                        denom = exp_avg_sq.sqrt().add_(eps)
                    group["step"] += 1
                    bias_correction1 = 1 - betas[0] ** group["step"]
                    bias_correction2 = 1 - betas[1] ** group["step"]
                    step_size = (
                        learning_rate * bias_correction2 ** 0.5 / bias_correction1
                    )

                    # copy the state, we need it for retraction
                    # get the direction for ascend
                    direction = exp_avg / denom
                    # transport the exponential averaging to the new point
                    new_point, exp_avg_new = manifold.retr_transp(
                        point, -step_size * direction, exp_avg
                    )
                    # use copy only for user facing point
                    copy_or_set_(point, new_point)
                    exp_avg.set_(exp_avg_new)

                    group["step"] += 1
                if (
                    group["stabilize"] is not None
                    and group["step"] % group["stabilize"] == 0
                ):
                    self.stabilize_group(group)
        return loss


def make_data(n, gen):
    """Two noisy concentric rings (class = ring)."""
    y = torch.randint(0, 2, (n,), generator=gen)
    angle = torch.rand(n, generator=gen) * 2 * math.pi
    radius = 1.0 + y.float() + 0.25 * torch.randn(n, generator=gen)
    x = torch.stack([radius * torch.cos(angle), radius * torch.sin(angle)], 1)
    return x, y


def main():
    t0 = time.time()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x_tr, y_tr = make_data(2048, gen)
    x_va, y_va = make_data(1024, gen)
    model = nn.Sequential(nn.Linear(2, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                          nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))
    optimizer = RiemannianAdam(model.parameters(), lr=1e-2)
    criterion = nn.CrossEntropyLoss()
    for epoch in range(12):
        model.train()
        perm = torch.randperm(len(x_tr), generator=gen)
        losses = []
        for i in range(0, len(x_tr), 64):
            idx = perm[i:i + 64]
            loss = criterion(model(x_tr[idx]), y_tr[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        model.eval()
        with torch.no_grad():
            out = model(x_va)
            val_loss = criterion(out, y_va).item()
            acc = (out.argmax(1) == y_va).float().mean().item()
        if epoch % 2 == 1:
            print('epoch %2d | train loss %.4f | val loss %.4f | val acc %.3f | group step counter %d' % (
                epoch, sum(losses) / len(losses), val_loss, acc, optimizer.param_groups[0]["step"]))
    print('done in %.1fs' % (time.time() - t0))


if __name__ == '__main__':
    main()
