# Source: lucidrains/siren-pytorch, siren_pytorch/siren_pytorch.py (Sine, Siren, SirenNet, Modulator, SirenWrapper), commit 3555d895b213d243e8aa4db1913d01154cdcdd6b
# Report: https://github.com/lucidrains/siren-pytorch/blob/3555d895b213d243e8aa4db1913d01154cdcdd6b/siren_pytorch/siren_pytorch.py
# SIREN implicit image representation: sine-activated MLP with w0 = 30 on the first layer and the
# paper's uniform initialisation, wrapped over a coordinate grid, modulated per image by a
# latent vector through the Modulator (an auto-decoder: one learnable latent per image, as in the
# README). einops is not installed here, so its three rearrange calls are written with view /
# reshape / permute. Four synthetic 32x32 RGB images replace real ones.
import time

import numpy as np
import math
import torch
from torch import nn
import torch.nn.functional as F


# helpers

def exists(val):
    return val is not None

def cast_tuple(val, repeat = 1):
    return val if isinstance(val, tuple) else ((val,) * repeat)

# sin activation

class Sine(nn.Module):
    def __init__(self, w0 = 1.):
        super().__init__()
        self.w0 = w0
    def forward(self, x):
        return torch.sin(self.w0 * x)

# siren layer

class Siren(nn.Module):
    def __init__(
        self,
        dim_in,
        dim_out,
        w0 = 1.,
        c = 6.,
        is_first = False,
        use_bias = True,
        activation = None,
        dropout = 0.
    ):
        super().__init__()
        self.dim_in = dim_in
        self.is_first = is_first

        weight = torch.zeros(dim_out, dim_in)
        bias = torch.zeros(dim_out) if use_bias else None
        self.init_(weight, bias, c = c, w0 = w0)

        self.weight = nn.Parameter(weight)
        self.bias = nn.Parameter(bias) if use_bias else None
        self.activation = Sine(w0) if activation is None else activation
        self.dropout = nn.Dropout(dropout)

    def init_(self, weight, bias, c, w0):
        dim = self.dim_in

        w_std = (1 / dim) if self.is_first else (math.sqrt(c / dim) / w0)
        weight.uniform_(-w_std, w_std)

        if exists(bias):
            bias.uniform_(-w_std, w_std)

    def forward(self, x):
        out =  F.linear(x, self.weight, self.bias)
        out = self.activation(out)
        out = self.dropout(out)
        return out

# siren network

class SirenNet(nn.Module):
    def __init__(
        self,
        dim_in,
        dim_hidden,
        dim_out,
        num_layers,
        w0 = 1.,
        w0_initial = 30.,
        use_bias = True,
        final_activation = None,
        dropout = 0.
    ):
        super().__init__()
        self.num_layers = num_layers
        self.dim_hidden = dim_hidden

        self.layers = nn.ModuleList([])
        for ind in range(num_layers):
            is_first = ind == 0
            layer_w0 = w0_initial if is_first else w0
            layer_dim_in = dim_in if is_first else dim_hidden

            layer = Siren(
                dim_in = layer_dim_in,
                dim_out = dim_hidden,
                w0 = layer_w0,
                use_bias = use_bias,
                is_first = is_first,
                dropout = dropout
            )

            self.layers.append(layer)

        final_activation = nn.Identity() if not exists(final_activation) else final_activation
        self.last_layer = Siren(dim_in = dim_hidden, dim_out = dim_out, w0 = w0, use_bias = use_bias, activation = final_activation)

    def forward(self, x, mods = None):
        mods = cast_tuple(mods, self.num_layers)

        for layer, mod in zip(self.layers, mods):
            x = layer(x)

            if exists(mod):
                x *= mod.view(1, -1)

        return self.last_layer(x)

# modulatory feed forward

