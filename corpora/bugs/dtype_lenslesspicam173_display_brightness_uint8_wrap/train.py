# Source: LCAV/LenslessPiCam, scripts/measure/prep_display_image.py (display), commit 779174df04423344d5c7a2430d6eb3be7ea57663
# Report: https://github.com/LCAV/LenslessPiCam/pull/173
# LenslessPiCam dataset measurement: every ground-truth image is prepared for the screen with
# prep_display_image.display (rotation, padding, shifts, brightness scaling), shown on the
# monitor and captured by the lensless camera; a trainable reconstruction (learned inverse filter
# + small CNN) is then fitted to map measurements back to the ground-truth images. The screen
# and camera are simulated (FFT convolution with a fixed random caustic PSF + sensor noise), the
# images are synthetic 32x32 RGB scenes; file I/O, screen resizing and the click CLI are removed.
import numpy as np
import torch
import torch.nn as nn


def display(img_og, pad=0, vshift=0, brightness=100, hshift=0, rot90=0):
    # rotate image
    if rot90:
        img_og = np.rot90(img_og, k=rot90)

        # if odd, swap hshift and vshift
        if rot90 % 2:
            vshift, hshift = hshift, vshift

    # pad image
    if pad:
        padding_amount = np.array(img_og.shape[:2]) * pad / 100
        pad_width = (
            (int(padding_amount[0] // 2), int(padding_amount[0] // 2)),
            (int(padding_amount[1] // 2), int(padding_amount[1] // 2)),
            (0, 0),
        )
        img = np.pad(img_og, pad_width=pad_width)
    else:
        img = img_og

    if vshift:
        nx, _, _ = img.shape
        img = np.roll(img, shift=int(vshift * nx / 100), axis=0)

    if hshift:
        _, ny, _ = img.shape
        img = np.roll(img, shift=int(hshift * ny / 100), axis=1)

    if brightness:
        img = (img * brightness / 100).astype(np.uint8)

    return img


def make_scene(rng, size=32):
    yy, xx = np.mgrid[:size, :size] / size
    img = np.zeros((size, size, 3), dtype=np.float64)
    for _ in range(rng.randint(2, 5)):
        cy, cx, r = rng.uniform(0.15, 0.85), rng.uniform(0.15, 0.85), rng.uniform(0.08, 0.25)
        color = rng.uniform(0.2, 1.0, size=3)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * r ** 2))
        img += blob[..., None] * color
    img = img / max(img.max(), 1e-6)
    return (img * 255).astype(np.uint8)


def make_psf(rng, size=32):
    psf = np.zeros((size, size), dtype=np.float64)
    ys, xs = rng.randint(0, size, size=12), rng.randint(0, size, size=12)
    psf[ys, xs] = rng.uniform(0.5, 1.0, size=12)
    f = np.fft.fft2(psf) * np.exp(-0.5 * ((np.fft.fftfreq(size)[:, None] ** 2 + np.fft.fftfreq(size)[None] ** 2) / 0.05))
    psf = np.abs(np.fft.ifft2(f))
    return torch.tensor(psf / psf.sum(), dtype=torch.float32)


def measure(displayed, psf, rng, noise=0.002):
    x = torch.tensor(displayed, dtype=torch.float32).permute(2, 0, 1) / 255.0
    y = torch.fft.irfft2(torch.fft.rfft2(x) * torch.fft.rfft2(psf), s=x.shape[-2:])
    return y + noise * torch.tensor(rng.randn(*y.shape), dtype=torch.float32)


class TrainableInversion(nn.Module):
    def __init__(self, psf, reg=1e-3):
        super().__init__()
        H = torch.fft.rfft2(psf)
        W = H.conj() / (H.abs() ** 2 + reg)
        self.W_real = nn.Parameter(W.real.clone())
        self.W_imag = nn.Parameter(W.imag.clone())
        self.post = nn.Sequential(nn.Conv2d(3, 24, 3, padding=1), nn.ReLU(), nn.Conv2d(24, 24, 3, padding=1),
                                  nn.ReLU(), nn.Conv2d(24, 3, 3, padding=1))

    def forward(self, y):
        W = torch.complex(self.W_real, self.W_imag)
        x = torch.fft.irfft2(torch.fft.rfft2(y) * W, s=y.shape[-2:])
        return x + self.post(x)


def psnr(pred, target):
    mse = ((pred.clamp(0, 1) - target) ** 2).mean(dim=(1, 2, 3))
    return (10 * torch.log10(1.0 / mse)).mean().item()


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    psf = make_psf(rng)

    def build(n):
        meas, gt = [], []
        for _ in range(n):
            img = make_scene(rng)
            shown = display(img, brightness=100)
            meas.append(measure(shown, psf, rng))
            gt.append(torch.tensor(img, dtype=torch.float32).permute(2, 0, 1) / 255.0)
        return torch.stack(meas), torch.stack(gt)

    y_train, x_train = build(192)
    y_test, x_test = build(64)
    model = TrainableInversion(psf)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    batch_size = 16
    for epoch in range(15):
        perm = torch.randperm(len(y_train))
        losses = []
        for i in range(0, len(perm), batch_size):
            idx = perm[i:i + batch_size]
            optimizer.zero_grad()
            loss = loss_fn(model(y_train[idx]), x_train[idx])
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        with torch.no_grad():
            test_psnr = psnr(model(y_test), x_test)
        print(f"epoch {epoch:2d}  train MSE {np.mean(losses):.5f}  test PSNR {test_psnr:.2f} dB")
    print(f"final test PSNR {test_psnr:.2f} dB")
