# Source: 1Konny/Beta-VAE, model.py, solver.py, main.py, run_dsprites_B_gamma100_z10.sh, commit 977a1ece88e190dd8a556b4e2efb665f759d0772
# https://github.com/1Konny/Beta-VAE
#
# Beta-VAE with the controlled-capacity objective of Burgess et al. (--objective B --model B): the loss is
# recon + gamma * |KL - C| where the target capacity C grows linearly with the global iteration up to C_max
# (so the KL term pushes the KL UP towards C while C is above it); Bernoulli decoder: BCE-with-logits summed over
# pixels and divided by the batch size; KL summed over z and averaged over the batch (mean(0, True)); logvar
# halved and exponentiated for the std; kaiming init; Adam(5e-4, betas 0.9/0.999).
# Adaptation: dSprites is not downloaded: 2048 synthetic 64x64 binary sprites (square/ellipse/triangle at random
# scale and position); torchvision/visdom/tqdm/checkpointing dropped; Variable -> tensors, size_average=False ->
# reduction='sum', init.kaiming_normal -> kaiming_normal_, .data[0] -> .item(); run script constants
# gamma 100, C_max 20, z_dim 10, batch 64, lr 5e-4 kept; C_stop_iter 1e5 -> 70, max_iter 1.5e6 -> 100,
# display_step 10000 -> 20.
import warnings

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

warnings.filterwarnings("ignore")


# ---------------------------------------------------------------- model.py
def reparametrize(mu, logvar):
    std = logvar.div(2).exp()
    eps = std.data.new(std.size()).normal_()
    return mu + std*eps


class View(nn.Module):
    def __init__(self, size):
        super(View, self).__init__()
        self.size = size

    def forward(self, tensor):
        return tensor.view(self.size)


class BetaVAE_B(nn.Module):
    """Model proposed in understanding beta-VAE paper(Burgess et al, arxiv:1804.03599, 2018)."""

    def __init__(self, z_dim=10, nc=1):
        super(BetaVAE_B, self).__init__()
        self.nc = nc
        self.z_dim = z_dim

        self.encoder = nn.Sequential(
            nn.Conv2d(nc, 32, 4, 2, 1),          # B,  32, 32, 32
            nn.ReLU(True),
            nn.Conv2d(32, 32, 4, 2, 1),          # B,  32, 16, 16
            nn.ReLU(True),
            nn.Conv2d(32, 32, 4, 2, 1),          # B,  32,  8,  8
            nn.ReLU(True),
            nn.Conv2d(32, 32, 4, 2, 1),          # B,  32,  4,  4
            nn.ReLU(True),
            View((-1, 32*4*4)),                  # B, 512
            nn.Linear(32*4*4, 256),              # B, 256
            nn.ReLU(True),
            nn.Linear(256, 256),                 # B, 256
            nn.ReLU(True),
            nn.Linear(256, z_dim*2),             # B, z_dim*2
        )

        self.decoder = nn.Sequential(
            nn.Linear(z_dim, 256),               # B, 256
            nn.ReLU(True),
            nn.Linear(256, 256),                 # B, 256
            nn.ReLU(True),
            nn.Linear(256, 32*4*4),              # B, 512
            nn.ReLU(True),
            View((-1, 32, 4, 4)),                # B,  32,  4,  4
            nn.ConvTranspose2d(32, 32, 4, 2, 1), # B,  32,  8,  8
            nn.ReLU(True),
            nn.ConvTranspose2d(32, 32, 4, 2, 1), # B,  32, 16, 16
            nn.ReLU(True),
            nn.ConvTranspose2d(32, 32, 4, 2, 1), # B,  32, 32, 32
            nn.ReLU(True),
            nn.ConvTranspose2d(32, nc, 4, 2, 1), # B,  nc, 64, 64
        )
        self.weight_init()

    def weight_init(self):
        for block in self._modules:
            for m in self._modules[block]:
                kaiming_init(m)

    def forward(self, x):
        distributions = self._encode(x)
        mu = distributions[:, :self.z_dim]
        logvar = distributions[:, self.z_dim:]
        z = reparametrize(mu, logvar)
        x_recon = self._decode(z).view(x.size())

        return x_recon, mu, logvar

    def _encode(self, x):
        return self.encoder(x)

    def _decode(self, z):
        return self.decoder(z)


def kaiming_init(m):
    if isinstance(m, (nn.Linear, nn.Conv2d)):
        init.kaiming_normal_(m.weight)
        if m.bias is not None:
            m.bias.data.fill_(0)
    elif isinstance(m, (nn.BatchNorm1d, nn.BatchNorm2d)):
        m.weight.data.fill_(1)
        if m.bias is not None:
            m.bias.data.fill_(0)


# ---------------------------------------------------------------- solver.py
def reconstruction_loss(x, x_recon, distribution):
    batch_size = x.size(0)
    assert batch_size != 0

    if distribution == 'bernoulli':
        recon_loss = F.binary_cross_entropy_with_logits(x_recon, x, reduction='sum').div(batch_size)
    elif distribution == 'gaussian':
        x_recon = torch.sigmoid(x_recon)
        recon_loss = F.mse_loss(x_recon, x, reduction='sum').div(batch_size)
    else:
        recon_loss = None

    return recon_loss


