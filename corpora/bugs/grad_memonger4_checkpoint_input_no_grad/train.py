# Source: Lyken17/pytorch-memonger, momonger/memonger.py, commit 001d36e02073dbdba8d3410be7947e1671471a15
# Report: https://github.com/Lyken17/pytorch-memonger/issues/4
# Sublinear-memory training: the convolutional trunk of a small ResNet-style classifier is
# wrapped in SublinearSequential, which re-forwards segments through (reentrant) checkpointing.
# Synthetic 10-class 16x16 images instead of CIFAR.
import functools
from math import sqrt

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.utils.checkpoint
from torch.nn.modules.batchnorm import _BatchNorm

checkpoint = functools.partial(torch.utils.checkpoint.checkpoint, use_reentrant=True)


def reforwad_momentum_fix(origin_momentum):
    return (1 - sqrt(1 - origin_momentum))


class SublinearSequential(nn.Sequential):
    def __init__(self, *args):
        super(SublinearSequential, self).__init__(*args)
        self.reforward = False
        self.momentum_dict = {}
        self.set_reforward(True)

    def set_reforward(self, enabled=True):
        if not self.reforward and enabled:
            print("Rescale BN Momemtum for re-forwarding purpose")
            for n, m in self.named_modules():
                if isinstance(m, _BatchNorm):
                    self.momentum_dict[n] = m.momentum
                    m.momentum = reforwad_momentum_fix(self.momentum_dict[n])
        self.reforward = enabled

    def forward(self, input):
        if self.reforward:
            return self.sublinear_forward(input)
        else:
            return self.normal_forward(input)

    def normal_forward(self, input):
        for module in self._modules.values():
            input = module(input)
        return input

    def sublinear_forward(self, input):
        def run_function(start, end, functions):
            def forward(*inputs):
                input = inputs[0]
                for j in range(start, end + 1):
                    input = functions[j](input)
                return input
            return forward

        functions = list(self.children())
        segments = int(sqrt(len(functions)))
        segment_size = len(functions) // segments
        end = -1
        if not isinstance(input, tuple):
            inputs = (input,)
        for start in range(0, segment_size * (segments - 1), segment_size):
            end = start + segment_size - 1
            inputs = checkpoint(run_function(start, end, functions), *inputs)
            if not isinstance(inputs, tuple):
                inputs = (inputs,)
        output = checkpoint(run_function(end + 1, len(functions) - 1, functions), *inputs)
        return output


class Net(nn.Module):
    def __init__(self, num_classes=10):
        super().__init__()
        self.features = SublinearSequential(
            nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1))
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        out = self.features(x)
        return self.fc(out.flatten(1))


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    n = 1200
    y = torch.randint(0, 10, (n,), generator=gen)
    freqs = torch.arange(10).float()[:, None, None] * 0.6 + 0.3
    grid = torch.arange(16).float()
    pattern = torch.sin(freqs * grid[None, :, None]) * torch.cos(freqs * grid[None, None, :])
    x = pattern[y][:, None].repeat(1, 3, 1, 1) + 0.5 * torch.randn(n, 3, 16, 16, generator=gen)
    x_train, y_train, x_test, y_test = x[:1000], y[:1000], x[1000:], y[1000:]

    model = Net()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(6):
        model.train()
        for i in range(0, 1000, 50):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_train[i:i + 50]), y_train[i:i + 50])
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            acc = (model(x_test).argmax(1) == y_test).float().mean().item()
        print("epoch %d loss %.4f test acc %.3f" % (epoch, loss.item(), acc))


if __name__ == "__main__":
    main()
