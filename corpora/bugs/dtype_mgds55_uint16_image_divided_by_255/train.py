# Source: Nerogar/mgds, src/mgds/pipelineModules/LoadImage.py (LoadImage.get_item), commit 3a6994ad18a490acc4f3876658167525b7d88da7
# Report: https://github.com/Nerogar/mgds/issues/55
# A diffusion-style denoiser trained on images loaded by mgds' LoadImage module (range_min=-1,
# range_max=1, as OneTrainer configures it). torchvision.io.read_image is replaced by an in-memory
# decoder with the same contract (uint8 tensors for 8-bit PNGs, uint16 tensors for 16-bit PNGs);
# the dataset is 48 synthetic 3x32x32 images, a quarter of them exported as 16-bit PNGs. The
# UNet is replaced by a small conv net, the noise schedule by a fixed linear-beta DDPM schedule.
import os.path

import torch
import torch.nn as nn
import torch.nn.functional as F


class ImageReadMode:
    RGB = "RGB"
    GRAY = "GRAY"


_FILES = {}


def read_image(path, mode=ImageReadMode.RGB, apply_exif_orientation=False):
    return _FILES[path].clone()


class LoadImage:
    def __init__(self, path_in_name, image_out_name, range_min, range_max, supported_extensions, channels=3,
                 dtype=None, device="cpu"):
        self.path_in_name = path_in_name
        self.image_out_name = image_out_name
        self.range_min = range_min
        self.range_max = range_max
        self.supported_extensions = supported_extensions
        self.dtype = dtype
        self.device = device
        self.mode = ImageReadMode.RGB if channels == 3 else ImageReadMode.GRAY

    def get_item(self, path):
        ext = os.path.splitext(path)[1]
        if ext.lower() in self.supported_extensions:
            image_tensor = read_image(path, self.mode, apply_exif_orientation=True) \
                .to(device=self.device)

            if self.dtype:
                image_tensor = image_tensor.to(dtype=self.dtype)

            # Transform 0 - 255 to 0-1
            image_tensor = image_tensor / 255
            image_tensor = image_tensor * (self.range_max - self.range_min) + self.range_min
        else:
            image_tensor = None

        return {
            self.image_out_name: image_tensor
        }


def make_files(n, gen):
    paths = []
    for k in range(n):
        base = torch.rand(3, 1, 1, generator=gen) * 0.6 + 0.2
        yy, xx = torch.meshgrid(torch.linspace(0, 1, 32), torch.linspace(0, 1, 32), indexing="ij")
        img = (base * (0.6 + 0.4 * torch.sin(6 * xx + k) * torch.cos(4 * yy))).clamp(0, 1)
        path = f"dataset/img_{k:03d}.png"
        if k % 4 == 3:
            _FILES[path] = (img * 65535).round().to(torch.uint16)  # 16-bit PNG export
        else:
            _FILES[path] = (img * 255).round().to(torch.uint8)
        paths.append(path)
    return paths


class Denoiser(nn.Module):
    def __init__(self, ch=32):
        super().__init__()
        self.inp = nn.Conv2d(4, ch, 3, padding=1)
        self.mid = nn.Conv2d(ch, ch, 3, padding=1)
        self.out = nn.Conv2d(ch, 3, 3, padding=1)

    def forward(self, x, t):
        tt = t.view(-1, 1, 1, 1).expand(-1, 1, x.shape[2], x.shape[3])
        h = F.silu(self.inp(torch.cat([x, tt], 1)))
        h = F.silu(self.mid(h)) + h
        return self.out(h)


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    paths = make_files(48, gen)
    loader = LoadImage(path_in_name="image_path", image_out_name="image", range_min=-1.0, range_max=1.0,
                       supported_extensions={".png", ".jpg"}, dtype=torch.float32)
    betas = torch.linspace(1e-4, 0.02, 1000)
    alphas_cumprod = torch.cumprod(1 - betas, 0)
    model = Denoiser()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for epoch in range(5):
        perm = torch.randperm(len(paths), generator=gen)
        losses, lo, hi = [], float("inf"), -float("inf")
        for i in range(0, len(paths), 8):
            images = torch.stack([loader.get_item(paths[j])["image"] for j in perm[i:i + 8].tolist()])
            lo, hi = min(lo, images.min().item()), max(hi, images.max().item())
            t = torch.randint(0, 1000, (images.shape[0],), generator=gen)
            a = alphas_cumprod[t].view(-1, 1, 1, 1)
            noise = torch.randn(images.shape, generator=gen)
            noisy = a.sqrt() * images + (1 - a).sqrt() * noise
            pred = model(noisy, t.float() / 1000)
            loss = F.mse_loss(pred, noise)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        print(f"epoch {epoch}: loss mean {sum(losses) / len(losses):.4f} max {max(losses):.4f}; "
              f"input range [{lo:.2f}, {hi:.2f}]")


if __name__ == "__main__":
    main()
