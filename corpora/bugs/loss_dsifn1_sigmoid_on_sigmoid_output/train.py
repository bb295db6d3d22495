# Source: GeoZcx/A-deeply-supervised-image-fusion-network-for-change-detection-in-remote-sensing-images, pytorch version/loss.py + pytorch version/DSIFN.py, commit 0ddad933493ab85875d09d6b2c92e2bd37b3b68e
# Report: https://github.com/GeoZcx/A-deeply-supervised-image-fusion-network-for-change-detection-in-remote-sensing-images/issues/1
# DSIFN change detection: two co-registered images go through a shared encoder, the
# difference branch fuses their features and every output head ends in nn.Sigmoid; the
# deeply-supervised loss sums cd_loss (BCE + dice) over the heads. The VGG16 encoder and the
# attention modules are reduced to small conv blocks (two output scales kept); the remote
# sensing pairs to synthetic 32x32 image pairs with changed rectangles.
import torch
import torch.nn as nn
import torch.nn.functional as F


def cd_loss(input,target):
    bce_loss = nn.BCELoss()
    bce_loss = bce_loss(torch.sigmoid(input),target)

    smooth = 1.
    iflat = input.view(-1)
    tflat = target.view(-1)
    intersection = (iflat * tflat).sum()
    dic_loss = 1 - ((2. * intersection + smooth)/(iflat.sum() + tflat.sum() + smooth))

    return  dic_loss + bce_loss


class DSIFN(nn.Module):
    def __init__(self, ch=16):
        super().__init__()
        self.enc1 = nn.Sequential(nn.Conv2d(3, ch, 3, padding=1), nn.ReLU(), nn.Conv2d(ch, ch, 3, padding=1), nn.ReLU())
        self.enc2 = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(ch, 2 * ch, 3, padding=1), nn.ReLU())
        self.o2_conv = nn.Sequential(nn.Conv2d(4 * ch, 2 * ch, 3, padding=1), nn.BatchNorm2d(2 * ch), nn.ReLU())
        self.o2_out = nn.Sequential(nn.Conv2d(2 * ch, 1, 1), nn.Sigmoid())
        self.up = nn.ConvTranspose2d(2 * ch, ch, 2, 2)
        self.o1_conv = nn.Sequential(nn.Conv2d(2 * ch, ch, 3, padding=1), nn.BatchNorm2d(ch), nn.ReLU())
        self.o1_out = nn.Sequential(nn.Conv2d(ch, 1, 1), nn.Sigmoid())

    def forward(self, t1, t2):
        a1, b1 = self.enc1(t1), self.enc1(t2)
        a2, b2 = self.enc2(a1), self.enc2(b1)
        x2 = self.o2_conv(torch.cat([a2, b2], 1))
        out2 = self.o2_out(x2)
        x1 = self.o1_conv(torch.cat([self.up(x2), torch.abs(a1 - b1)], 1))
        out1 = self.o1_out(x1)
        return out1, out2


def make_pairs(n, g):
    t1 = torch.rand(n, 3, 32, 32, generator=g) * 0.3
    t2 = t1 + 0.05 * torch.randn(n, 3, 32, 32, generator=g)
    mask = torch.zeros(n, 1, 32, 32)
    for i in range(n):
        y, x = torch.randint(0, 22, (2,), generator=g).tolist()
        h, w = torch.randint(4, 10, (2,), generator=g).tolist()
        mask[i, :, y:y + h, x:x + w] = 1
        t2[i, :, y:y + h, x:x + w] += torch.rand(3, 1, 1, generator=g) * 0.8
    return t1, t2, mask


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    t1, t2, mask = make_pairs(256, g)
    v1, v2, vmask = make_pairs(128, g)
    model = DSIFN()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.99))
    for epoch in range(6):
        model.train()
        for i in range(0, 256, 16):
            out1, out2 = model(t1[i:i + 16], t2[i:i + 16])
            label = mask[i:i + 16]
            loss = cd_loss(out1, label) + cd_loss(out2, F.interpolate(label, scale_factor=0.5, mode='nearest'))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            prob, _ = model(v1, v2)
            pred = (prob > 0.5).float()
            tp = (pred * vmask).sum()
            prec = tp / pred.sum().clamp(min=1)
            rec = tp / vmask.sum()
            f1 = 2 * prec * rec / (prec + rec).clamp(min=1e-8)
        print(f"epoch {epoch} loss {loss.item():.4f} val precision {prec:.3f} recall {rec:.3f} F1 {f1:.3f} "
              f"mean prob {prob.mean():.3f} (changed fraction {vmask.mean():.3f})")


if __name__ == "__main__":
    main()
