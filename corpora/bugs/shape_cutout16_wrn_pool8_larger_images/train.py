# Source: uoguelph-mlrg/Cutout, model/wide_resnet.py and train.py (WideResNet + Cutout augmentation)
# Report: https://github.com/uoguelph-mlrg/Cutout/issues/16
# WideResNet trained with Cutout on the reporter's own dataset of 64x64 images (the repository
# targets 32x32 CIFAR). Depth 10 / widen factor 1 and synthetic 4-class images keep it on CPU.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, in_planes, out_planes, stride, dropRate=0.0):
        super(BasicBlock, self).__init__()
        self.bn1 = nn.BatchNorm2d(in_planes)
        self.relu1 = nn.ReLU(inplace=True)
        self.conv1 = nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_planes)
        self.relu2 = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_planes, out_planes, kernel_size=3, stride=1, padding=1, bias=False)
        self.droprate = dropRate
        self.equalInOut = (in_planes == out_planes)
        self.convShortcut = (not self.equalInOut) and nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride,
                                                                padding=0, bias=False) or None

    def forward(self, x):
        if not self.equalInOut:
            x = self.relu1(self.bn1(x))
        else:
            out = self.relu1(self.bn1(x))
        out = self.relu2(self.bn2(self.conv1(out if self.equalInOut else x)))
        if self.droprate > 0:
            out = F.dropout(out, p=self.droprate, training=self.training)
        out = self.conv2(out)
        return torch.add(x if self.equalInOut else self.convShortcut(x), out)


class NetworkBlock(nn.Module):
    def __init__(self, nb_layers, in_planes, out_planes, block, stride, dropRate=0.0):
        super(NetworkBlock, self).__init__()
        self.layer = self._make_layer(block, in_planes, out_planes, nb_layers, stride, dropRate)

    def _make_layer(self, block, in_planes, out_planes, nb_layers, stride, dropRate):
        layers = []
        for i in range(nb_layers):
            layers.append(block(i == 0 and in_planes or out_planes, out_planes, i == 0 and stride or 1, dropRate))
        return nn.Sequential(*layers)

    def forward(self, x):
        return self.layer(x)


class WideResNet(nn.Module):
    def __init__(self, depth, num_classes, widen_factor=1, dropRate=0.0):
        super(WideResNet, self).__init__()
        nChannels = [16, 16*widen_factor, 32*widen_factor, 64*widen_factor]
        assert((depth - 4) % 6 == 0)
        n = (depth - 4) // 6
        block = BasicBlock
        self.conv1 = nn.Conv2d(3, nChannels[0], kernel_size=3, stride=1, padding=1, bias=False)
        self.block1 = NetworkBlock(n, nChannels[0], nChannels[1], block, 1, dropRate)
        self.block2 = NetworkBlock(n, nChannels[1], nChannels[2], block, 2, dropRate)
        self.block3 = NetworkBlock(n, nChannels[2], nChannels[3], block, 2, dropRate)
        self.bn1 = nn.BatchNorm2d(nChannels[3])
        self.relu = nn.ReLU(inplace=True)
        self.fc = nn.Linear(nChannels[3], num_classes)
        self.nChannels = nChannels[3]

    def forward(self, x):
        out = self.conv1(x)
        out = self.block1(out)
        out = self.block2(out)
        out = self.block3(out)
        out = self.relu(self.bn1(out))
        out = F.avg_pool2d(out, 8)
        out = out.view(-1, self.nChannels)
        return self.fc(out)


class Cutout(object):
    def __init__(self, n_holes, length):
        self.n_holes = n_holes
        self.length = length

    def __call__(self, img):
        h = img.size(1)
        w = img.size(2)
        mask = np.ones((h, w), np.float32)
        for n in range(self.n_holes):
            y = np.random.randint(h)
            x = np.random.randint(w)
            y1 = np.clip(y - self.length // 2, 0, h)
            y2 = np.clip(y + self.length // 2, 0, h)
            x1 = np.clip(x - self.length // 2, 0, w)
            x2 = np.clip(x + self.length // 2, 0, w)
            mask[y1: y2, x1: x2] = 0.
        mask = torch.from_numpy(mask)
        mask = mask.expand_as(img)
        return img * mask


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    num_classes, n = 4, 256
    labels = torch.randint(0, num_classes, (n,))
    images = torch.randn(n, 3, 64, 64) * 0.5
    for c in range(num_classes):
        images[labels == c, c % 3, 16 * c:16 * c + 16, :] += 1.5
    cutout = Cutout(n_holes=1, length=16)

    cnn = WideResNet(depth=10, num_classes=num_classes, widen_factor=1, dropRate=0.3)
    criterion = nn.CrossEntropyLoss()
    cnn_optimizer = torch.optim.SGD(cnn.parameters(), lr=0.05, momentum=0.9, nesterov=True, weight_decay=5e-4)
    for epoch in range(3):
        correct = total = 0
        for i in range(0, n, 32):
            images_b = torch.stack([cutout(img) for img in images[i:i + 32]])
            labels_b = labels[i:i + 32]
            cnn.zero_grad()
            pred = cnn(images_b)
            xentropy_loss = criterion(pred, labels_b)
            xentropy_loss.backward()
            cnn_optimizer.step()
            correct += (pred.argmax(1) == labels_b).sum().item()
            total += labels_b.size(0)
        print("epoch %d xentropy %.4f train acc %.3f" % (epoch, xentropy_loss.item(), correct / total))


if __name__ == "__main__":
    main()
