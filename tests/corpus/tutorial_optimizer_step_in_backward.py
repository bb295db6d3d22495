"""Optimizer step fused into backward: one Adam per parameter in a dict, a
register_post_accumulate_grad_hook on every parameter that calls that parameter's step() and
zero_grad() as soon as its gradient is accumulated, and a training loop that only calls
loss.backward() (no optimizer.step() in the loop).

Source: pytorch/tutorials, intermediate_source/optimizer_step_in_backward_tutorial.py,
commit 92f11a171bb3f3f6bbd8dfb102c59d67c2385032.
Reduced: a 2-layer MLP instead of ViT-L-16, 3 steps of random data.
"""

import torch
import torch.nn as nn


def build():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 10))
    optimizer_dict = {p: torch.optim.Adam([p], foreach=False) for p in model.parameters()}

    def optimizer_hook(parameter) -> None:
        optimizer_dict[parameter].step()
        optimizer_dict[parameter].zero_grad()

    for p in model.parameters():
        p.register_post_accumulate_grad_hook(optimizer_hook)

    def train_step(model):
        fake_image = torch.rand(8, 16)
        loss = model.forward(fake_image)
        loss.sum().backward()

    def train():
        for _ in range(3):
            train_step(model)

    return [model], list(optimizer_dict.values()), train


if __name__ == "__main__":
    build()[2]()
