# Source: sthalles/PyTorch-BYOL, trainer.py, main.py, models/mlp_head.py, models/resnet_base_network.py, data/multi_view_data_injector.py, data/transforms.py, config/config.yaml, commit f007ed6b3619a3ae00eb9c95cde342eac5b98923
# https://github.com/sthalles/PyTorch-BYOL
#
# BYOL with a separately constructed target ResNet whose parameters are overwritten by the online ones and set to
# requires_grad=False at the start of train() (initializes_target_network), then moved by a momentum update that
# REBINDS param_k.data each step (m=0.996) under @torch.no_grad; only parameters are averaged: the target's
# BatchNorm running statistics are its own, updated by its train-mode forward under no_grad; the target network
# is never put in eval(); the predictor is an MLPHead with the same hidden size as the projector; the symmetric
# loss 2 - 2cos is summed over both view pairs and averaged; SGD(lr 0.03, momentum 0.9, wd 4e-4) over
# list(online.parameters()) + list(predictor.parameters()); the encoder is nn.Sequential(*children()[:-1]) of a
# ResNet-18 (the fc layer is dropped).
# Adaptation: torchvision/tensorboard/yaml are not installed: models.resnet18 -> a ResNet-18-shaped network with
# one BasicBlock per stage and widths 16-128 (same children layout: conv1, bn1, relu, maxpool, layer1-4, avgpool,
# fc), the SimCLR transforms (RandomResizedCrop, flip, colour jitter p=0.8, grayscale p=0.2, Gaussian blur) are
# tensor re-implementations applied per sample by MultiViewDataInjector; STL10 96x96 -> 512 synthetic 32x32 images;
# SummaryWriter/image grids/checkpoints dropped; config projection 512/128 -> 128/64, batch 64 kept, epochs 40 -> 3,
# num_workers 4 -> 0, no pre-trained folder.
import math
import random

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


