"""Wasserstein GAN with weight clipping: critic every batch on generator(z).detach(), weights
clamped through p.data after its step, generator every n_critic batches (RMSprop).

Source: eriklindernoren/PyTorch-GAN, implementations/wgan/wgan.py, commit 36d3c77e5ff20ebe0aeefd322326a134a279b93e.
Reduced: MLP widths 16/32, 6x6 images, latent 8, 3 random batches of 8 (see _pgan.py).
"""

import numpy as np
import torch

from corpus._pgan import Discriminator, Generator, dataloader, latent_dim, save_image

Tensor = torch.FloatTensor
n_critic, clip_value = 2, 0.01


def build():
    torch.manual_seed(0)
    np.random.seed(0)
    generator = Generator()
    discriminator = Discriminator(sigmoid=False)
    optimizer_G = torch.optim.RMSprop(generator.parameters(), lr=5e-5)
    optimizer_D = torch.optim.RMSprop(discriminator.parameters(), lr=5e-5)
    loader = dataloader(n=4)

    def train():
        batches_done = 0
        gen_imgs = None
        for epoch in range(1):
            for i, (imgs, _) in enumerate(loader):
                real_imgs = imgs.type(Tensor)
                optimizer_D.zero_grad()
                z = Tensor(np.random.normal(0, 1, (imgs.shape[0], latent_dim)))
                fake_imgs = generator(z).detach()
                loss_D = -torch.mean(discriminator(real_imgs)) + torch.mean(discriminator(fake_imgs))
                loss_D.backward()
                optimizer_D.step()
                for p in discriminator.parameters():
                    p.data.clamp_(-clip_value, clip_value)
                if i % n_critic == 0:
                    optimizer_G.zero_grad()
                    gen_imgs = generator(z)
                    loss_G = -torch.mean(discriminator(gen_imgs))
                    loss_G.backward()
                    optimizer_G.step()
                    print(loss_D.item(), loss_G.item())
                if batches_done % 2 == 0:
                    save_image(gen_imgs.data[:25], nrow=5, normalize=True)
                batches_done += 1

    return [generator, discriminator], [optimizer_D, optimizer_G], train


if __name__ == "__main__":
    build()[2]()
