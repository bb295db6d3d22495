# Source: samuelyu2002/ImVisible, Model/training.py, Model/LYTNet.py, Model/loss.py, commit a463a0a2b17fec7cd40d35558e43d78a338eb769
# Report: https://github.com/samuelyu2002/ImVisible/issues/2
# LYTNet (pedestrian traffic light classifier + crossing direction regressor, MobileNetV2 style)
# trained with my_loss = 0.5 * CE(class) + 0.5 * MSE(direction points), Adam + MultiStepLR, and the
# per-epoch statistics lists of training.py. The PTL dataset is replaced by synthetic 48x64 images
# (a coloured light blob for the class, a bright line for the crossing direction), the network
# widths are reduced, validation, plotting and checkpointing are left out.
import math

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

BATCH_SIZE = 32
MAX_EPOCHS = 4
INIT_LR = 0.001
WEIGHT_DECAY = 0.00005
LR_DROP_MILESTONES = [400, 600]


def conv_bn(inp, oup, stride):
    return nn.Sequential(
        nn.Conv2d(inp, oup, 3, stride, 1, bias=False),
        nn.BatchNorm2d(oup),
        nn.ReLU6(inplace=True),
        nn.MaxPool2d(2, 2),
    )


def conv_1x1_bn(inp, oup):
    return nn.Sequential(
        nn.Conv2d(inp, oup, 1, 1, 0, bias=False),
        nn.BatchNorm2d(oup),
        nn.ReLU6(inplace=True)
    )


class InvertedResidual(nn.Module):
    def __init__(self, inp, oup, stride, expand_ratio):
        super(InvertedResidual, self).__init__()
        self.stride = stride
        hidden_dim = round(inp * expand_ratio)
        self.use_res_connect = self.stride == 1 and inp == oup
        self.conv = nn.Sequential(
            nn.Conv2d(inp, hidden_dim, 1, 1, 0, bias=False),
            nn.BatchNorm2d(hidden_dim),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden_dim, hidden_dim, 3, stride, 1, groups=hidden_dim, bias=False),
            nn.BatchNorm2d(hidden_dim),
            nn.ReLU6(inplace=True),
            nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False),
            nn.BatchNorm2d(oup),
        )

    def forward(self, x):
        if self.use_res_connect:
            return x + self.conv(x)
        else:
            return self.conv(x)


class LYTNet(nn.Module):
    def __init__(self, n_class=5, width_mult=1.):
        super(LYTNet, self).__init__()
        block = InvertedResidual
        input_channel = 8
        last_channel = 64
        interverted_residual_setting = [
            # t, c, n, s
            [1, 8, 1, 1],
            [4, 12, 2, 2],
            [4, 16, 1, 2],
        ]
        self.last_channel = last_channel
        self.features = [conv_bn(3, input_channel, 2)]
        for t, c, n, s in interverted_residual_setting:
            output_channel = int(c * width_mult)
            for i in range(n):
                if i == 0:
                    self.features.append(block(input_channel, output_channel, s, expand_ratio=t))
                else:
                    self.features.append(block(input_channel, output_channel, 1, expand_ratio=t))
                input_channel = output_channel
        self.features.append(conv_1x1_bn(input_channel, self.last_channel))
        self.features = nn.Sequential(*self.features, nn.Dropout(0.1))

        self.classifier_light = nn.Sequential(
            nn.Linear(self.last_channel, 32),
            nn.BatchNorm1d(32),
            nn.ReLU6(inplace=True),
            nn.Linear(32, n_class),
        )
        self.regression_direction = nn.Sequential(
            nn.Linear(self.last_channel, 16),
            nn.BatchNorm1d(16),
            nn.ReLU6(inplace=True),
            nn.Linear(16, 4)
        )

    def forward(self, x):
        x = self.features(x)
        x = x.mean(3).mean(2)
        x1 = self.classifier_light(x)
        x2 = self.regression_direction(x)
        return x1, x2


