# Source: cloneofsimo/minDiffusion, superminddpm.py, commit 00a3c8066d25a34d3d472ef6c87c7b6b238ea444
# https://github.com/cloneofsimo/minDiffusion/blob/master/superminddpm.py
#
# "Extremely minimalistic DDPM": the noise-prediction network ignores t on purpose ("Lets think about using t
# later"), schedules registered as buffers, criterion(eps, prediction) with the target first, a default
# nn.MSELoss() instance in the signature, BatchNorm everywhere with ancestral sampling in eval mode under
# no_grad, t ~ randint(1, n_T) per sample, loss_ema tracked with .item().
# Adaptation: torchvision MNIST/tqdm/save_image unavailable: 512 synthetic 16x16 stroke images normalised like
# transforms.Normalize((0.5,), (1.0)); channel widths 64-128-256-512 -> 8-16-32-64 (same 7x7 blocks); n_T 1000 ->
# 200 so that sampling is cheap; batch 128 -> 64; 100 epochs -> 4; one 4-image sample at the end (statistics
# printed instead of a PNG); no checkpoint written; device cuda -> cpu.
from typing import Dict, Tuple

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def synthetic_digits(n=1024, size=28, seed=0):
    """MNIST stand-in: (n, 1, size, size) strokes in [0, 1] (a bar + a ring at a random place) and a label."""
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(size, dtype=torch.float32), torch.arange(size, dtype=torch.float32), indexing="ij")
    labels = torch.randint(0, 10, (n,), generator=g)
    cx = size / 3 + size / 3 * torch.rand(n, generator=g)
    cy = size / 3 + size / 3 * torch.rand(n, generator=g)
    r = size / 9 + size / 70 * labels.float()
    d = ((xx - cx[:, None, None]) ** 2 + (yy - cy[:, None, None]) ** 2).sqrt()
    ring = torch.exp(-((d - r[:, None, None]) ** 2) / 2.0)
    bar = torch.exp(-((xx - cx[:, None, None] + (labels[:, None, None] % 3 - 1) * (yy - cy[:, None, None])) ** 2) / 1.5)
    bar = bar * (torch.abs(yy - cy[:, None, None]) < r[:, None, None] + 2)
    img = (ring + (labels[:, None, None] >= 5) * bar).clamp(0, 1)
    return img.unsqueeze(1), labels


def ddpm_schedules(beta1: float, beta2: float, T: int) -> Dict[str, torch.Tensor]:
    """
    Returns pre-computed schedules for DDPM sampling, training process.
    """
    assert beta1 < beta2 < 1.0, "beta1 and beta2 must be in (0, 1)"

    beta_t = (beta2 - beta1) * torch.arange(0, T + 1, dtype=torch.float32) / T + beta1
    sqrt_beta_t = torch.sqrt(beta_t)
    alpha_t = 1 - beta_t
    log_alpha_t = torch.log(alpha_t)
    alphabar_t = torch.cumsum(log_alpha_t, dim=0).exp()

    sqrtab = torch.sqrt(alphabar_t)
    oneover_sqrta = 1 / torch.sqrt(alpha_t)

    sqrtmab = torch.sqrt(1 - alphabar_t)
    mab_over_sqrtmab_inv = (1 - alpha_t) / sqrtmab

    return {
        "alpha_t": alpha_t,  # \alpha_t
        "oneover_sqrta": oneover_sqrta,  # 1/\sqrt{\alpha_t}
        "sqrt_beta_t": sqrt_beta_t,  # \sqrt{\beta_t}
        "alphabar_t": alphabar_t,  # \bar{\alpha_t}
        "sqrtab": sqrtab,  # \sqrt{\bar{\alpha_t}}
        "sqrtmab": sqrtmab,  # \sqrt{1-\bar{\alpha_t}}
        "mab_over_sqrtmab": mab_over_sqrtmab_inv,  # (1-\alpha_t)/\sqrt{1-\bar{\alpha_t}}
    }


blk = lambda ic, oc: nn.Sequential(
    nn.Conv2d(ic, oc, 7, padding=3),
    nn.BatchNorm2d(oc),
    nn.LeakyReLU(),
)


