"""Fitting sin(x) with a third-order polynomial: features x.unsqueeze(-1).pow(p), an
nn.Sequential(Linear(3, 1), Flatten(0, 1)), MSELoss(reduction='sum'), RMSprop, loss.item()
printed every 100 steps.

Source: pytorch/tutorials, beginner_source/examples_nn/polynomial_optim.py,
commit 96efa19f4e1be1b64c5474c1f3ae18a47d98aa90.
Reduced: 200 points instead of 2000, 6 steps instead of 2000.
"""

import math

import torch


def build():
    torch.manual_seed(0)
    x = torch.linspace(-math.pi, math.pi, 200)
    y = torch.sin(x)
    p = torch.tensor([1, 2, 3])
    xx = x.unsqueeze(-1).pow(p)
    model = torch.nn.Sequential(torch.nn.Linear(3, 1), torch.nn.Flatten(0, 1))
    loss_fn = torch.nn.MSELoss(reduction="sum")
    optimizer = torch.optim.RMSprop(model.parameters(), lr=1e-3)

    def train():
        for t in range(6):
            y_pred = model(xx)
            loss = loss_fn(y_pred, y)
            if t % 100 == 99:
                print(t, loss.item())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        linear_layer = model[0]
        return linear_layer.bias.item(), linear_layer.weight[:, 0].item()

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
