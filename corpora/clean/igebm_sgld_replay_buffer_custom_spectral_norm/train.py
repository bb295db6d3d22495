# Source: rosinality/igebm-pytorch, train.py + model.py, commit 3c4f104af8781f232fd994759c60b7c19f13eba7
# https://github.com/rosinality/igebm-pytorch
#
# Implicit-generation EBM (Du & Mordatch) with Langevin sampling from a replay buffer: the input images are
# the leaf being optimised (neg_img.requires_grad = True, 10 backward() calls per step on the energy sum, grads
# clamped and applied through .data, grad.detach_() / zero_()), `parameters = model.parameters()` is a
# generator that Adam consumes, so the later requires_grad(parameters, False/True) loops iterate nothing and
# the model's parameter grads accumulate during sampling until model.zero_grad(); Adam betas (0.0, 0.999);
# gradients clipped by a bound built from Adam's exp_avg_sq state; a hand-written spectral norm that deletes
# `weight` from _parameters, re-registers it as a buffer and overwrites it with a non-leaf tensor in a forward
# pre-hook; conv2 initialised with std 1e-10; class-conditional affine from an Embedding; loss
# alpha*(E+^2 + E-^2) + E+ - E- goes negative.
# Adaptation: torchvision CIFAR-10 / tqdm / save_image unavailable: 1280 synthetic 16x16 RGB images of 10
# classes (a coloured disc on a darker background, class = colour) in [0, 1]; channels 128/256 -> 16/32;
# image size 32 -> 16 (the sample_buffer shapes follow); batch 128 -> 32; sample_step 60 -> 10; 32 iterations
# instead of an endless loop; device cuda -> cpu; sample statistics printed instead of PNG files.
import random

import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class SpectralNorm:
    def __init__(self, name, bound=False):
        self.name = name
        self.bound = bound

    def compute_weight(self, module):
        weight = getattr(module, self.name + '_orig')
        u = getattr(module, self.name + '_u')
        size = weight.size()
        weight_mat = weight.contiguous().view(size[0], -1)

        with torch.no_grad():
            v = weight_mat.t() @ u
            v = v / v.norm()
            u = weight_mat @ v
            u = u / u.norm()

        sigma = u @ weight_mat @ v

        if self.bound:
            weight_sn = weight / (sigma + 1e-6) * torch.clamp(sigma, max=1)

        else:
            weight_sn = weight / sigma

        return weight_sn, u

    @staticmethod
    def apply(module, name, bound):
        fn = SpectralNorm(name, bound)

        weight = getattr(module, name)
        del module._parameters[name]
        module.register_parameter(name + '_orig', weight)
        input_size = weight.size(0)
        u = weight.new_empty(input_size).normal_()
        module.register_buffer(name, weight)
        module.register_buffer(name + '_u', u)

        module.register_forward_pre_hook(fn)

        return fn

    def __call__(self, module, input):
        weight_sn, u = self.compute_weight(module)
        setattr(module, self.name, weight_sn)
        setattr(module, self.name + '_u', u)


def spectral_norm(module, init=True, std=1, bound=False):
    if init:
        nn.init.normal_(module.weight, 0, std)

    if hasattr(module, 'bias') and module.bias is not None:
        module.bias.data.zero_()

    SpectralNorm.apply(module, 'weight', bound=bound)

    return module


