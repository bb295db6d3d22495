# Source: MhLiao/DB, decoders/l1_loss.py, commit becccdfb3b979e86f83a289beef8206cd75810b1
# Report: https://github.com/MhLiao/DB/issues/14
# DBNet (differentiable binarization) text detector: probability map trained with BCE and the
# threshold map with MaskL1Loss. The ResNet-FPN is replaced by a small conv net; synthetic
# 32x32 images with rectangular "text" regions, some images contain no text at all.
import torch
import torch.nn as nn
import torch.nn.functional as F


class MaskL1Loss(nn.Module):
    def __init__(self):
        super(MaskL1Loss, self).__init__()

    def forward(self, pred: torch.Tensor, gt, mask):
        loss = (torch.abs(pred[:, 0] - gt) * mask).sum() / mask.sum()
        return loss, dict(l1_loss=loss)


class SegDetector(nn.Module):
    def __init__(self, inner_channels=16):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(1, inner_channels, 3, padding=1), nn.ReLU(),
                                  nn.Conv2d(inner_channels, inner_channels, 3, padding=1), nn.ReLU())
        self.binarize = nn.Sequential(nn.Conv2d(inner_channels, 1, 3, padding=1), nn.Sigmoid())
        self.thresh = nn.Sequential(nn.Conv2d(inner_channels, 1, 3, padding=1), nn.Sigmoid())

    def forward(self, x):
        fuse = self.body(x)
        return self.binarize(fuse), self.thresh(fuse)


def make_sample(gen, has_text):
    img = 0.1 * torch.randn(1, 32, 32, generator=gen)
    gt = torch.zeros(32, 32)
    thresh_map = torch.zeros(32, 32)
    thresh_mask = torch.zeros(32, 32)
    if has_text:
        y0, x0 = torch.randint(2, 18, (2,), generator=gen).tolist()
        h, w = 6, 12
        img[0, y0:y0 + h, x0:x0 + w] += 1.0
        gt[y0 + 1:y0 + h - 1, x0 + 1:x0 + w - 1] = 1
        thresh_mask[y0 - 2:y0 + h + 2, x0 - 2:x0 + w + 2] = 1
        thresh_map[y0 - 2:y0 + h + 2, x0 - 2:x0 + w + 2] = 0.7
        thresh_map[y0 + 2:y0 + h - 2, x0 + 2:x0 + w - 2] = 0.3
    return img, gt, thresh_map, thresh_mask


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    samples = [make_sample(gen, has_text=(i % 5 != 3 and i % 5 != 4) or i < 100) for i in range(160)]
    model = SegDetector()
    l1_loss = MaskL1Loss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    batch_size = 2
    for epoch in range(4):
        for i in range(0, len(samples), batch_size):
            batch = samples[i:i + batch_size]
            img = torch.stack([b[0] for b in batch])
            gt = torch.stack([b[1] for b in batch])
            thresh_map = torch.stack([b[2] for b in batch])
            thresh_mask = torch.stack([b[3] for b in batch])
            binary, thresh = model(img)
            bce_loss = F.binary_cross_entropy(binary[:, 0], gt)
            thresh_loss, metrics = l1_loss(thresh, thresh_map, thresh_mask)
            loss = bce_loss + 10 * thresh_loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print("epoch %d bce_loss %.4f l1_loss %.4f loss %.4f" % (epoch, bce_loss.item(), metrics['l1_loss'].item(), loss.item()))


if __name__ == "__main__":
    main()
