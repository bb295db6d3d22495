"""Dynamic graph with weight sharing: a polynomial whose forward reuses the same parameter e for
a random number (0..2) of extra terms chosen per call with random.randint, MSELoss(reduction=
'sum'), SGD with momentum.

Source: pytorch/tutorials, beginner_source/examples_nn/dynamic_net.py,
commit e13beed18d7cc24f9ed01746a6d03325ce622800.
Reduced: 200 points, 8 steps.
"""

import math
import random

import torch


class DynamicNet(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Parameter(torch.randn(()))
        self.b = torch.nn.Parameter(torch.randn(()))
        self.c = torch.nn.Parameter(torch.randn(()))
        self.d = torch.nn.Parameter(torch.randn(()))
        self.e = torch.nn.Parameter(torch.randn(()))

    def forward(self, x):
        y = self.a + self.b * x + self.c * x ** 2 + self.d * x ** 3
        for exp in range(4, random.randint(4, 6)):
            y = y + self.e * x ** exp
        return y


def build():
    random.seed(0)
    torch.manual_seed(0)
    x = torch.linspace(-math.pi, math.pi, 200)
    y = torch.sin(x)
    model = DynamicNet()
    criterion = torch.nn.MSELoss(reduction="sum")
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-8, momentum=0.9)

    def train():
        for t in range(8):
            y_pred = model(x)
            loss = criterion(y_pred, y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