class ResBlock(nn.Module):
    def __init__(self, in_channel, out_channel, n_class=None, downsample=False):
        super().__init__()

        self.conv1 = spectral_norm(
            nn.Conv2d(
                in_channel,
                out_channel,
                3,
                padding=1,
                bias=False if n_class is not None else True,
            )
        )

        self.conv2 = spectral_norm(
            nn.Conv2d(
                out_channel,
                out_channel,
                3,
                padding=1,
                bias=False if n_class is not None else True,
            ), std=1e-10, bound=True
        )

        self.class_embed = None

        if n_class is not None:
            class_embed = nn.Embedding(n_class, out_channel * 2 * 2)
            class_embed.weight.data[:, : out_channel * 2] = 1
            class_embed.weight.data[:, out_channel * 2 :] = 0

            self.class_embed = class_embed

        self.skip = None

        if in_channel != out_channel or downsample:
            self.skip = nn.Sequential(
                spectral_norm(nn.Conv2d(in_channel, out_channel, 1, bias=False))
            )

        self.downsample = downsample

    def forward(self, input, class_id=None):
        out = input

        out = self.conv1(out)

        if self.class_embed is not None:
            embed = self.class_embed(class_id).view(input.shape[0], -1, 1, 1)
            weight1, weight2, bias1, bias2 = embed.chunk(4, 1)
            out = weight1 * out + bias1

        out = F.leaky_relu(out, negative_slope=0.2)

        out = self.conv2(out)

        if self.class_embed is not None:
            out = weight2 * out + bias2

        if self.skip is not None:
            skip = self.skip(input)

        else:
            skip = input

        out = out + skip

        if self.downsample:
            out = F.avg_pool2d(out, 2)

        out = F.leaky_relu(out, negative_slope=0.2)

        return out


class IGEBM(nn.Module):
    def __init__(self, n_class=None):
        super().__init__()

        self.conv1 = spectral_norm(nn.Conv2d(3, 16, 3, padding=1), std=1)

        self.blocks = nn.ModuleList(
            [
                ResBlock(16, 16, n_class, downsample=True),
                ResBlock(16, 16, n_class),
                ResBlock(16, 32, n_class, downsample=True),
                ResBlock(32, 32, n_class),
                ResBlock(32, 32, n_class, downsample=True),
                ResBlock(32, 32, n_class),
            ]
        )

        self.linear = nn.Linear(32, 1)

    def forward(self, input, class_id=None):
        out = self.conv1(input)

        out = F.leaky_relu(out, negative_slope=0.2)

        for block in self.blocks:
            out = block(out, class_id)

        out = F.relu(out)
        out = out.view(out.shape[0], out.shape[1], -1).sum(2)
        out = self.linear(out)

        return out


class SampleBuffer:
    def __init__(self, max_samples=10000):
        self.max_samples = max_samples
        self.buffer = []

    def __len__(self):
        return len(self.buffer)

    def push(self, samples, class_ids=None):
        samples = samples.detach().to('cpu')
        class_ids = class_ids.detach().to('cpu')

        for sample, class_id in zip(samples, class_ids):
            self.buffer.append((sample.detach(), class_id))

            if len(self.buffer) > self.max_samples:
                self.buffer.pop(0)

    def get(self, n_samples, device='cpu'):
        items = random.choices(self.buffer, k=n_samples)
        samples, class_ids = zip(*items)
        samples = torch.stack(samples, 0)
        class_ids = torch.tensor(class_ids)
        samples = samples.to(device)
        class_ids = class_ids.to(device)

        return samples, class_ids


def sample_buffer(buffer, batch_size=128, p=0.95, device='cpu'):
    if len(buffer) < 1:
        return (
            torch.rand(batch_size, 3, 16, 16, device=device),
            torch.randint(0, 10, (batch_size,), device=device),
        )

    n_replay = (np.random.rand(batch_size) < p).sum()

    replay_sample, replay_id = buffer.get(n_replay)
    random_sample = torch.rand(batch_size - n_replay, 3, 16, 16, device=device)
    random_id = torch.randint(0, 10, (batch_size - n_replay,), device=device)

    return (
        torch.cat([replay_sample, random_sample], 0),
        torch.cat([replay_id, random_id], 0),
    )


def sample_data(loader):
    loader_iter = iter(loader)

    while True:
        try:
            yield next(loader_iter)

        except StopIteration:
            loader_iter = iter(loader)

            yield next(loader_iter)


def requires_grad(parameters, flag=True):
    for p in parameters:
        p.requires_grad = flag


