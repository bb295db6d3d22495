# Source: NVIDIA-AI-IOT/jetbot, notebooks/road_following/train_model.ipynb, commit a9b83ed8bb7249bcdef7c5815066674a9c565aea
# Report: https://github.com/NVIDIA-AI-IOT/jetbot/pull/117
# JetBot road following: a ResNet-18 with a 2-output head regresses the (x, y) target point
# from camera images with MSE, Adam, best model saved on the test loss. The notebook's cells
# are written out as one script; ResNet-18 (torchvision, ImageNet weights) is rebuilt here
# with the same block layout at quarter width on 64x64 images; the labelled camera
# snapshots become synthetic road images (a bright lane whose position is the target).
import os
import resource
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, inplanes, planes, stride=1):
        super().__init__()
        self.conv1 = nn.Conv2d(inplanes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inplanes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inplanes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        identity = x if self.downsample is None else self.downsample(x)
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, width=16, num_classes=1000):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        layers, inplanes = [], width
        for i, planes in enumerate([width, width * 2, width * 4, width * 8]):
            stride = 1 if i == 0 else 2
            layers.append(nn.Sequential(BasicBlock(inplanes, planes, stride), BasicBlock(planes, planes)))
            inplanes = planes
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(width * 8, num_classes)

    def forward(self, x):
        x = self.maxpool(F.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def get_x(path):
    """Gets the x value from the image filename"""
    return (float(int(path[3:6])) - 50.0) / 50.0


def get_y(path):
    """Gets the y value from the image filename"""
    return (float(int(path[7:10])) - 50.0) / 50.0


class XYDataset(torch.utils.data.Dataset):

    def __init__(self, n, random_hflips=False):
        self.random_hflips = random_hflips
        rng = np.random.RandomState(0)
        # file names as the data collection notebook writes them: xy_<x>_<y>_<uuid>.jpg
        self.image_paths = ['xy_%03d_%03d_%04d.jpg' % (rng.randint(5, 95), rng.randint(20, 80), i) for i in range(n)]

    def __len__(self):
        return len(self.image_paths)

    def render(self, x, y, idx):
        g = torch.Generator().manual_seed(idx)
        yy, xx = torch.meshgrid(torch.linspace(-1, 1, 64), torch.linspace(-1, 1, 64), indexing="ij")
        lane = torch.exp(-((xx - x * (1 - yy) / (1 - y + 1e-3) * 0.5) ** 2) / 0.02) * (yy > y - 0.1)
        image = 0.3 + 0.6 * lane.unsqueeze(0).repeat(3, 1, 1) + 0.05 * torch.randn(3, 64, 64, generator=g)
        return image * (0.7 + 0.6 * torch.rand(3, 1, 1, generator=g))   # stands in for ColorJitter

    def __getitem__(self, idx):
        image_path = self.image_paths[idx]

        x = float(get_x(os.path.basename(image_path)))
        y = float(get_y(os.path.basename(image_path)))
        image = self.render(x, y, idx)

        if float(np.random.rand(1)[0]) > 0.5:
            image = torch.flip(image, dims=[2])
            x = -x

        image = (image - torch.tensor([0.485, 0.456, 0.406]).view(3, 1, 1)) / torch.tensor([0.229, 0.224, 0.225]).view(3, 1, 1)

        return image, torch.tensor([x, y]).float()


def main():
    torch.manual_seed(0)
    np.random.seed(0)
    dataset = XYDataset(480, random_hflips=False)

    test_percent = 0.25
    num_test = int(test_percent * len(dataset))
    train_dataset, test_dataset = torch.utils.data.random_split(dataset, [len(dataset) - num_test, num_test])

    train_loader = torch.utils.data.DataLoader(
        train_dataset,
        batch_size=16,
        shuffle=True,
        num_workers=0
    )

    test_loader = torch.utils.data.DataLoader(
        test_dataset,
        batch_size=16,
        shuffle=True,
        num_workers=0
    )

    model = ResNet18(width=16)
    model.fc = torch.nn.Linear(128, 2)
    device = torch.device('cpu')
    model = model.to(device)

    NUM_EPOCHS = 5
    BEST_MODEL_PATH = os.path.join(tempfile.mkdtemp(), 'best_steering_model_xy.pth')
    best_loss = 1e9

    optimizer = optim.Adam(model.parameters())

    for epoch in range(NUM_EPOCHS):

        model.train()
        train_loss = 0.0
        for images, labels in iter(train_loader):
            images = images.to(device)
            labels = labels.to(device)
            optimizer.zero_grad()
            outputs = model(images)
            loss = F.mse_loss(outputs, labels)
            train_loss += loss
            loss.backward()
            optimizer.step()
        train_loss /= len(train_loader)

        model.eval()
        test_loss = 0.0
        for images, labels in iter(test_loader):
            images = images.to(device)
            labels = labels.to(device)
            outputs = model(images)
            loss = F.mse_loss(outputs, labels)
            test_loss += loss
        test_loss /= len(test_loader)

        print('%f, %f' % (train_loss, test_loss))
        print('  peak RSS %d MB' % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024))
        if test_loss < best_loss:
            torch.save(model.state_dict(), BEST_MODEL_PATH)
            best_loss = test_loss


if __name__ == '__main__':
    main()