def kl_divergence(mu, logvar):
    batch_size = mu.size(0)
    assert batch_size != 0
    if mu.data.ndimension() == 4:
        mu = mu.view(mu.size(0), mu.size(1))
    if logvar.data.ndimension() == 4:
        logvar = logvar.view(logvar.size(0), logvar.size(1))

    klds = -0.5*(1 + logvar - mu.pow(2) - logvar.exp())
    total_kld = klds.sum(1).mean(0, True)
    dimension_wise_kld = klds.mean(0)
    mean_kld = klds.mean(1).mean(0, True)

    return total_kld, dimension_wise_kld, mean_kld


# ---------------------------------------------------------------- dataset.py (CustomTensorDataset) + synthetic dSprites
class CustomTensorDataset(Dataset):
    def __init__(self, data_tensor):
        self.data_tensor = data_tensor

    def __getitem__(self, index):
        return self.data_tensor[index]

    def __len__(self):
        return self.data_tensor.size(0)


def synthetic_dsprites(n=2048, seed=0):
    rng = np.random.RandomState(seed)
    yy, xx = np.mgrid[0:64, 0:64]
    imgs = np.zeros((n, 64, 64), dtype=np.float32)
    for i in range(n):
        shape, s = rng.randint(3), rng.uniform(5, 12)
        cx, cy = rng.uniform(s, 64 - s, size=2)
        if shape == 0:
            m = (np.abs(xx - cx) < s) & (np.abs(yy - cy) < s)
        elif shape == 1:
            m = ((xx - cx) / s) ** 2 + ((yy - cy) / (0.6 * s)) ** 2 < 1
        else:
            m = (yy - cy < s) & (yy - cy > -s) & (np.abs(xx - cx) < (yy - cy + s) / 2)
        imgs[i] = m
    return torch.from_numpy(imgs).unsqueeze(1).float()


class Solver(object):
    def __init__(self, args):
        self.max_iter = args.max_iter
        self.global_iter = 0
        self.z_dim = args.z_dim
        self.beta = args.beta
        self.gamma = args.gamma
        self.C_max = args.C_max
        self.C_stop_iter = args.C_stop_iter
        self.objective = args.objective
        self.lr = args.lr
        self.beta1 = args.beta1
        self.beta2 = args.beta2
        self.nc = 1
        self.decoder_dist = 'bernoulli'

        self.net = BetaVAE_B(self.z_dim, self.nc)
        self.optim = optim.Adam(self.net.parameters(), lr=self.lr,
                                betas=(self.beta1, self.beta2))
        self.display_step = args.display_step
        self.batch_size = args.batch_size
        self.data_loader = DataLoader(CustomTensorDataset(synthetic_dsprites()), batch_size=self.batch_size,
                                      shuffle=True, num_workers=0, pin_memory=False, drop_last=True)
        self.recon_trace = []

    def train(self):
        self.net.train()
        self.C_max = torch.FloatTensor([self.C_max])
        out = False

        while not out:
            for x in self.data_loader:
                self.global_iter += 1

                x_recon, mu, logvar = self.net(x)
                recon_loss = reconstruction_loss(x, x_recon, self.decoder_dist)
                total_kld, dim_wise_kld, mean_kld = kl_divergence(mu, logvar)

                if self.objective == 'H':
                    beta_vae_loss = recon_loss + self.beta*total_kld
                elif self.objective == 'B':
                    C = torch.clamp(self.C_max/self.C_stop_iter*self.global_iter, 0, self.C_max.data[0])
                    beta_vae_loss = recon_loss + self.gamma*(total_kld-C).abs()

                self.optim.zero_grad()
                beta_vae_loss.backward()
                self.optim.step()
                self.recon_trace.append(recon_loss.item())

                if self.global_iter % self.display_step == 0 or self.global_iter == 1:
                    print('[{}] recon_loss:{:.3f} total_kld:{:.3f} mean_kld:{:.3f}'.format(
                        self.global_iter, recon_loss.item(), total_kld.item(), mean_kld.item()))
                    if self.objective == 'B':
                        print('C:{:.3f}'.format(C.item()))

                if self.global_iter >= self.max_iter:
                    out = True
                    break


class Args:
    seed = 2
    max_iter = 100
    batch_size = 64
    z_dim = 10
    beta = 4
    objective = 'B'
    model = 'B'
    gamma = 100
    C_max = 20
    C_stop_iter = 70
    lr = 5e-4
    beta1 = 0.9
    beta2 = 0.999
    display_step = 20


def main():
    args = Args()
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    net = Solver(args)
    net.train()
    r = net.recon_trace
    first, last = sum(r[:10]) / 10, sum(r[-10:]) / 10
    print(f"[summary] recon_loss(mean of 10 iters) first={first:.2f} last={last:.2f} decreased={last < first}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
