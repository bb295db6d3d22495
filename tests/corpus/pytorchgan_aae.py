"""Adversarial autoencoder: an encoder with a reparameterization that draws its noise with numpy,
a decoder, a discriminator on the latent code; optimizer_G over itertools.chain(encoder, decoder)
parameters, g_loss = 0.001 * adversarial + 0.999 * L1 reconstruction, then D on prior samples vs
encoded_imgs.detach().

Source: eriklindernoren/PyTorch-GAN, implementations/aae/aae.py, commit 36d3c77e5ff20ebe0aeefd322326a134a279b93e.
Reduced: 6x6 images, latent 4, widths 16, 3 random batches of 8; the sample grid stays a tensor.
"""

import itertools

import numpy as np
import torch
import torch.nn as nn

from corpus._pgan import dataloader, img_shape, img_size, save_image

Tensor = torch.FloatTensor
latent_dim = 4


def reparameterization(mu, logvar):
    std = torch.exp(logvar / 2)
    sampled_z = Tensor(np.random.normal(0, 1, (mu.size(0), latent_dim)))
    return sampled_z * std + mu


class Encoder(nn.Module):
    def __init__(self):
        super(Encoder, self).__init__()
        self.model = nn.Sequential(nn.Linear(img_size, 16), nn.LeakyReLU(0.2, inplace=True), nn.Linear(16, 16),
                                   nn.BatchNorm1d(16), nn.LeakyReLU(0.2, inplace=True))
        self.mu = nn.Linear(16, latent_dim)
        self.logvar = nn.Linear(16, latent_dim)

    def forward(self, img):
        x = self.model(img.view(img.shape[0], -1))
        return reparameterization(self.mu(x), self.logvar(x))


class Decoder(nn.Module):
    def __init__(self):
        super(Decoder, self).__init__()
        self.model = nn.Sequential(nn.Linear(latent_dim, 16), nn.LeakyReLU(0.2, inplace=True), nn.Linear(16, 16),
                                   nn.BatchNorm1d(16), nn.LeakyReLU(0.2, inplace=True), nn.Linear(16, img_size), nn.Tanh())

    def forward(self, z):
        return self.model(z).view(z.shape[0], *img_shape)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.model = nn.Sequential(nn.Linear(latent_dim, 16), nn.LeakyReLU(0.2, inplace=True), nn.Linear(16, 8),
                                   nn.LeakyReLU(0.2, inplace=True), nn.Linear(8, 1), nn.Sigmoid())

    def forward(self, z):
        return self.model(z)


def build():
    torch.manual_seed(0)
    np.random.seed(0)
    adversarial_loss, pixelwise_loss = torch.nn.BCELoss(), torch.nn.L1Loss()
    encoder, decoder, discriminator = Encoder(), Decoder(), Discriminator()
    optimizer_G = torch.optim.Adam(itertools.chain(encoder.parameters(), decoder.parameters()), lr=2e-4, betas=(0.5, 0.999))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    loader = dataloader()

    def sample_image(n_row):
        z = Tensor(np.random.normal(0, 1, (n_row ** 2, latent_dim)))
        return save_image(decoder(z).data, nrow=n_row, normalize=True)

    def train():
        for epoch in range(1):
            for i, (imgs, _) in enumerate(loader):
                valid = Tensor(imgs.shape[0], 1).fill_(1.0)
                fake = Tensor(imgs.shape[0], 1).fill_(0.0)
                real_imgs = imgs.type(Tensor)
                optimizer_G.zero_grad()
                encoded_imgs = encoder(real_imgs)
                decoded_imgs = decoder(encoded_imgs)
                g_loss = 0.001 * adversarial_loss(discriminator(encoded_imgs), valid) + 0.999 * pixelwise_loss(
                    decoded_imgs, real_imgs)
                g_loss.backward()
                optimizer_G.step()
                optimizer_D.zero_grad()
                z = Tensor(np.random.normal(0, 1, (imgs.shape[0], latent_dim)))
                real_loss = adversarial_loss(discriminator(z), valid)
                fake_loss = adversarial_loss(discriminator(encoded_imgs.detach()), fake)
                d_loss = 0.5 * (real_loss + fake_loss)
                d_loss.backward()
                optimizer_D.step()
                print(d_loss.item(), g_loss.item())
                if i % 2 == 0:
                    sample_image(n_row=3)

    return [encoder, decoder, discriminator], [optimizer_G, optimizer_D], train


if __name__ == "__main__":
    build()[2]()
