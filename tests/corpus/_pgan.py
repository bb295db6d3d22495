"""The small MLP generator and discriminator of eriklindernoren/PyTorch-GAN's gan.py-style
scripts (Linear + BatchNorm1d(out, 0.8) + LeakyReLU blocks, Tanh output), at toy widths, shared
by the corpus loops taken from that repository."""

import torch
import torch.nn as nn

latent_dim, n_classes = 8, 4
img_shape = (1, 6, 6)
img_size = 36


class Generator(nn.Module):
    def __init__(self, in_dim=latent_dim):
        super(Generator, self).__init__()

        def block(in_feat, out_feat, normalize=True):
            layers = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers

        self.model = nn.Sequential(
            *block(in_dim, 16, normalize=False),
            *block(16, 32),
            nn.Linear(32, img_size),
            nn.Tanh(),
        )

    def forward(self, z):
        img = self.model(z)
        img = img.view(img.size(0), *img_shape)
        return img


class Discriminator(nn.Module):
    def __init__(self, sigmoid=True, in_dim=img_size, out_dim=1):
        super(Discriminator, self).__init__()
        layers = [nn.Linear(in_dim, 32), nn.LeakyReLU(0.2, inplace=True), nn.Linear(32, 16),
                  nn.LeakyReLU(0.2, inplace=True), nn.Linear(16, out_dim)]
        if sigmoid:
            layers.append(nn.Sigmoid())
        self.model = nn.Sequential(*layers)

    def forward(self, img):
        img_flat = img.view(img.size(0), -1)
        return self.model(img_flat)


def dataloader(n=3, batch=8, labels=False):
    g = torch.Generator().manual_seed(0)
    out = []
    for _ in range(n):
        imgs = torch.rand(batch, *img_shape, generator=g) * 2 - 1
        out.append((imgs, torch.randint(0, n_classes, (batch,), generator=g) if labels else None))
    return out


def save_image(t, *args, **kwargs):
    """torchvision.utils.save_image's normalize=True path, kept as a tensor (no file)."""
    img = t.clone()
    lo, hi = float(img.min()), float(img.max())
    img.clamp_(min=lo, max=hi)
    img.sub_(lo).div_(max(hi - lo, 1e-5))
    return img.mul(255).add_(0.5).clamp_(0, 255).to(torch.uint8)