class DummyEpsModel(nn.Module):
    """
    This should be unet-like, but let's don't think about the model too much :P
    Basically, any universal R^n -> R^n model should work.
    """

    def __init__(self, n_channel: int) -> None:
        super(DummyEpsModel, self).__init__()
        self.conv = nn.Sequential(  # with batchnorm
            blk(n_channel, 8),
            blk(8, 16),
            blk(16, 32),
            blk(32, 64),
            blk(64, 32),
            blk(32, 16),
            blk(16, 8),
            nn.Conv2d(8, n_channel, 3, padding=1),
        )

    def forward(self, x, t) -> torch.Tensor:
        # Lets think about using t later. In the paper, they used Tr-like positional embeddings.
        return self.conv(x)


class DDPM(nn.Module):
    def __init__(
        self,
        eps_model: nn.Module,
        betas: Tuple[float, float],
        n_T: int,
        criterion: nn.Module = nn.MSELoss(),
    ) -> None:
        super(DDPM, self).__init__()
        self.eps_model = eps_model

        # register_buffer allows us to freely access these tensors by name. It helps device placement.
        for k, v in ddpm_schedules(betas[0], betas[1], n_T).items():
            self.register_buffer(k, v)

        self.n_T = n_T
        self.criterion = criterion

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """
        Makes forward diffusion x_t, and tries to guess epsilon value from x_t using eps_model.
        This implements Algorithm 1 in the paper.
        """

        _ts = torch.randint(1, self.n_T, (x.shape[0],)).to(
            x.device
        )  # t ~ Uniform(0, n_T)
        eps = torch.randn_like(x)  # eps ~ N(0, 1)

        x_t = (
            self.sqrtab[_ts, None, None, None] * x
            + self.sqrtmab[_ts, None, None, None] * eps
        )  # This is the x_t, which is sqrt(alphabar) x_0 + sqrt(1-alphabar) * eps
        # We should predict the "error term" from this x_t. Loss is what we return.

        return self.criterion(eps, self.eps_model(x_t, _ts / self.n_T))

    def sample(self, n_sample: int, size, device) -> torch.Tensor:

        x_i = torch.randn(n_sample, *size).to(device)  # x_T ~ N(0, 1)

        # This samples accordingly to Algorithm 2. It is exactly the same logic.
        for i in range(self.n_T, 0, -1):
            z = torch.randn(n_sample, *size).to(device) if i > 1 else 0
            eps = self.eps_model(x_i, i / self.n_T)
            x_i = (
                self.oneover_sqrta[i] * (x_i - eps * self.mab_over_sqrtmab[i])
                + self.sqrt_beta_t[i] * z
            )

        return x_i


def train_mnist(n_epoch: int = 4, device="cpu") -> None:
    torch.manual_seed(0)
    ddpm = DDPM(eps_model=DummyEpsModel(1), betas=(1e-4, 0.02), n_T=200)
    ddpm.to(device)

    images, labels = synthetic_digits(512, size=16)
    dataset = TensorDataset((images - 0.5) / 1.0, labels)  # Normalize((0.5,), (1.0))
    dataloader = DataLoader(dataset, batch_size=64, shuffle=True, num_workers=0)
    optim = torch.optim.Adam(ddpm.parameters(), lr=2e-4)

    emas = []
    for i in range(n_epoch):
        ddpm.train()

        loss_ema = None
        for x, _ in dataloader:
            optim.zero_grad()
            x = x.to(device)
            loss = ddpm(x)
            loss.backward()
            if loss_ema is None:
                loss_ema = loss.item()
            else:
                loss_ema = 0.9 * loss_ema + 0.1 * loss.item()
            optim.step()
        print(f"epoch {i} loss: {loss_ema:.4f}")
        emas.append(loss_ema)

    ddpm.eval()
    with torch.no_grad():
        xh = ddpm.sample(4, (1, 16, 16), device)
        print(f"sample mean {xh.mean().item():.3f} std {xh.std().item():.3f} (data mean {dataset.tensors[0].mean().item():.3f} std {dataset.tensors[0].std().item():.3f})")
    print(f"[summary] loss_ema first={emas[0]:.4f} last={emas[-1]:.4f} decreased={emas[-1] < emas[0]}")


def main():
    train_mnist()


if __name__ == "__main__":
    main()
