# Source: facebookresearch/synsin, models/layers/normalization.py (bn, BatchNorm_StandingStats, manual_bn, fused_bn), models/layers/blocks.py (ResNet blocks), commit 82ff948f91a779188c467922c8f5144018b40ac8
# Report: https://github.com/facebookresearch/synsin/pull/20
# SynSin refinement network: ResNet encoder / decoder blocks normalised by the BigGAN-style
# batch norm with standing statistics (manual_bn computes the batch mean / variance, the layer
# keeps a running stored_mean / stored_var for evaluation), trained with an L1 reconstruction
# loss. The projected point-cloud features are replaced by synthetic 3x16x16 images with
# missing pixels, the spatial transformer and the GAN / perceptual losses are removed.
import time

import numpy as np
import torch
import torch.nn as nn
from torch.nn.parameter import Parameter

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class BatchNorm_StandingStats(nn.Module):
    def __init__(self, output_size, eps=1e-5, momentum=0.1):
        super().__init__()
        self.output_size = output_size
        # Prepare gain and bias layers
        self.register_parameter("gain", Parameter(torch.ones(output_size)))
        self.register_parameter("bias", Parameter(torch.zeros(output_size)))
        # epsilon to avoid dividing by 0
        self.eps = eps
        # Momentum
        self.momentum = momentum

        self.bn = bn(output_size, self.eps, self.momentum)

    def forward(self, x, y=None):
        gain = self.gain.view(1, -1, 1, 1)
        bias = self.bias.view(1, -1, 1, 1)
        return self.bn(x, gain=gain, bias=bias)


class bn(nn.Module):
    def __init__(self, num_channels, eps=1e-5, momentum=0.1):
        super().__init__()

        # momentum for updating stats
        self.momentum = momentum
        self.eps = eps

        self.register_buffer("stored_mean", torch.zeros(num_channels))
        self.register_buffer("stored_var", torch.ones(num_channels))
        self.register_buffer("accumulation_counter", torch.zeros(1))
        # Accumulate running means and vars
        self.accumulate_standing = False

    # reset standing stats
    def reset_stats(self):
        self.stored_mean[:] = 0
        self.stored_var[:] = 0
        self.accumulation_counter[:] = 0

    def forward(self, x, gain, bias):
        if self.training:
            out, mean, var = manual_bn(
                x, gain, bias, return_mean_var=True, eps=self.eps
            )
            # If accumulating standing stats, increment them
            if self.accumulate_standing:
                self.stored_mean[:] = self.stored_mean + mean.data
                self.stored_var[:] = self.stored_var + var.data
                self.accumulation_counter += 1.0
            # If not accumulating standing stats, take running averages
            else:
                self.stored_mean[:] = (
                    self.stored_mean * (1 - self.momentum)
                    + mean * self.momentum
                )
                self.stored_var[:] = (
                    self.stored_var * (1 - self.momentum) + var * self.momentum
                )
            return out
        # If not in training mode, use the stored statistics
        else:
            mean = self.stored_mean.view(1, -1, 1, 1)
            var = self.stored_var.view(1, -1, 1, 1)
            # If using standing stats, divide them by the accumulation counter
            if self.accumulate_standing:
                mean = mean / self.accumulation_counter
                var = var / self.accumulation_counter
            return fused_bn(x, mean, var, gain, bias, self.eps)


# Fused batchnorm op
def fused_bn(x, mean, var, gain=None, bias=None, eps=1e-5):
    # Apply scale and shift--if gain and bias are provided, fuse them here
    # Prepare scale
    scale = torch.rsqrt(var + eps)
    # If a gain is provided, use it
    if gain is not None:
        scale = scale * gain
    # Prepare shift
    shift = mean * scale
    # If bias is provided, use it
    if bias is not None:
        shift = shift - bias
    return x * scale - shift


