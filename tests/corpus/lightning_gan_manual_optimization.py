"""Lightning GAN with manual optimization: automatic_optimization = False, two optimizers from
configure_optimizers, toggle_optimizer / untoggle_optimizer around each update, manual_backward,
binary_cross_entropy_with_logits, D on self(z).detach(), and a sample grid drawn with grad on
in train() mode at the end of every epoch.

Source: Lightning-AI/pytorch-lightning, examples/pytorch/domain_templates/generative_adversarial_net.py,
commit 7f0c3436cd3f6ad3753125672024fc415cbcb414.
Reduced: 1x6x6 images, latent 8, MLP widths 16/32, 3 batches of 8; the grid stays a tensor.
"""

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

NEEDS = ("lightning",)


class Generator(nn.Module):
    def __init__(self, latent_dim=8, img_shape=(1, 6, 6)):
        super().__init__()
        self.img_shape = img_shape

        def block(in_feat, out_feat, normalize=True):
            layers = [nn.Linear(in_feat, out_feat)]
            if normalize:
                layers.append(nn.BatchNorm1d(out_feat, 0.8))
            layers.append(nn.LeakyReLU(0.01, inplace=True))
            return layers

        self.model = nn.Sequential(*block(latent_dim, 16, normalize=False), *block(16, 32),
                                   nn.Linear(32, int(np.prod(img_shape))), nn.Tanh())

    def forward(self, z):
        img = self.model(z)
        return img.view(img.size(0), *self.img_shape)


class Discriminator(nn.Module):
    def __init__(self, img_shape=(1, 6, 6)):
        super().__init__()
        self.model = nn.Sequential(nn.Linear(int(np.prod(img_shape)), 32), nn.LeakyReLU(0.2, inplace=True),
                                   nn.Linear(32, 16), nn.LeakyReLU(0.2, inplace=True), nn.Linear(16, 1))

    def forward(self, img):
        return self.model(img.view(img.size(0), -1))


def build():
    from lightning.pytorch import LightningModule

    from corpus._pl import trainer

    class GAN(LightningModule):
        def __init__(self, img_shape=(1, 6, 6), lr=0.0002, b1=0.5, b2=0.999, latent_dim=8):
            super().__init__()
            self.save_hyperparameters()
            self.automatic_optimization = False
            self.generator = Generator(latent_dim=self.hparams.latent_dim, img_shape=img_shape)
            self.discriminator = Discriminator(img_shape=img_shape)
            self.validation_z = torch.randn(8, self.hparams.latent_dim)

        def forward(self, z):
            return self.generator(z)

        @staticmethod
        def adversarial_loss(y_hat, y):
            return F.binary_cross_entropy_with_logits(y_hat, y)

        def training_step(self, batch):
            imgs, _ = batch
            opt_g, opt_d = self.optimizers()
            z = torch.randn(imgs.shape[0], self.hparams.latent_dim).type_as(imgs)
            valid = torch.ones(imgs.size(0), 1).type_as(imgs)
            self.toggle_optimizer(opt_g)
            g_loss = self.adversarial_loss(self.discriminator(self(z)), valid)
            opt_g.zero_grad()
            self.manual_backward(g_loss)
            opt_g.step()
            self.untoggle_optimizer(opt_g)
            valid = torch.ones(imgs.size(0), 1).type_as(imgs)
            self.toggle_optimizer(opt_d)
            real_loss = self.adversarial_loss(self.discriminator(imgs), valid)
            fake = torch.zeros(imgs.size(0), 1).type_as(imgs)
            fake_loss = self.adversarial_loss(self.discriminator(self(z).detach()), fake)
            d_loss = (real_loss + fake_loss) / 2
            opt_d.zero_grad()
            self.manual_backward(d_loss)
            opt_d.step()
            self.untoggle_optimizer(opt_d)
            self.log_dict({"d_loss": d_loss, "g_loss": g_loss})

        def configure_optimizers(self):
            lr, b1, b2 = self.hparams.lr, self.hparams.b1, self.hparams.b2
            opt_g = torch.optim.Adam(self.generator.parameters(), lr=lr, betas=(b1, b2))
            opt_d = torch.optim.Adam(self.discriminator.parameters(), lr=lr, betas=(b1, b2))
            return opt_g, opt_d

        def on_train_epoch_end(self):
            z = self.validation_z.type_as(self.generator.model[0].weight)
            sample_imgs = self(z)
            self.grid = torch.cat(list(sample_imgs.detach()), dim=-1)

    torch.manual_seed(0)
    model = GAN()
    ds = TensorDataset(torch.rand(24, 1, 6, 6) * 2 - 1, torch.zeros(24))

    def train():
        trainer().fit(model, DataLoader(ds, batch_size=8))

    return [model], [], train


if __name__ == "__main__":
    build()[2]()
