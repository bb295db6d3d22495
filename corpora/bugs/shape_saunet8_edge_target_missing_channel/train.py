# Source: sunjesse/shape-attentive-unet, models/models.py (SegmentationModule.forward) and train.py
# Report: https://github.com/sunjesse/shape-attentive-unet/issues/8
# SAUNet: a U-Net with a shape stream trained with a dual loss (cross-entropy on the
# segmentation, BCE on the predicted boundary map). The network is reduced to a few convs;
# synthetic 64x64 "cardiac" images with a disc-shaped structure and its boundary.
import torch
import torch.nn as nn
import torch.nn.functional as F


class DualLoss(nn.Module):
    def __init__(self, edge_weight=1.0):
        super().__init__()
        self.seg_loss = nn.CrossEntropyLoss()
        self.edge_loss = nn.BCELoss()
        self.edge_weight = edge_weight

    def forward(self, preds, targets):
        seg_pred, edge_pred = preds
        seg_target, edge_target = targets
        return self.seg_loss(seg_pred, seg_target) + self.edge_weight * self.edge_loss(edge_pred, edge_target)


class SAUNet(nn.Module):
    def __init__(self, num_class=4):
        super().__init__()
        self.enc = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.seg_head = nn.Conv2d(16, num_class, 1)
        self.shape_stream = nn.Sequential(nn.Conv2d(16, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 1, 1), nn.Sigmoid())

    def forward(self, x):
        f = self.enc(x)
        return self.seg_head(f), self.shape_stream(f)


class SegmentationModule(nn.Module):
    def __init__(self, net, crit):
        super().__init__()
        self.net = net
        self.crit = crit

    def forward(self, feed_dict):
        p = self.net(feed_dict['image'])
        loss = self.crit((p[0], p[1]), (feed_dict['mask'][0].long(), feed_dict['mask'][1]))
        return loss, p


def make_batch(gen, bs=1, size=64):
    yy, xx = torch.meshgrid(torch.arange(size), torch.arange(size), indexing='ij')
    images, masks, edges = [], [], []
    for _ in range(bs):
        cy, cx = torch.randint(20, 44, (2,), generator=gen).tolist()
        r = torch.randint(8, 14, (1,), generator=gen).item()
        d = ((yy - cy) ** 2 + (xx - cx) ** 2).float().sqrt()
        mask = (d < r).long() + (d < r / 2).long() + ((d >= r) & (d < r + 3)).long() * 3
        edge = ((d - r).abs() < 1.0).float()
        images.append(mask.float()[None] * 0.3 + 0.2 * torch.randn(1, size, size, generator=gen))
        masks.append(mask)
        edges.append(edge)
    return {'image': torch.stack(images), 'mask': (torch.stack(masks), torch.stack(edges))}


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    segmentation_module = SegmentationModule(SAUNet(), DualLoss())
    optimizer = torch.optim.Adam(segmentation_module.parameters(), lr=3e-3)
    for it in range(60):
        feed_dict = make_batch(gen)
        loss, p = segmentation_module(feed_dict)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if it % 10 == 0 or it == 59:
            acc = (p[0].argmax(1) == feed_dict['mask'][0]).float().mean().item()
            print("iter %d loss %.4f pixel acc %.3f" % (it, loss.item(), acc))


if __name__ == "__main__":
    main()
