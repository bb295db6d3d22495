"""Polynomial regression with a single nn.Linear: features [x, x^2, x^3, x^4], smooth_l1_loss,
loss.item() read before backward, fc.zero_grad(), and the update written by hand
(param.data.add_(-0.1 * param.grad)), no optimizer object.

Source: pytorch/examples, regression/main.py, commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Reduced: 6 batches of 32 instead of "until the loss is below 1e-3".
"""

import torch
import torch.nn.functional as F

POLY_DEGREE = 4


def make_features(x):
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)


def build():
    torch.manual_seed(0)
    W_target = torch.randn(POLY_DEGREE, 1) * 5
    b_target = torch.randn(1) * 5

    def f(x):
        return x.mm(W_target) + b_target.item()

    def get_batch(batch_size=32):
        random = torch.randn(batch_size)
        x = make_features(random)
        return x, f(x)

    fc = torch.nn.Linear(W_target.size(0), 1)

    def train():
        for batch_idx in range(1, 7):
            batch_x, batch_y = get_batch()
            fc.zero_grad()
            output = F.smooth_l1_loss(fc(batch_x), batch_y)
            loss = output.item()
            output.backward()
            for param in fc.parameters():
                param.data.add_(-0.1 * param.grad)
            if loss < 1e-3:
                break

    return [fc], [], train


if __name__ == "__main__":
    build()[2]()
