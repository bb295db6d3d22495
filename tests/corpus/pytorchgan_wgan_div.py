"""WGAN-div: real images built with requires_grad=True, gradients of the critic w.r.t. real
and fake images (autograd.grad, create_graph) in a divergence penalty, generator every n_critic.

Source: eriklindernoren/PyTorch-GAN, implementations/wgan_div/wgan_div.py, commit 36d3c77e5ff20ebe0aeefd322326a134a279b93e.
Reduced: MLP widths 16/32, 6x6 images, latent 8, 3 random batches of 8 (see _pgan.py).
"""

import numpy as np
import torch
import torch.autograd as autograd

from corpus._pgan import Discriminator, Generator, dataloader, latent_dim, save_image

Tensor = torch.FloatTensor
k, p, n_critic = 2, 6, 2


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
                real_imgs = torch.autograd.Variable(imgs.type(Tensor), requires_grad=True)
                optimizer_D.zero_grad()
                z = Tensor(np.random.normal(0, 1, (imgs.shape[0], latent_dim)))
                fake_imgs = generator(z)
                real_validity = discriminator(real_imgs)
                fake_validity = discriminator(fake_imgs)
                real_grad_out = Tensor(real_imgs.size(0), 1).fill_(1.0)
                real_grad = autograd.grad(real_validity, real_imgs, real_grad_out, create_graph=True,
                                          retain_graph=True, only_inputs=True)[0]
                real_grad_norm = real_grad.view(real_grad.size(0), -1).pow(2).sum(1) ** (p / 2)
                fake_grad_out = Tensor(fake_imgs.size(0), 1).fill_(1.0)
                fake_grad = autograd.grad(fake_validity, fake_imgs, fake_grad_out, create_graph=True,
                                          retain_graph=True, only_inputs=True)[0]
                fake_grad_norm = fake_grad.view(fake_grad.size(0), -1).pow(2).sum(1) ** (p / 2)
                div_gp = torch.mean(real_grad_norm + fake_grad_norm) * k / 2
                d_loss = -torch.mean(real_validity) + torch.mean(fake_validity) + div_gp
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