def clip_grad(parameters, optimizer):
    with torch.no_grad():
        for group in optimizer.param_groups:
            for p in group['params']:
                state = optimizer.state[p]

                if 'step' not in state or state['step'] < 1:
                    continue

                step = state['step']
                exp_avg_sq = state['exp_avg_sq']
                _, beta2 = group['betas']

                bound = 3 * torch.sqrt(exp_avg_sq / (1 - beta2 ** step)) + 0.1
                p.grad.data.copy_(torch.max(torch.min(p.grad.data, bound), -bound))


def synthetic_cifar(n=1280, seed=0):
    g = torch.Generator().manual_seed(seed)
    colors = torch.rand(10, 3, generator=g) * 0.7 + 0.3
    ids = torch.randint(0, 10, (n,), generator=g)
    yy, xx = torch.meshgrid(torch.arange(16.), torch.arange(16.), indexing="ij")
    c = 5 + 6 * torch.rand(n, 2, generator=g)
    disc = (((yy - c[:, 0, None, None]) ** 2 + (xx - c[:, 1, None, None]) ** 2) < 16).float()
    img = 0.15 + disc[:, None] * (colors[ids][:, :, None, None] - 0.15) + 0.03 * torch.randn(n, 3, 16, 16, generator=g)
    return img.clamp(0, 1), ids


def train(model, alpha=1, step_size=10, sample_step=10, device='cpu', n_iter=32):
    images, ids = synthetic_cifar()
    dataset = TensorDataset(images, ids)
    loader = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=0)
    loader = enumerate(sample_data(loader))

    buffer = SampleBuffer()

    noise = torch.randn(32, 3, 16, 16, device=device)

    parameters = model.parameters()
    optimizer = optim.Adam(parameters, lr=1e-4, betas=(0.0, 0.999))

    dists = []
    for i, (pos_img, pos_id) in loader:
        if i == n_iter:
            break
        pos_img, pos_id = pos_img.to(device), pos_id.to(device)

        neg_img, neg_id = sample_buffer(buffer, pos_img.shape[0])
        neg_img.requires_grad = True

        requires_grad(parameters, False)
        model.eval()

        for k in range(sample_step):
            if noise.shape[0] != neg_img.shape[0]:
                noise = torch.randn(neg_img.shape[0], 3, 16, 16, device=device)

            noise.normal_(0, 0.005)
            neg_img.data.add_(noise.data)

            neg_out = model(neg_img, neg_id)
            neg_out.sum().backward()
            neg_img.grad.data.clamp_(-0.01, 0.01)

            neg_img.data.add_(-step_size, neg_img.grad.data)

            neg_img.grad.detach_()
            neg_img.grad.zero_()

            neg_img.data.clamp_(0, 1)

        neg_img = neg_img.detach()

        requires_grad(parameters, True)
        model.train()

        model.zero_grad()

        pos_out = model(pos_img, pos_id)
        neg_out = model(neg_img, neg_id)

        loss = alpha * (pos_out ** 2 + neg_out ** 2)
        loss = loss + (pos_out - neg_out)
        loss = loss.mean()
        loss.backward()

        clip_grad(parameters, optimizer)

        optimizer.step()

        buffer.push(neg_img, neg_id)
        dist = (neg_img.mean((0, 2, 3)) - images.mean((0, 2, 3))).abs().sum().item() + abs(neg_img.std().item() - images.std().item())
        dists.append(dist)
        if i % 5 == 0:
            print(f'{i} loss: {loss.item():.5f} energy+ {pos_out.mean().item():.4f} energy- {neg_out.mean().item():.4f} sample_distance {dist:.4f}')
    first, last = np.mean(dists[:5]), np.mean(dists[-5:])
    print(f"[summary] sample_distance(mean of 5) first={first:.4f} last={last:.4f} decreased={last < first}")


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    model = IGEBM(10).to('cpu')
    train(model)


if __name__ == '__main__':
    main()
