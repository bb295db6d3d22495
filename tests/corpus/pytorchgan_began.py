"""BEGAN: an autoencoder discriminator, L1 reconstruction losses, the equilibrium term k
updated from diff.item() after the D step, convergence measure M from .data.

Source: eriklindernoren/PyTorch-GAN, implementations/began/began.py, commit 36d3c77e5ff20ebe0aeefd322326a134a279b93e.
Reduced: MLP widths 16/32, 6x6 images, latent 8, 3 random batches of 8 (see _pgan.py).
"""

import numpy as np
import torch
import torch.nn as nn

from corpus._pgan import Generator, dataloader, img_size, img_shape, latent_dim, save_image

Tensor = torch.FloatTensor


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.down = nn.Sequential(nn.Linear(img_size, 16), nn.ReLU())
        self.fc = nn.Sequential(nn.Linear(16, 8), nn.BatchNorm1d(8, 0.8), nn.ReLU(inplace=True),
                                nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(inplace=True))
        self.up = nn.Sequential(nn.Linear(16, img_size))

    def forward(self, img):
        out = self.down(img.view(img.size(0), -1))
        out = self.fc(out)
        return self.up(out).view(img.size(0), *img_shape)


def build():
    torch.manual_seed(0)
    np.random.seed(0)
    generator = Generator()
    discriminator = Discriminator()
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    loader = dataloader()
    gamma, lambda_k = 0.75, 0.001

    def train():
        k = 0.0
        for epoch in range(1):
            for i, (imgs, _) in enumerate(loader):
                real_imgs = imgs.type(Tensor)
                optimizer_G.zero_grad()
                z = Tensor(np.random.normal(0, 1, (imgs.shape[0], latent_dim)))
                gen_imgs = generator(z)
                g_loss = torch.mean(torch.abs(discriminator(gen_imgs) - gen_imgs))
                g_loss.backward()
                optimizer_G.step()
                optimizer_D.zero_grad()
                d_real = discriminator(real_imgs)
                d_fake = discriminator(gen_imgs.detach())
                d_loss_real = torch.mean(torch.abs(d_real - real_imgs))
                d_loss_fake = torch.mean(torch.abs(d_fake - gen_imgs.detach()))
                d_loss = d_loss_real - k * d_loss_fake
                d_loss.backward()
                optimizer_D.step()
                diff = torch.mean(gamma * d_loss_real - d_loss_fake)
                k = k + lambda_k * diff.item()
                k = min(max(k, 0), 1)
                M = (d_loss_real + torch.abs(diff)).data
                print(d_loss.item(), g_loss.item(), float(M), k)
                if i % 2 == 0:
                    save_image(gen_imgs.data[:25], nrow=5, normalize=True)

    return [generator, discriminator], [optimizer_G, optimizer_D], train


if __name__ == "__main__":
    build()[2]()
