"""Conditional GAN: label embeddings concatenated to the noise (G) and to the flattened image (D),
MSELoss adversarial loss, G step on random gen_labels, D on real (with labels) and on
gen_imgs.detach() (with gen_labels), d_loss = (d_real_loss + d_fake_loss) / 2, and sample_image()
drawing a labelled grid with grad on in train() mode.

Source: eriklindernoren/PyTorch-GAN, implementations/cgan/cgan.py, commit 36d3c77e5ff20ebe0aeefd322326a134a279b93e.
Reduced: MLP widths 16/32, 6x6 images, latent 8, 4 classes, 3 random batches of 8.
"""

import numpy as np
import torch
import torch.nn as nn

from corpus._pgan import dataloader, img_shape, latent_dim, n_classes, save_image

FloatTensor, LongTensor = torch.FloatTensor, torch.LongTensor


class Generator(nn.Module):
    def __init__(self):
        super(Generator, self).__init__()
        self.label_emb = nn.Embedding(n_classes, n_classes)

        def block(in_feat, out_feat, normalize=True):
            layers = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.2, inplace=True))
            return layers

        self.model = nn.Sequential(*block(latent_dim + n_classes, 16, normalize=False), *block(16, 32),
                                   nn.Linear(32, int(np.prod(img_shape))), nn.Tanh())

    def forward(self, noise, labels):
        gen_input = torch.cat((self.label_emb(labels), noise), -1)
        img = self.model(gen_input)
        return img.view(img.size(0), *img_shape)


class Discriminator(nn.Module):
    def __init__(self):
        super(Discriminator, self).__init__()
        self.label_embedding = nn.Embedding(n_classes, n_classes)
        self.model = nn.Sequential(nn.Linear(n_classes + int(np.prod(img_shape)), 32), nn.LeakyReLU(0.2, inplace=True),
                                   nn.Linear(32, 16), nn.Dropout(0.4), nn.LeakyReLU(0.2, inplace=True), nn.Linear(16, 1))

    def forward(self, img, labels):
        d_in = torch.cat((img.view(img.size(0), -1), self.label_embedding(labels)), -1)
        return self.model(d_in)


def build():
    torch.manual_seed(0)
    np.random.seed(0)
    adversarial_loss = torch.nn.MSELoss()
    generator, discriminator = Generator(), Discriminator()
    optimizer_G = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    optimizer_D = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    loader = dataloader(labels=True)

    def sample_image(n_row):
        z = FloatTensor(np.random.normal(0, 1, (n_row ** 2, latent_dim)))
        labels = LongTensor(np.array([num % n_classes for _ in range(n_row) for num in range(n_row)]))
        gen_imgs = generator(z, labels)
        return save_image(gen_imgs.data, nrow=n_row, normalize=True)

    def train():
        for epoch in range(1):
            for i, (imgs, labels) in enumerate(loader):
                batch_size = imgs.shape[0]
                valid = FloatTensor(batch_size, 1).fill_(1.0)
                fake = FloatTensor(batch_size, 1).fill_(0.0)
                real_imgs = imgs.type(FloatTensor)
                labels = labels.type(LongTensor)
                optimizer_G.zero_grad()
                z = FloatTensor(np.random.normal(0, 1, (batch_size, latent_dim)))
                gen_labels = LongTensor(np.random.randint(0, n_classes, batch_size))
                gen_imgs = generator(z, gen_labels)
                validity = discriminator(gen_imgs, gen_labels)
                g_loss = adversarial_loss(validity, valid)
                g_loss.backward()
                optimizer_G.step()
                optimizer_D.zero_grad()
                validity_real = discriminator(real_imgs, labels)
                d_real_loss = adversarial_loss(validity_real, valid)
                validity_fake = discriminator(gen_imgs.detach(), gen_labels)
                d_fake_loss = adversarial_loss(validity_fake, fake)
                d_loss = (d_real_loss + d_fake_loss) / 2
                d_loss.backward()
                optimizer_D.step()
                print(d_loss.item(), g_loss.item())
                if i % 2 == 0:
                    sample_image(n_row=4)

    return [generator, discriminator], [optimizer_G, optimizer_D], train


if __name__ == "__main__":
    build()[2]()
