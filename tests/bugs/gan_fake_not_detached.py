"""Vanilla GAN: G step first (BCE against valid), then D on real and on gen_imgs.detach(),
d_loss = (real_loss + fake_loss) / 2, sample grid from gen_imgs.data.

Source: eriklindernoren/PyTorch-GAN, implementations/gan/gan.py, commit 36d3c77e5ff20ebe0aeefd322326a134a279b93e.
Reduced: MLP widths 16/32, 6x6 images, latent 8, 3 random batches of 8 (see _pgan.py).

Mutation: `.detach()` dropped from `gen_imgs` in the discriminator's fake loss, after the generator's backward freed its graph.
Expected: error gradient.backward_twice at `d_loss.backward()`, naming gen_imgs (the tensor to detach).
"""

import numpy as np
import torch

from corpus._pgan import Discriminator, Generator, dataloader, latent_dim, save_image

Tensor = torch.FloatTensor


def build():
    torch.manual_seed(0)
    np.random.seed(0)
    adversarial_loss = torch.nn.BCELoss()
    generator = Generator()
    discriminator = Discriminator()
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    loader = dataloader()

    def train():
        for epoch in range(1):
            for i, (imgs, _) in enumerate(loader):
                valid = Tensor(imgs.size(0), 1).fill_(1.0)
                fake = Tensor(imgs.size(0), 1).fill_(0.0)
                real_imgs = imgs.type(Tensor)
                optimizer_G.zero_grad()
                z = Tensor(np.random.normal(0, 1, (imgs.shape[0], latent_dim)))
                gen_imgs = generator(z)
                g_loss = adversarial_loss(discriminator(gen_imgs), valid)
                g_loss.backward()
                optimizer_G.step()
                optimizer_D.zero_grad()
                real_loss = adversarial_loss(discriminator(real_imgs), valid)
                fake_loss = adversarial_loss(discriminator(gen_imgs), fake)
                d_loss = (real_loss + fake_loss) / 2
                d_loss.backward()  # <- bug
                optimizer_D.step()
                print(d_loss.item(), g_loss.item())
                batches_done = epoch * len(loader) + i
                if batches_done % 2 == 0:
                    save_image(gen_imgs.data[:25], nrow=5, normalize=True)

    return [generator, discriminator], [optimizer_G, optimizer_D], train


if __name__ == "__main__":
    build()[2]()
