"""WGAN-GP: critic loss with a gradient penalty on interpolates made with requires_grad_(True)
(autograd.grad with create_graph), optimizer_G.zero_grad() every batch, generator every n_critic
batches, sample grid from fake_imgs.data.

Source: eriklindernoren/PyTorch-GAN, implementations/wgan_gp/wgan_gp.py, commit 36d3c77e5ff20ebe0aeefd322326a134a279b93e.
Reduced: MLP widths 16/32, 6x6 images, latent 8, 3 random batches of 8 (see _pgan.py).
"""

import numpy as np
import torch
import torch.autograd as autograd

from corpus._pgan import Discriminator, Generator, dataloader, latent_dim, save_image

Tensor = torch.FloatTensor
lambda_gp, n_critic = 10, 2


def compute_gradient_penalty(D, real_samples, fake_samples):
    alpha = Tensor(np.random.random((real_samples.size(0), 1, 1, 1)))
    interpolates = (alpha * real_samples + ((1 - alpha) * fake_samples)).requires_grad_(True)
    d_interpolates = D(interpolates)
    fake = Tensor(real_samples.shape[0], 1).fill_(1.0)
    gradients = autograd.grad(outputs=d_interpolates, inputs=interpolates, grad_outputs=fake,
                              create_graph=True, retain_graph=True, only_inputs=True)[0]
    gradients = gradients.view(gradients.size(0), -1)
    return ((gradients.norm(2, dim=1) - 1) ** 2).mean()


def build():
    torch.manual_seed(0)
    np.random.seed(0)
    generator = Generator()
    discriminator = Discriminator(sigmoid=False)
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    loader = dataloader(n=4)

    def train():
        batches_done = 0
        for epoch in range(1):
            for i, (imgs, _) in enumerate(loader):
                real_imgs = imgs.type(Tensor)
                optimizer_D.zero_grad()
                z = Tensor(np.random.normal(0, 1, (imgs.shape[0], latent_dim)))
                fake_imgs = generator(z)
                real_validity = discriminator(real_imgs)
                fake_validity = discriminator(fake_imgs)
                gradient_penalty = compute_gradient_penalty(discriminator, real_imgs.data, fake_imgs.data)
                d_loss = -torch.mean(real_validity) + torch.mean(fake_validity) + lambda_gp * gradient_penalty
                d_loss.backward()
                optimizer_D.step()
                optimizer_G.zero_grad()
                if i % n_critic == 0:
                    fake_imgs = generator(z)
                    fake_validity = discriminator(fake_imgs)
                    g_loss = -torch.mean(fake_validity)
                    g_loss.backward()
                    optimizer_G.step()
                    print(d_loss.item(), g_loss.item())
                    if batches_done % 2 == 0:
                        save_image(fake_imgs.data[:25], nrow=5, normalize=True)
                    batches_done += n_critic

    return [generator, discriminator], [optimizer_D, optimizer_G], train


if __name__ == "__main__":
    build()[2]()