class Modulator(nn.Module):
    def __init__(self, dim_in, dim_hidden, num_layers):
        super().__init__()
        self.layers = nn.ModuleList([])

        for ind in range(num_layers):
            is_first = ind == 0
            dim = dim_in if is_first else (dim_hidden + dim_in)

            self.layers.append(nn.Sequential(
                nn.Linear(dim, dim_hidden),
                nn.ReLU()
            ))

    def forward(self, z):
        x = z
        hiddens = []

        for layer in self.layers:
            x = layer(x)
            hiddens.append(x)
            x = torch.cat((x, z))

        return tuple(hiddens)

# wrapper

class SirenWrapper(nn.Module):
    def __init__(self, net, image_width, image_height, latent_dim = None):
        super().__init__()
        assert isinstance(net, SirenNet), 'SirenWrapper must receive a Siren network'

        self.net = net
        self.image_width = image_width
        self.image_height = image_height

        self.modulator = None
        if exists(latent_dim):
            self.modulator = Modulator(
                dim_in = latent_dim,
                dim_hidden = net.dim_hidden,
                num_layers = net.num_layers
            )

        tensors = [torch.linspace(-1, 1, steps = image_height), torch.linspace(-1, 1, steps = image_width)]
        mgrid = torch.stack(torch.meshgrid(*tensors, indexing = 'ij'), dim=-1)
        mgrid = mgrid.reshape(-1, mgrid.shape[-1])
        self.register_buffer('grid', mgrid)

    def forward(self, img = None, *, latent = None):
        modulate = exists(self.modulator)
        assert not (modulate ^ exists(latent)), 'latent vector must be only supplied if `latent_dim` was passed in on instantiation'

        mods = self.modulator(latent) if modulate else None

        coords = self.grid.clone().detach().requires_grad_()
        out = self.net(coords, mods)
        out = out.reshape(self.image_height, self.image_width, -1).permute(2, 0, 1).unsqueeze(0)

        if exists(img):
            return F.mse_loss(img, out)

        return out

# training program


def make_images(n, size, rng):
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1)
    imgs = []
    for _ in range(n):
        f = rng.uniform(1, 4, size=(3, 2))
        p = rng.uniform(0, 2 * np.pi, size=3)
        cx, cy, r = rng.uniform(0.3, 0.7), rng.uniform(0.3, 0.7), rng.uniform(0.15, 0.3)
        disc = ((xx - cx) ** 2 + (yy - cy) ** 2 < r ** 2).astype(np.float64)
        img = np.stack([0.5 * np.sin(2 * np.pi * (f[c, 0] * xx + f[c, 1] * yy) + p[c]) + 0.4 * disc for c in range(3)])
        imgs.append(img)
    return torch.tensor(np.stack(imgs), dtype=torch.float32)


if __name__ == '__main__':
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    imgs = make_images(4, 32, rng)

    net = SirenNet(dim_in=2, dim_hidden=64, dim_out=3, num_layers=3, w0_initial=30.)
    wrapper = SirenWrapper(net, latent_dim=32, image_width=32, image_height=32)
    latents = nn.ParameterList([nn.Parameter(torch.zeros(32).normal_(0, 1e-2)) for _ in imgs])
    opt = torch.optim.Adam(list(wrapper.parameters()) + list(latents.parameters()), lr=1e-3)

    start = time.time()
    for step in range(1, 301):
        total = 0.
        for img, latent in zip(imgs, latents):
            loss = wrapper(img.unsqueeze(0), latent=latent)
            opt.zero_grad()
            loss.backward()
            opt.step()
            total += loss.item()
        if step % 50 == 0:
            with torch.no_grad():
                mse = [F.mse_loss(wrapper(latent=lat), img.unsqueeze(0)).item() for img, lat in zip(imgs, latents)]
            psnr = [10 * math.log10(4.0 / m) for m in mse]
            print('step %d train mse %.5f | psnr per image %s (%.1fs)'
                  % (step, total / len(imgs), ' '.join('%.1f' % p for p in psnr), time.time() - start))