# Manual BN
# Calculate means and variances using mean-of-squares minus mean-squared
def manual_bn(x, gain=None, bias=None, return_mean_var=False, eps=1e-5):
    # Cast x to float32 if necessary
    float_x = x.float()
    # Calculate expected value of x (m) and expected value of x**2 (m2)
    # Mean of x
    m = torch.mean(float_x, [0, 2, 3], keepdim=True)
    # Mean of x squared
    m2 = torch.mean(float_x ** 2, [0, 2, 3], keepdim=True)
    # Calculate variance as mean of squared minus mean squared.
    var = m2 - m ** 2
    # Cast back to float 16 if necessary
    var = var.type(x.type())
    m = m.type(x.type())
    # Return mean and variance for updating stored mean/var if requested
    if return_mean_var:
        return fused_bn(x, m, var, gain, bias, eps), m.squeeze(), var.squeeze()
    else:
        return fused_bn(x, m, var, gain, bias, eps)


class ResNet_Block(nn.Module):
    def __init__(self, in_dim, out_dim):
        super().__init__()
        self.norm1 = BatchNorm_StandingStats(in_dim)
        self.conv1 = nn.Conv2d(in_dim, out_dim, 3, padding=1)
        self.norm2 = BatchNorm_StandingStats(out_dim)
        self.conv2 = nn.Conv2d(out_dim, out_dim, 3, padding=1)
        self.skip = nn.Conv2d(in_dim, out_dim, 1) if in_dim != out_dim else nn.Identity()
        self.act = nn.ReLU()

    def forward(self, x):
        h = self.conv1(self.act(self.norm1(x)))
        h = self.conv2(self.act(self.norm2(h)))
        return h + self.skip(x)


class RefineNet(nn.Module):
    def __init__(self, ch=16):
        super().__init__()
        self.inp = nn.Conv2d(4, ch, 3, padding=1)
        self.blocks = nn.Sequential(ResNet_Block(ch, ch), ResNet_Block(ch, 2 * ch), ResNet_Block(2 * ch, ch))
        self.out_norm = BatchNorm_StandingStats(ch)
        self.out = nn.Conv2d(ch, 3, 3, padding=1)

    def forward(self, x):
        return torch.tanh(self.out(torch.relu(self.out_norm(self.blocks(self.inp(x))))))


def make_images(n, rng):
    yy, xx = np.mgrid[0:16, 0:16] / 15.0
    imgs = []
    for _ in range(n):
        f = rng.uniform(1, 3, size=3)
        p = rng.uniform(0, 2 * np.pi, size=3)
        img = np.stack([np.sin(f[c] * np.pi * (xx + yy * (c - 1)) + p[c]) for c in range(3)])
        imgs.append(img)
    imgs = torch.tensor(np.stack(imgs), dtype=torch.float32) * 0.8
    mask = torch.tensor(rng.random((n, 1, 16, 16)) > 0.35, dtype=torch.float32)
    return torch.cat([imgs * mask, mask], 1), imgs


def autograd_nodes_held(model):
    """Autograd nodes reachable from the module buffers (what the buffers keep alive)."""
    seen = set()
    stack = [b.grad_fn for b in model.buffers() if b.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(nf for nf, _ in fn.next_functions)
    return len(seen)


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2**20


if __name__ == "__main__":
    rng = np.random.default_rng(0)
    x_train, y_train = make_images(512, rng)
    x_val, y_val = make_images(128, rng)
    model = RefineNet()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3, betas=(0.0, 0.999))
    criterion = nn.L1Loss()
    batch_size = 16
    start = time.time()
    rss0 = rss_mb()
    for epoch in range(4):
        model.train()
        perm = torch.randperm(len(x_train))
        total = 0.0
        for i in range(0, len(x_train), batch_size):
            idx = perm[i:i + batch_size]
            pred = model(x_train[idx])
            loss = criterion(pred, y_train[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        model.eval()
        with torch.no_grad():
            val = criterion(model(x_val), y_val).item()
        print("epoch %d train L1 %.4f val L1 %.4f | autograd nodes held by bn buffers %d, rss +%.1f MB, %.1fs"
              % (epoch, total / (len(x_train) // batch_size), val, autograd_nodes_held(model), rss_mb() - rss0,
                 time.time() - start))
