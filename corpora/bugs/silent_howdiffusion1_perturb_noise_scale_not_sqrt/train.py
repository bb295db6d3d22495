# Source: Ryota-Kawamura/How-Diffusion-Models-Work, L2_Training.ipynb (perturb_input, training loop), diffusion_utilities.py (ResidualConvBlock, UnetDown, UnetUp, EmbedFC), commit c8c795484de1715778375747a018b4032c5de0ba
# Report: https://github.com/Ryota-Kawamura/How-Diffusion-Models-Work/issues/1
# DDPM on 16x16 sprites (DeepLearning.AI "How Diffusion Models Work"): a context-free U-Net
# predicts the noise added to an image at a random timestep t (linear beta schedule,
# 500 steps); the course's DDPM sampler assumes x_t = sqrt(ab_t) x_0 + sqrt(1 - ab_t) eps. The U-Net is reduced (n_feat 16,
# one down/up level), the sprite .npy files are replaced by synthetic 16x16 sprites
# (a coloured square or disc on a light background), 8 epochs instead of 32.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class ResidualConvBlock(nn.Module):
    def __init__(self, in_channels, out_channels, is_res=False):
        super().__init__()
        self.same_channels = in_channels == out_channels
        self.is_res = is_res
        self.conv1 = nn.Sequential(nn.Conv2d(in_channels, out_channels, 3, 1, 1), nn.BatchNorm2d(out_channels), nn.GELU())
        self.conv2 = nn.Sequential(nn.Conv2d(out_channels, out_channels, 3, 1, 1), nn.BatchNorm2d(out_channels), nn.GELU())

    def forward(self, x):
        if self.is_res:
            x1 = self.conv1(x)
            x2 = self.conv2(x1)
            out = x + x2 if self.same_channels else x2
            return out / 1.414
        return self.conv2(self.conv1(x))


class UnetDown(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.model = nn.Sequential(ResidualConvBlock(in_channels, out_channels), nn.MaxPool2d(2))

    def forward(self, x):
        return self.model(x)


class UnetUp(nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.model = nn.Sequential(nn.ConvTranspose2d(in_channels, out_channels, 2, 2), ResidualConvBlock(out_channels, out_channels))

    def forward(self, x, skip):
        return self.model(torch.cat((x, skip), 1))


class EmbedFC(nn.Module):
    def __init__(self, input_dim, emb_dim):
        super().__init__()
        self.input_dim = input_dim
        self.model = nn.Sequential(nn.Linear(input_dim, emb_dim), nn.GELU(), nn.Linear(emb_dim, emb_dim))

    def forward(self, x):
        return self.model(x.view(-1, self.input_dim))


class ContextUnet(nn.Module):
    def __init__(self, in_channels=3, n_feat=16, height=16):
        super().__init__()
        self.init_conv = ResidualConvBlock(in_channels, n_feat, is_res=True)
        self.down1 = UnetDown(n_feat, 2 * n_feat)
        self.to_vec = nn.Sequential(nn.AvgPool2d(height // 2), nn.GELU())
        self.timeembed1 = EmbedFC(1, 2 * n_feat)
        self.up0 = nn.Sequential(nn.ConvTranspose2d(2 * n_feat, 2 * n_feat, height // 2, height // 2), nn.GroupNorm(8, 2 * n_feat), nn.ReLU())
        self.up1 = UnetUp(4 * n_feat, n_feat)
        self.out = nn.Sequential(nn.Conv2d(2 * n_feat, n_feat, 3, 1, 1), nn.GroupNorm(8, n_feat), nn.ReLU(),
                                 nn.Conv2d(n_feat, in_channels, 3, 1, 1))
        self.n_feat = n_feat

    def forward(self, x, t):
        x = self.init_conv(x)
        down1 = self.down1(x)
        hiddenvec = self.to_vec(down1)
        temb1 = self.timeembed1(t).view(-1, self.n_feat * 2, 1, 1)
        up1 = self.up0(hiddenvec)
        up2 = self.up1(up1 + temb1, down1)
        return self.out(torch.cat((up2, x), 1))


# diffusion hyperparameters
timesteps = 500
beta1 = 1e-4
beta2 = 0.02

# construct DDPM noise schedule
b_t = (beta2 - beta1) * torch.linspace(0, 1, timesteps + 1) + beta1
a_t = 1 - b_t
ab_t = torch.cumsum(a_t.log(), dim=0).exp()
ab_t[0] = 1


def make_sprites(n, rng):
    yy, xx = np.mgrid[0:16, 0:16]
    imgs = np.ones((n, 3, 16, 16), dtype=np.float32) * 0.9
    for k in range(n):
        color = rng.uniform(0, 0.6, size=3)
        cy, cx, r = rng.integers(5, 11), rng.integers(5, 11), rng.integers(3, 5)
        mask = (np.abs(yy - cy) <= r) & (np.abs(xx - cx) <= r) if k % 2 else (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        imgs[k][:, mask] = color[:, None]
    return torch.from_numpy(imgs * 2 - 1)  # range [-1, 1] as transforms.Normalize((0.5,), (0.5,))


# helper function: perturbs an image to a specified noise level
def perturb_input(x, t, noise):
    return ab_t.sqrt()[t, None, None, None] * x + (1 - ab_t[t, None, None, None]) * noise


if __name__ == '__main__':
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    sprites = make_sprites(600, rng)
    dataloader = DataLoader(TensorDataset(sprites), batch_size=100, shuffle=True)
    nn_model = ContextUnet(in_channels=3, n_feat=16, height=16)
    lrate = 1e-3
    n_epoch = 8
    optim = torch.optim.Adam(nn_model.parameters(), lr=lrate)

    # training without context code
    nn_model.train()
    for ep in range(n_epoch):
        # linearly decay learning rate
        optim.param_groups[0]['lr'] = lrate * (1 - ep / n_epoch)
        total = 0.0
        for (x,) in dataloader:
            optim.zero_grad()
            # perturb data
            noise = torch.randn_like(x)
            t = torch.randint(1, timesteps + 1, (x.shape[0],))
            x_pert = perturb_input(x, t, noise)
            # use network to recover noise
            pred_noise = nn_model(x_pert, t / timesteps)
            # loss is mean squared error between the predicted and true noise
            loss = F.mse_loss(pred_noise, noise)
            loss.backward()
            optim.step()
            total += loss.item() * len(x)
        print(f'epoch {ep}: loss {total / len(sprites):.4f}')

    # held-out check of the trained denoiser, by timestep range
    nn_model.eval()
    held_out = make_sprites(200, np.random.default_rng(1))
    with torch.no_grad():
        for lo, hi in [(1, 25), (26, 100), (101, 250), (251, 500)]:
            t = torch.randint(lo, hi + 1, (held_out.shape[0],))
            noise = torch.randn_like(held_out)
            x_pert = perturb_input(held_out, t, noise)
            err = F.mse_loss(nn_model(x_pert, t / timesteps), noise).item()
            print(f"t in [{lo}, {hi}]: noise-prediction mse {err:.4f}, std of x_t {x_pert.std():.3f}")
