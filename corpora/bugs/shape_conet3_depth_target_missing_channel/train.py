# Source: jiwei0921/CoNet, CoNet/trainer.py + CoNet/dataset_loader.py + CoNet/demo.py, commit f9c1719f9c1a843f1eb04ac5271c4f2e061dfa90
# Report: https://github.com/jiwei0921/CoNet/issues/3
# CoNet (ECCV 2020) RGB salient-object detection with auxiliary depth and edge supervision.
# The ResNet backbone and the integration module are reduced to small conv stacks; the
# RGB/depth/saliency/edge dataset is synthetic (32x32, a bright salient blob whose depth is
# larger than the background), loaded with batch_size=2 as in demo.py.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def cross_entropy2d(input, target, weight=None, size_average=True):
    n, c, h, w = input.size()

    input = input.transpose(1,2).transpose(2,3).contiguous()
    input = input[target.view(n, h, w, 1).repeat(1, 1, 1, c) >= 0]
    input = input.view(-1, c)
    # target: (n*h*w,)
    mask = target >= 0
    target = target[mask]
    loss = F.cross_entropy(input, target, weight=weight, reduction='sum')
    if size_average:
        loss /= mask.data.sum()
    return loss


class RGBNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.low = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU())
        self.high = nn.Sequential(nn.Conv2d(16, 32, 3, padding=2, dilation=2), nn.ReLU())

    def forward(self, x):
        low_1 = self.low(x)
        high_1 = self.high(low_1)
        return low_1, high_1


class IntegrationNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fuse = nn.Sequential(nn.Conv2d(48, 32, 3, padding=1), nn.ReLU())
        self.edge = nn.Conv2d(16, 2, 3, padding=1)
        self.high_depth = nn.Conv2d(32, 1, 3, padding=1)
        self.high_sal = nn.Conv2d(32, 2, 3, padding=1)
        self.pred_depth = nn.Conv2d(32, 1, 3, padding=1)
        self.pred_sal = nn.Conv2d(32 + 1, 2, 3, padding=1)

    def forward(self, low_1, high_1):
        pred_edge1 = self.edge(low_1)
        high_depth = self.high_depth(high_1)
        high_sal = self.high_sal(high_1)
        Features = self.fuse(torch.cat([low_1, high_1], 1))
        pred_depth = self.pred_depth(Features)
        pred_sal2 = self.pred_sal(torch.cat([Features, pred_depth], 1))
        return Features, pred_edge1, high_depth, high_sal, pred_depth, pred_sal2


class MyData(torch.utils.data.Dataset):
    mean_rgb = np.array([0.447, 0.407, 0.386])
    std_rgb = np.array([0.244, 0.250, 0.253])

    def __init__(self, n, seed):
        rng = np.random.RandomState(seed)
        self.items = []
        yy, xx = np.mgrid[0:32, 0:32]
        for _ in range(n):
            cy, cx, r = rng.randint(8, 24), rng.randint(8, 24), rng.randint(4, 9)
            blob = ((yy - cy) ** 2 + (xx - cx) ** 2) <= r * r
            level, near = rng.randint(0, 90), rng.randint(160, 235)
            img = (level + rng.randint(0, 20, size=(32, 32, 3))).astype(np.uint8)
            img[blob] = near + rng.randint(0, 20, size=(blob.sum(), 3))
            depth = np.full((32, 32), 30 + 2 * level, dtype=np.uint8)
            depth[blob] = near
            lbl = blob.astype(np.uint8)
            edge = (blob ^ (((yy - cy) ** 2 + (xx - cx) ** 2) <= (r - 1) ** 2)).astype(np.uint8) * 255
            self.items.append((img, lbl, depth, edge))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        img, lbl, depth, edge = self.items[index]
        return self.transform(img, lbl, depth, edge)

    # Translating numpy_array into format that pytorch can use on Code.
    def transform(self, img, lbl, depth, edge):

        img = img.astype(np.float64)/255.0
        img -= self.mean_rgb
        img /= self.std_rgb
        img = img.transpose(2, 0, 1)  # to verify
        img = torch.from_numpy(img).float()
        lbl = torch.from_numpy(lbl).long()
        depth = depth.astype(np.float64)/255.0
        depth = torch.from_numpy(depth).float()
        edge = edge.astype(np.float64) / 255.0
        edge = torch.from_numpy(edge).long()
        return img, lbl, depth, edge