def my_loss(classifier, regression, points, mode):
    alpha = 0.5
    MSE = nn.MSELoss()
    MSEl = MSE(regression, points)
    cross_entropy = nn.CrossEntropyLoss()
    ce = cross_entropy(classifier, mode)

    loss = ce * alpha + MSEl * (1 - alpha)
    return loss, MSEl, ce


class TrafficLightDataset(Dataset):
    COLORS = [(1, 0, 0), (0, 1, 0), (0, 1, 0.5), (0.2, 0.2, 0.2), (0.5, 0.5, 0.5)]

    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.mode = torch.randint(0, 5, (n,), generator=g)
        self.points = torch.rand(n, 4, generator=g) * 0.5 + torch.tensor([0.25, 0.5, 0.25, 0.0])
        self.images = 0.1 * torch.randn(n, 3, 48, 64, generator=g)
        yy, xx = torch.meshgrid(torch.linspace(0, 1, 48), torch.linspace(0, 1, 64), indexing="ij")
        for k in range(n):
            c = torch.tensor(self.COLORS[int(self.mode[k])]).view(3, 1, 1)
            blob = (((yy - 0.2) ** 2 + (xx - 0.5) ** 2) < 0.01).float()
            x1, y1, x2, y2 = self.points[k].tolist()
            t = torch.linspace(0, 1, 60)
            line = torch.zeros(48, 64)
            line[((y1 + (y2 - y1) * t) * 47).long(), ((x1 + (x2 - x1) * t) * 63).long()] = 1.0
            self.images[k] += c * blob + line

    def __len__(self):
        return len(self.mode)

    def __getitem__(self, i):
        return {'image': self.images[i], 'mode': self.mode[i], 'points': self.points[i]}


def graph_nodes(values):
    seen = set()
    stack = [v.grad_fn for v in values if isinstance(v, torch.Tensor) and v.grad_fn is not None]
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        stack.extend(f for f, _ in fn.next_functions)
    return len(seen)


def main():
    torch.manual_seed(0)
    train_dataset = TrafficLightDataset(256, 0)
    train_dataloader = DataLoader(train_dataset, batch_size=BATCH_SIZE, shuffle=True)
    net = LYTNet()
    loss_fn = my_loss
    optimizer = torch.optim.Adam(net.parameters(), lr=INIT_LR, weight_decay=0.000005)
    lr_scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, LR_DROP_MILESTONES)

    train_losses = []  # stores the overall training loss at each epoch
    train_MSE = []  # stores the MSE loss during training at each epoch
    train_CE = []  # stores the cross entropy loss during training at each epoch
    train_accuracies = []

    for epoch in range(MAX_EPOCHS):
        net.train()

        running_loss = 0.0
        running_loss_MSE = 0.0
        running_loss_cross_entropy = 0.0
        train_correct = 0
        train_total = 0

        for j, data in enumerate(train_dataloader, 0):
            optimizer.zero_grad()
            train_total += 1

            images = data['image'].type(torch.FloatTensor)
            mode = data['mode']
            points = data['points']

            pred_classes, pred_direc = net(images)
            _, predicted = torch.max(pred_classes, 1)
            train_correct += (predicted == mode).sum().item()
            loss, MSE, cross_entropy = loss_fn(pred_classes, pred_direc, points, mode)

            loss.backward()
            optimizer.step()

            running_loss += loss
            running_loss_MSE += MSE
            running_loss_cross_entropy += cross_entropy

        print('Epoch: ' + str(epoch + 1))
        print('Average training loss: ' + str(running_loss / (j + 1)))
        print('Average training MSE loss: ' + str(running_loss_MSE / (j + 1)))
        print('Average training cross entropy loss: ' + str(running_loss_cross_entropy / (j + 1)))
        print('Training accuracy: ' + str(train_correct / train_total / BATCH_SIZE))

        train_MSE.append(running_loss_MSE / train_total)
        train_CE.append(running_loss_cross_entropy / train_total)
        train_losses.append(running_loss / train_total)
        train_accuracies.append(train_correct / train_total / 32 * 100)
        print('autograd nodes held by the stored epoch statistics: '
              + str(graph_nodes(train_losses + train_MSE + train_CE)))

        lr_scheduler.step()


if __name__ == "__main__":
    main()