# ---------------------------------------------------------------- torchvision.models.resnet18 stand-in
class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class TorchvisionResNet(nn.Module):
    def __init__(self, widths=(16, 32, 64, 128), num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = BasicBlock(widths[0], widths[0])
        self.layer2 = BasicBlock(widths[0], widths[1], 2)
        self.layer3 = BasicBlock(widths[1], widths[2], 2)
        self.layer4 = BasicBlock(widths[2], widths[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(widths[3], num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


class models:
    @staticmethod
    def resnet18(pretrained=False):
        return TorchvisionResNet()


# ---------------------------------------------------------------- models/mlp_head.py
class MLPHead(nn.Module):
    def __init__(self, in_channels, mlp_hidden_size, projection_size):
        super(MLPHead, self).__init__()

        self.net = nn.Sequential(
            nn.Linear(in_channels, mlp_hidden_size),
            nn.BatchNorm1d(mlp_hidden_size),
            nn.ReLU(inplace=True),
            nn.Linear(mlp_hidden_size, projection_size)
        )

    def forward(self, x):
        return self.net(x)


# ---------------------------------------------------------------- models/resnet_base_network.py
class ResNet18(torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super(ResNet18, self).__init__()
        if kwargs['name'] == 'resnet18':
            resnet = models.resnet18(pretrained=False)
        elif kwargs['name'] == 'resnet50':
            resnet = models.resnet50(pretrained=False)

        self.encoder = torch.nn.Sequential(*list(resnet.children())[:-1])
        self.projetion = MLPHead(in_channels=resnet.fc.in_features, **kwargs['projection_head'])

    def forward(self, x):
        h = self.encoder(x)
        h = h.view(h.shape[0], h.shape[1])
        return self.projetion(h)


# ---------------------------------------------------------------- data/transforms.py + data/multi_view_data_injector.py (tensor versions)
class SimCLRTransform:
    """RandomResizedCrop(size), RandomHorizontalFlip, RandomApply([ColorJitter(0.8s,0.8s,0.8s,0.2s)], p=0.8),
    RandomGrayscale(p=0.2), GaussianBlur(kernel_size=int(0.1*size)) on a CHW tensor in [0, 1]."""

    def __init__(self, size, s=1):
        self.size, self.s = size, s

    def __call__(self, img):
        _, h, w = img.shape
        for _ in range(10):
            area = h * w * random.uniform(0.08, 1.0)
            ar = math.exp(random.uniform(math.log(3 / 4), math.log(4 / 3)))
            cw, ch = int(round(math.sqrt(area * ar))), int(round(math.sqrt(area / ar)))
            if 0 < cw <= w and 0 < ch <= h:
                i, j = random.randint(0, h - ch), random.randint(0, w - cw)
                break
        else:
            i, j, ch, cw = 0, 0, h, w
        img = F.interpolate(img[None, :, i:i + ch, j:j + cw], size=(self.size, self.size), mode="bilinear",
                            align_corners=False)[0]
        if random.random() < 0.5:
            img = img.flip(-1)
        if random.random() < 0.8:
            b = 1 + random.uniform(-0.8, 0.8) * self.s
            c = 1 + random.uniform(-0.8, 0.8) * self.s
            img = ((img * b - img.mean()) * c + img.mean()).clamp(0, 1)
        if random.random() < 0.2:
            img = img.mean(0, keepdim=True).expand(3, -1, -1)
        k = max(int(0.1 * self.size), 1)
        if k % 2 == 1 and random.random() < 0.5:
            sigma = random.uniform(0.1, 2.0)
            x = torch.arange(k, dtype=torch.float32) - k // 2
            g = torch.exp(-x ** 2 / (2 * sigma ** 2))
            g = (g / g.sum()).view(1, 1, 1, k)
            img = F.conv2d(F.pad(img[None], (k // 2, k // 2, 0, 0), mode="reflect"), g.expand(3, 1, 1, k), groups=3)
            img = F.conv2d(F.pad(img, (0, 0, k // 2, k // 2), mode="reflect"), g.view(1, 1, k, 1).expand(3, 1, k, 1), groups=3)[0]
        return img.contiguous()


def get_simclr_data_transforms(input_shape, s=1):
    return SimCLRTransform(size=eval(input_shape)[0], s=s)


class MultiViewDataInjector(object):
    def __init__(self, *args):
        self.transforms = args[0]

    def __call__(self, sample, *with_consistent_flipping):
        if with_consistent_flipping:
            sample = sample.flip(-1) if random.random() < 0.5 else sample
        output = [transform(sample) for transform in self.transforms]
        return output


class SyntheticImages(Dataset):
    """stand-in for datasets.STL10(split='train+unlabeled'): 512 images of 8 textured classes."""

    def __init__(self, transform, n=512, seed=0):
        g = torch.Generator().manual_seed(seed)
        protos = F.avg_pool2d(torch.rand(8, 3, 36, 36, generator=g), 5, 1, 0)
        self.labels = torch.randint(0, 8, (n,), generator=g)
        noise = F.avg_pool2d(torch.randn(n, 3, 36, 36, generator=g), 5, 1, 0)
        self.data = (0.6 * protos[self.labels] + 0.2 + 0.5 * noise).clamp(0, 1)
        self.transform = transform

    def __len__(self):
        return len(self.data)

    def __getitem__(self, i):
        return self.transform(self.data[i]), int(self.labels[i])


class BYOLTrainer:
    def __init__(self, online_network, target_network, predictor, optimizer, device, **params):
        self.online_network = online_network
        self.target_network = target_network
        self.optimizer = optimizer
        self.device = device
        self.predictor = predictor
        self.max_epochs = params['max_epochs']
        self.losses = []
        self.m = params['m']
        self.batch_size = params['batch_size']
        self.num_workers = params['num_workers']
        self.checkpoint_interval = params['checkpoint_interval']

    @torch.no_grad()
    def _update_target_network_parameters(self):
        """
        Momentum update of the key encoder
        """
        for param_q, param_k in zip(self.online_network.parameters(), self.target_network.parameters()):
            param_k.data = param_k.data * self.m + param_q.data * (1. - self.m)

    @staticmethod
    def regression_loss(x, y):
        x = F.normalize(x, dim=1)
        y = F.normalize(y, dim=1)
        return 2 - 2 * (x * y).sum(dim=-1)

    def initializes_target_network(self):
        # init momentum network as encoder net
        for param_q, param_k in zip(self.online_network.parameters(), self.target_network.parameters()):
            param_k.data.copy_(param_q.data)  # initialize
            param_k.requires_grad = False  # not update by gradient

    def train(self, train_dataset):

        train_loader = DataLoader(train_dataset, batch_size=self.batch_size,
                                  num_workers=self.num_workers, drop_last=False, shuffle=True)

        niter = 0

        self.initializes_target_network()

        for epoch_counter in range(self.max_epochs):

            for (batch_view_1, batch_view_2), _ in train_loader:

                batch_view_1 = batch_view_1.to(self.device)
                batch_view_2 = batch_view_2.to(self.device)

                loss = self.update(batch_view_1, batch_view_2)
                self.losses.append(loss.item())
                if niter % 8 == 0:
                    print(f"iter {niter} loss {loss.item():.4f}")

                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()

                self._update_target_network_parameters()  # update the key encoder
                niter += 1

            print("End of epoch {}".format(epoch_counter))


    def update(self, batch_view_1, batch_view_2):
        # compute query feature
        predictions_from_view_1 = self.predictor(self.online_network(batch_view_1))
        predictions_from_view_2 = self.predictor(self.online_network(batch_view_2))

        # compute key features
        with torch.no_grad():
            targets_to_view_2 = self.target_network(batch_view_1)
            targets_to_view_1 = self.target_network(batch_view_2)

        loss = self.regression_loss(predictions_from_view_1, targets_to_view_1)
        loss += self.regression_loss(predictions_from_view_2, targets_to_view_2)
        return loss.mean()

# ---------------------------------------------------------------- main.py
config = {
    'network': {'name': 'resnet18', 'fine_tune_from': None,
                'projection_head': {'mlp_hidden_size': 128, 'projection_size': 64}},
    'data_transforms': {'s': 1, 'input_shape': '(32,32,3)'},
    'trainer': {'batch_size': 64, 'm': 0.996, 'checkpoint_interval': 5000, 'max_epochs': 3, 'num_workers': 0},
    'optimizer': {'params': {'lr': 0.03, 'momentum': 0.9, 'weight_decay': 0.0004}},
}


def main():
    torch.manual_seed(0)
    random.seed(0)
    device = 'cpu'
    print(f"Training with: {device}")

    data_transform = get_simclr_data_transforms(**config['data_transforms'])

    train_dataset = SyntheticImages(transform=MultiViewDataInjector([data_transform, data_transform]))

    # online network
    online_network = ResNet18(**config['network']).to(device)

    # predictor network
    predictor = MLPHead(in_channels=online_network.projetion.net[-1].out_features,
                        **config['network']['projection_head']).to(device)

    # target encoder
    target_network = ResNet18(**config['network']).to(device)

    optimizer = torch.optim.SGD(list(online_network.parameters()) + list(predictor.parameters()),
                                **config['optimizer']['params'])

    trainer = BYOLTrainer(online_network=online_network,
                          target_network=target_network,
                          optimizer=optimizer,
                          predictor=predictor,
                          device=device,
                          **config['trainer'])

    trainer.train(train_dataset)
    l = trainer.losses
    first, last = sum(l[:4]) / 4, sum(l[-4:]) / 4
    print(f"[summary] byol_loss(mean of 4 iters) first={first:.4f} last={last:.4f} decreased={last < first}")


if __name__ == '__main__':
    torch.set_num_threads(1)
    main()