class Trainer(object):

    def __init__(self, model_rgb, model_intergration, optimizer_rgb, optimizer_inter,
                 train_loader, sshow, size_average=False):
        self.model_rgb = model_rgb
        self.model_intergration = model_intergration
        self.optim_rgb = optimizer_rgb
        self.optim_inter = optimizer_inter
        self.train_loader = train_loader
        self.epoch = 0
        self.iteration = 0
        self.sshow = sshow
        self.size_average = size_average
        self.running_loss_pre = 0.0

    def train_epoch(self):

        for batch_idx, (data, target, depth, edge) in enumerate(self.train_loader):

            iteration = batch_idx + self.epoch * len(self.train_loader)
            self.iteration = iteration
            n, c, h, w = data.size()        # batch_size, channels, height, weight

            self.optim_rgb.zero_grad()
            self.optim_inter.zero_grad()

            low_1, high_1 = self.model_rgb(data)
            Features, pred_edge1, high_depth, high_sal, pred_depth, pred_sal2 = self.model_intergration(low_1, high_1)

            loss3 = cross_entropy2d(pred_edge1,edge,weight=None,size_average=self.size_average)
            loss4 = F.smooth_l1_loss(high_depth, depth, reduction='sum')
            loss5 = cross_entropy2d(high_sal, target, weight=None, size_average=self.size_average)
            loss6 = F.smooth_l1_loss(pred_depth, depth, reduction='sum')
            loss7 = cross_entropy2d(pred_sal2, target, weight=None, size_average=self.size_average)
            loss_pre = ((loss3+loss5+loss7) + (loss4+loss6)*2.5)/5
            self.running_loss_pre += loss_pre.item()

            loss_pre.backward()
            self.optim_inter.step()
            self.optim_rgb.step()

            if iteration % self.sshow == (self.sshow-1):
                print('[%3d, %6d,   the auxiliary loss: %.3f]' % (self.epoch + 1, iteration + 1, self.running_loss_pre / (n * self.sshow)))
                self.running_loss_pre = 0.0


def evaluate(model_rgb, model_intergration, loader):
    depth_err, sal_acc, count = 0.0, 0.0, 0
    with torch.no_grad():
        for data, target, depth, edge in loader:
            low_1, high_1 = model_rgb(data)
            _, _, _, _, pred_depth, pred_sal2 = model_intergration(low_1, high_1)
            depth_err += (pred_depth[:, 0] - depth).abs().mean().item()
            sal_acc += (pred_sal2.argmax(1) == target).float().mean().item()
            count += 1
    return depth_err / count, sal_acc / count


def main():
    torch.manual_seed(0)
    train_loader = torch.utils.data.DataLoader(MyData(160, seed=1), batch_size=2, shuffle=True)
    test_loader = torch.utils.data.DataLoader(MyData(40, seed=2), batch_size=1, shuffle=False)
    model_rgb = RGBNet()
    model_intergration = IntegrationNet()
    cfg = {'lr': 2e-5, 'momentum': 0.9, 'weight_decay': 0.0005}
    optimizer_rgb = torch.optim.SGD(model_rgb.parameters(), lr=cfg['lr'], momentum=cfg['momentum'], weight_decay=cfg['weight_decay'])
    optimizer_inter = torch.optim.SGD(model_intergration.parameters(), lr=cfg['lr'], momentum=cfg['momentum'], weight_decay=cfg['weight_decay'])
    training = Trainer(model_rgb, model_intergration, optimizer_rgb, optimizer_inter, train_loader, sshow=40)
    for epoch in range(3):
        training.epoch = epoch
        training.train_epoch()
        depth_mae, sal_acc = evaluate(model_rgb, model_intergration, test_loader)
        print('epoch %d  test depth MAE %.4f  saliency pixel acc %.4f' % (epoch, depth_mae, sal_acc))


if __name__ == "__main__":
    main()
