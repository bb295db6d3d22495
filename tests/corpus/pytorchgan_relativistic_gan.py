"""Relativistic average GAN: the generator's loss compares fake predictions with the detached real
predictions' mean (then, as the script does, is overwritten by the plain loss), the discriminator's
relativistic losses on real - mean(fake) and fake - mean(real), BCEWithLogitsLoss.

Source: eriklindernoren/PyTorch-GAN, implementations/relativistic_gan/relativistic_gan.py, commit 36d3c77e5ff20ebe0aeefd322326a134a279b93e.
Reduced: MLP widths 16/32 (see _pgan.py), 6x6 images, latent 8, 3 random batches of 8.
"""

import numpy as np
import torch

from corpus._pgan import Discriminator, Generator, dataloader, latent_dim, save_image

Tensor = torch.FloatTensor
rel_avg_gan = True


def build():
    torch.manual_seed(0)
    np.random.seed(0)
    adversarial_loss = torch.nn.BCEWithLogitsLoss()
    generator, discriminator = Generator(), Discriminator(sigmoid=False)
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    loader = dataloader()

    def train():
        for epoch in range(1):
            for i, (imgs, _) in enumerate(loader):
                valid = Tensor(imgs.shape[0], 1).fill_(1.0)
                fake = Tensor(imgs.shape[0], 1).fill_(0.0)
                real_imgs = imgs.type(Tensor)
                optimizer_G.zero_grad()
                z = Tensor(np.random.normal(0, 1, (imgs.shape[0], latent_dim)))
                gen_imgs = generator(z)
                real_pred = discriminator(real_imgs).detach()
                fake_pred = discriminator(gen_imgs)
                if rel_avg_gan:
                    g_loss = adversarial_loss(fake_pred - real_pred.mean(0, keepdim=True), valid)
                else:
                    g_loss = adversarial_loss(fake_pred - real_pred, valid)
                g_loss = adversarial_loss(discriminator(gen_imgs), valid)
                g_loss.backward()
                optimizer_G.step()
                optimizer_D.zero_grad()
                real_pred = discriminator(real_imgs)
                fake_pred = discriminator(gen_imgs.detach())
                if rel_avg_gan:
                    real_loss = adversarial_loss(real_pred - fake_pred.mean(0, keepdim=True), valid)
                    fake_loss = adversarial_loss(fake_pred - real_pred.mean(0, keepdim=True), fake)
                else:
                    real_loss = adversarial_loss(real_pred - fake_pred, valid)
                    fake_loss = adversarial_loss(fake_pred - real_pred, fake)
                d_loss = (real_loss + fake_loss) / 2
                d_loss.backward()
                optimizer_D.step()
                print(d_loss.item(), g_loss.item())
                if i % 2 == 0:
                    save_image(gen_imgs.data[:25], nrow=5, normalize=True)

    return [generator, discriminator], [optimizer_G, optimizer_D], train


if __name__ == "__main__":
    build()[2]()
