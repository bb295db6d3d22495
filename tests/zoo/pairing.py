"""Dense targets and their inputs under augmentation: a geometric transform applied to the
image only (and correct look-alikes: the transform applied to both, a denoising autoencoder,
a masked autoencoder). Each builder returns (model, optimizer, train); `bug=False` is the
fixed twin."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

COLORS = torch.tensor([[0.2, 0.5, 0.2], [0.3, 0.3, 0.35], [0.7, 0.65, 0.6], [0.8, 0.1, 0.1]])


def scenes(n: int, g: torch.Generator, size: int = 32) -> tuple[torch.Tensor, torch.Tensor]:
    """Street-like scenes: sky/grass on top, road below, a sidewalk on one side, a car."""
    masks = torch.zeros(n, size, size, dtype=torch.long)
    for i in range(n):
        horizon = int(torch.randint(10, 16, (1,), generator=g))
        masks[i, horizon:] = 1
        side = int(torch.randint(6, 12, (1,), generator=g))
        if torch.rand(1, generator=g) < 0.5:
            masks[i, horizon:, :side] = 2
        else:
            masks[i, horizon:, size - side:] = 2
        cy = int(torch.randint(horizon, size - 6, (1,), generator=g))
        cx = int(torch.randint(0, size - 10, (1,), generator=g))
        masks[i, cy:cy + 6, cx:cx + 10] = 3
    images = COLORS[masks].permute(0, 3, 1, 2) + 0.07 * torch.randn(n, 3, size, size, generator=g)
    return images, masks


class SegNet(nn.Module):
    def __init__(self, classes: int = 4) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1),
                                  nn.ReLU(), nn.Conv2d(16, classes, 1))

    def forward(self, x):
        return self.body(x)


# ------------------------------------------------------- a random horizontal flip of the image only
def hflip_image_only(bug: bool, steps: int = 4):
    g = torch.Generator().manual_seed(0)
    images, masks = scenes(64, g)
    model = SegNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def augment(x, y):
        flip = torch.rand(x.shape[0], generator=g) < 0.5
        x = torch.where(flip[:, None, None, None], x.flip(-1), x)
        if not bug:
            y = torch.where(flip[:, None, None], y.flip(-1), y)
        return x, y

    def train():
        for step in range(steps):
            idx = torch.randperm(64, generator=g)[:16]
            x, y = augment(images[idx], masks[idx])
            loss = F.cross_entropy(model(x), y)  # the loss line
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


# ------------------------------------- a random rotation of the image only, the loss inside forward
class SegWithLoss(nn.Module):
    """HF-style: `model(pixel_values, labels)` returns the loss."""

    def __init__(self) -> None:
        super().__init__()
        self.net = SegNet()

    def forward(self, pixel_values, labels=None):
        logits = self.net(pixel_values)
        loss = F.cross_entropy(logits, labels) if labels is not None else None  # the inner loss line
        return loss, logits


def rotate(t: torch.Tensor, degrees: torch.Tensor, mode: str) -> torch.Tensor:
    a = degrees * math.pi / 180
    theta = torch.stack([torch.stack([a.cos(), -a.sin(), torch.zeros_like(a)], 1),
                         torch.stack([a.sin(), a.cos(), torch.zeros_like(a)], 1)], 1)
    grid = F.affine_grid(theta, list(t.shape), align_corners=False)
    return F.grid_sample(t, grid, mode=mode, padding_mode="border", align_corners=False)


def rotate_image_only(bug: bool, steps: int = 4):
    g = torch.Generator().manual_seed(1)
    images, masks = scenes(64, g)
    model = SegWithLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def train():
        for step in range(steps):
            idx = torch.randperm(64, generator=g)[:16]
            deg = (torch.rand(16, generator=g) * 2 - 1) * 35
            x = rotate(images[idx], deg, "bilinear")
            y = masks[idx]
            if not bug:
                y = rotate(y[:, None].float(), deg, "nearest")[:, 0].long()
            loss, _ = model(pixel_values=x, labels=y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


# -------------------------------------------- a depth map target, a random crop offset on the image only
class DepthNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 1, 3, padding=1))

    def forward(self, x):
        return self.body(x)


def depth_scenes(n: int, g: torch.Generator, size: int = 40) -> tuple[torch.Tensor, torch.Tensor]:
    """A floor whose depth grows towards the horizon and a few boxes in front of it; the image's
    brightness falls with depth."""
    rows = torch.linspace(1.0, 8.0, size)[:, None].expand(size, size)
    depth = rows.expand(n, size, size).clone()
    for i in range(n):
        for _ in range(3):
            y0, x0 = (int(v) for v in torch.randint(0, size - 12, (2,), generator=g))
            d = float(torch.rand(1, generator=g)) * 3 + 0.5
            depth[i, y0:y0 + 12, x0:x0 + 12] = d
    shade = 1.0 / depth
    image = torch.stack([shade, shade * 0.8, shade * 0.6], 1) + 0.02 * torch.randn(n, 3, size, size, generator=g)
    return image, depth[:, None]


def crop_image_only(bug: bool, steps: int = 4):
    g = torch.Generator().manual_seed(2)
    images, depths = depth_scenes(48, g)
    model = DepthNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    pad = 6

    def random_crop(x, y):
        xp = F.pad(x, (pad, pad, pad, pad), mode="replicate")
        yp = F.pad(y, (pad, pad, pad, pad), mode="replicate")
        outs_x, outs_y = [], []
        for i in range(x.shape[0]):
            dy, dx = (int(v) for v in torch.randint(0, 2 * pad + 1, (2,), generator=g))
            outs_x.append(xp[i, :, dy:dy + x.shape[2], dx:dx + x.shape[3]])
            if bug:
                outs_y.append(y[i])  # the depth map stays where it was
            else:
                outs_y.append(yp[i, :, dy:dy + y.shape[2], dx:dx + y.shape[3]])
        return torch.stack(outs_x), torch.stack(outs_y)

    def train():
        for step in range(steps):
            idx = torch.randperm(48, generator=g)[:12]
            x, y = random_crop(images[idx], depths[idx])
            loss = F.l1_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


# ------------------------------------ every image stored upside down, the masks the right way up
def upside_down_images(bug: bool, steps: int = 4):
    """A loader that reads the images bottom row first: no sample lines up with its mask."""
    g = torch.Generator().manual_seed(9)
    images, masks = scenes(64, g)
    stored = images.flip(-2) if bug else images
    model = SegNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def train():
        for step in range(steps):
            idx = torch.randperm(64, generator=g)[:16]
            loss = F.cross_entropy(model(stored[idx]), masks[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


# ------------------------------------------------------------------------------- correct look-alikes
class AutoEncoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(3, 8, 3, stride=2, padding=1), nn.ReLU())
        self.dec = nn.ConvTranspose2d(8, 3, 4, stride=2, padding=1)

    def forward(self, x):
        return self.dec(self.enc(x))


def denoising_autoencoder(steps: int = 4):
    """Noisy input, clean target, flipped together."""
    g = torch.Generator().manual_seed(3)
    images, _ = scenes(64, g)
    model = AutoEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train():
        for step in range(steps):
            clean = images[torch.randperm(64, generator=g)[:16]]
            flip = torch.rand(16, generator=g) < 0.5
            clean = torch.where(flip[:, None, None, None], clean.flip(-1), clean)
            noisy = clean + 0.3 * torch.randn(clean.shape, generator=g)
            loss = F.mse_loss(model(noisy), clean)
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


def masked_autoencoder(steps: int = 4):
    """Patches of the input blanked out, the whole image the target."""
    g = torch.Generator().manual_seed(4)
    images, _ = scenes(64, g)
    model = AutoEncoder()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train():
        for step in range(steps):
            x = images[torch.randperm(64, generator=g)[:16]]
            keep = (torch.rand(16, 1, 4, 4, generator=g) > 0.75).float()
            keep = F.interpolate(keep, size=x.shape[-2:], mode="nearest")
            loss = F.mse_loss(model(x * keep), x)
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


def symmetric_scenes_flipped_alone(steps: int = 4):
    """Left-right symmetric masks (a centred object): flipping the image alone changes nothing."""
    g = torch.Generator().manual_seed(5)
    masks = torch.zeros(64, 32, 32, dtype=torch.long)
    for i in range(64):
        r = int(torch.randint(4, 12, (1,), generator=g))
        masks[i, 16 - r:16 + r, 16 - r:16 + r] = 1 + i % 3
    images = COLORS[masks].permute(0, 3, 1, 2) + 0.07 * torch.randn(64, 3, 32, 32, generator=g)
    model = SegNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)

    def train():
        for step in range(steps):
            idx = torch.randperm(64, generator=g)[:16]
            x = images[idx].flip(-1)
            loss = F.cross_entropy(model(x), masks[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


# ------------------------------- a measurement that mixes shifted copies of the scene (lensless)
def scattered_psf(g: torch.Generator, size: int = 32, points: int = 10) -> torch.Tensor:
    """A few bright points scattered over the sensor and softened, as a diffuser's response:
    each one a shifted copy of the scene in the measurement."""
    psf = torch.zeros(size, size)
    ys, xs = torch.randint(0, size, (points,), generator=g), torch.randint(0, size, (points,), generator=g)
    psf[ys, xs] = torch.rand(points, generator=g) * 0.5 + 0.5
    f = torch.fft.fftfreq(size)
    soft = torch.exp(-0.5 * (f[:, None] ** 2 + f[None] ** 2) / 0.05)
    psf = torch.fft.ifft2(torch.fft.fft2(psf) * soft).abs()
    return psf / psf.sum()


def blobs(n: int, g: torch.Generator, size: int = 32) -> torch.Tensor:
    """Soft coloured blobs on black, in [0, 1]."""
    yy, xx = torch.meshgrid(torch.arange(size) / size, torch.arange(size) / size, indexing="ij")
    out = torch.zeros(n, 3, size, size)
    for i in range(n):
        for _ in range(int(torch.randint(2, 5, (1,), generator=g))):
            cy, cx = (torch.rand(2, generator=g) * 0.7 + 0.15).tolist()
            r = float(torch.rand(1, generator=g)) * 0.17 + 0.08
            blob = torch.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r * r))
            out[i] += blob[None] * (torch.rand(3, 1, 1, generator=g) * 0.8 + 0.2)
        out[i] /= out[i].max()
    return out


def convolve(x: torch.Tensor, psf: torch.Tensor) -> torch.Tensor:
    return torch.fft.irfft2(torch.fft.rfft2(x) * torch.fft.rfft2(psf), s=x.shape[-2:])


class Deconv(nn.Module):
    def __init__(self, out: int = 3) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 16, 5, padding=2), nn.ReLU(), nn.Conv2d(16, out, 3, padding=1))

    def forward(self, y):
        return self.body(y)


def lensless_reconstruction(steps: int = 4):
    """The camera's measurement (the scene convolved with a scattered PSF) in, the scene out."""
    g = torch.Generator().manual_seed(7)
    images = blobs(64, g)
    psf = scattered_psf(g, points=12)
    measured = convolve(images, psf) + 0.002 * torch.randn(64, 3, 32, 32, generator=g)
    model = Deconv()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train():
        for step in range(steps):
            idx = torch.randperm(64, generator=g)[:16]
            loss = F.mse_loss(model(measured[idx]), images[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


def lensless_segmentation(steps: int = 4):
    """Classes of the scene straight from the lensless measurement."""
    g = torch.Generator().manual_seed(8)
    images, masks = scenes(64, g)
    psf = scattered_psf(g, points=6)
    measured = convolve(images, psf)
    model = Deconv(4)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def train():
        for step in range(steps):
            idx = torch.randperm(64, generator=g)[:16]
            loss = F.cross_entropy(model(measured[idx]), masks[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


# ------------------------------------- a critic scoring the prediction before the dense loss
class MapGenerator(nn.Module):
    """A code vector to a 1 x 32 x 32 map (no spatial input at all)."""

    def __init__(self, code: int = 8) -> None:
        super().__init__()
        self.fc = nn.Linear(code, 64 * 4 * 4)
        self.up = nn.Sequential(nn.Upsample(scale_factor=8, mode="nearest"), nn.Conv2d(64, 1, 3, padding=1),
                                nn.Tanh())

    def forward(self, z):
        return self.up(self.fc(z).view(-1, 64, 4, 4))


class MapCritic(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, 8, 4, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(8, 1, 16))

    def forward(self, m):
        return self.body(m)


def critic_then_reconstruction(steps: int = 4):
    """A conditional generator of decay maps (no image in: a code of the scene) with an
    adversarial term and an L1 term; the critic is called on the generated map before the L1
    loss, so the last model call took the prediction as its input."""
    g = torch.Generator().manual_seed(6)
    rate = torch.rand(64, 1, generator=g)
    code = torch.cat([rate, torch.randn(64, 7, generator=g)], 1)
    t = torch.linspace(0, 1, 32)
    decay = torch.exp(-t.view(1, 1, 1, 32) / (0.05 + 0.4 * rate.view(64, 1, 1, 1)) * (1 + t.view(1, 1, 32, 1)))
    maps = (2 * decay - 1 + 0.3 * torch.randn(64, 1, 32, 32, generator=g) * decay).clamp(-1, 1)
    gen, critic = MapGenerator(), MapCritic()
    model = nn.ModuleDict({"gen": gen, "critic": critic})
    opt = torch.optim.Adam(gen.parameters(), lr=1e-3)

    def train():
        for step in range(steps):
            idx = torch.randperm(64, generator=g)[:16]
            fake = gen(code[idx])
            adv = F.mse_loss(critic(fake), torch.ones(16, 1, 1, 1))
            loss = adv + 10 * F.l1_loss(fake, maps[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


# ------------------------------- a random crop drawn once per key of a dict (image and mask apart)
class RandomCropKeys:
    """A dict transform: crops `size` out of every key's tensor at a random corner."""

    def __init__(self, size: int, keys: tuple[str, ...], g: torch.Generator, shared: bool) -> None:
        self.size, self.keys, self.g, self.shared = size, keys, g, shared

    def corner(self, side: int) -> tuple[int, int]:
        y0, x0 = (int(v) for v in torch.randint(0, side - self.size + 1, (2,), generator=self.g))
        return y0, x0

    def __call__(self, **data: torch.Tensor) -> dict[str, torch.Tensor]:
        at = self.corner(data[self.keys[0]].shape[-1])
        for key in self.keys:
            y0, x0 = at if self.shared else self.corner(data[key].shape[-1])  # one draw per key
            data[key] = data[key][..., y0:y0 + self.size, x0:x0 + self.size]
        return data


def crop_per_key(bug: bool, steps: int = 4):
    g = torch.Generator().manual_seed(3)
    images, masks = scenes(64, g, size=48)
    model = SegNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    crop = RandomCropKeys(32, ("image", "mask"), g, shared=not bug)

    def train():
        for step in range(steps):
            idx = torch.randperm(64, generator=g)[:16]
            batch = [crop(image=images[i], mask=masks[i]) for i in idx]
            x = torch.stack([b["image"] for b in batch])
            y = torch.stack([b["mask"] for b in batch])
            loss = F.cross_entropy(model(x), y)  # the per-key crop loss line
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train


# ------------------------- a random translation of image and depth map, each with its own offsets
def translate_apart(bug: bool, steps: int = 4):
    g = torch.Generator().manual_seed(4)
    images, depths = depth_scenes(48, g)
    model = DepthNet()
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    pad = 10

    def offsets(n):
        return torch.randint(0, 2 * pad + 1, (n, 2), generator=g)

    def translate(t, off):
        tp = F.pad(t, (pad, pad, pad, pad), mode="replicate")
        return torch.stack([tp[i, :, dy:dy + t.shape[2], dx:dx + t.shape[3]] for i, (dy, dx) in enumerate(off.tolist())])

    def train():
        for step in range(steps):
            idx = torch.randperm(48, generator=g)[:16]
            off = offsets(16)
            x = translate(images[idx], off)
            y = translate(depths[idx], offsets(16) if bug else off)
            loss = F.l1_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()

    return model, opt, train
