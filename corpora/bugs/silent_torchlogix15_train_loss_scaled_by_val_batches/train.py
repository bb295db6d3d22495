# Source: ligerlac/torchlogix, experiments/train.py, experiments/utils.py, src/torchlogix/layers/dense.py, src/torchlogix/layers/groupsum.py, commit 8c305532fb294edc6641c19ccb93495af93044d6
# Report: https://github.com/ligerlac/torchlogix/issues/15
# torchlogix experiment script: a differentiable logic-gate network (dense logic layers with a
# softmax over the 16 two-input gates, GroupSum head) trained with cross entropy; every eval_freq
# iterations the validation set is evaluated with discrete gates (eval mode) and relaxed gates
# (train mode) and the running training loss is reported. MNIST is replaced by synthetic binary
# 8x8 digits; the model zoo and callbacks are reduced to one dense model and printing.
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn


def bin_op_s(a, b, w):
    """Relaxed outputs of the 16 two-input logic gates, weighted by w (..., 16)."""
    ab = a * b
    ops = torch.stack([
        torch.zeros_like(a), ab, a - ab, a, b - ab, b, a + b - 2 * ab, a + b - ab,
        1 - (a + b - ab), 1 - (a + b - 2 * ab), 1 - b, 1 - b + ab, 1 - a, 1 - a + ab, 1 - ab, torch.ones_like(a),
    ], dim=-1)
    return (ops * w).sum(-1)


class LogicDense(nn.Module):
    def __init__(self, in_dim, out_dim, seed):
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.weight = nn.Parameter(torch.randn(out_dim, 16, generator=g))
        self.register_buffer("idx_a", torch.randint(0, in_dim, (out_dim,), generator=g))
        self.register_buffer("idx_b", torch.randint(0, in_dim, (out_dim,), generator=g))

    def forward(self, x):
        a, b = x[..., self.idx_a], x[..., self.idx_b]
        if self.training:
            w = torch.softmax(self.weight, dim=-1)
        else:
            w = nn.functional.one_hot(self.weight.argmax(-1), 16).to(x.dtype)
        return bin_op_s(a, b, w)


class GroupSum(nn.Module):
    def __init__(self, k, tau=1.0):
        super().__init__()
        self.k, self.tau = k, tau

    def forward(self, x):
        return x.reshape(*x.shape[:-1], self.k, x.shape[-1] // self.k).sum(-1) / self.tau


def get_model():
    return nn.Sequential(nn.Flatten(), LogicDense(64, 500, 1), LogicDense(500, 500, 2),
                         LogicDense(500, 500, 3), GroupSum(10, tau=5.0))


def make_digits(n, seed):
    g = torch.Generator().manual_seed(seed)
    protos = (torch.rand(10, 8, 8, generator=torch.Generator().manual_seed(99)) < 0.4).float()
    y = torch.randint(0, 10, (n,), generator=g)
    flips = (torch.rand(n, 8, 8, generator=g) < 0.22).float()
    x = (protos[y] + flips) % 2
    return torch.utils.data.TensorDataset(x, y)


def load_n(loader, n):
    i = 0
    while i < n:
        for x in loader:
            yield x
            i += 1
            if i == n:
                break


def evaluate_model(model, loader, eval_functions, mode="eval", device="cpu"):
    orig_mode = model.training
    model.train(mode == "train")

    metrics = defaultdict(list)

    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            preds = model(x)
            for name, fn in eval_functions.items():
                metrics[name].append(fn(preds, y).to(torch.float32).mean().item())

    model.train(orig_mode)

    return {name: np.mean(vals) for name, vals in metrics.items()}


class Args:
    batch_size = 128
    learning_rate = 0.05
    num_iterations = 300
    eval_freq = 100
    device = "cpu"


def run_training(args):
    torch.manual_seed(0)
    train_loader = torch.utils.data.DataLoader(make_digits(3000, 0), batch_size=args.batch_size, shuffle=True)
    validation_loader = torch.utils.data.DataLoader(make_digits(500, 1), batch_size=args.batch_size, shuffle=False)
    model = get_model()
    loss_fn = torch.nn.CrossEntropyLoss()
    eval_functions = {"loss": loss_fn, "acc": lambda preds, y: preds.argmax(-1) == y}
    optimizer = torch.optim.Adam(model.parameters(), lr=args.learning_rate)

    print(f"Batch size: {args.batch_size}, Learning rate: {args.learning_rate}")
    running_train_loss, n = 0.0, 0
    for i, (x, y) in enumerate(load_n(train_loader, args.num_iterations)):
        x = x.to(args.device)
        y = y.to(args.device)

        model.train()
        x = model(x)
        loss = loss_fn(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        n += y.size(0)
        running_train_loss += loss

        # Evaluation
        if (args.eval_freq > 0 and ((i + 1) % args.eval_freq == 0)):
            discrete_metrics = evaluate_model(
                model, validation_loader, eval_functions, mode="eval", device=args.device
            )
            relaxed_metrics = evaluate_model(
                model, validation_loader, eval_functions, mode="train", device=args.device
            )

            metrics = \
                {f"val_{k}_discrete": v for k, v in discrete_metrics.items()} | \
                {f"val_{k}_relaxed": v for k, v in relaxed_metrics.items()} | \
                {"train_loss": running_train_loss.cpu().detach().item() / n * len(validation_loader)}

            print(f"Iteration {i + 1:6d} | " +
                  " | ".join([f"{k}: {v:.4f}" for k, v in metrics.items()]))

            running_train_loss, n = 0.0, 0
    return metrics


if __name__ == "__main__":
    run_training(Args())
