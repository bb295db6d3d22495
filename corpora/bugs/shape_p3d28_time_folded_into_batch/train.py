# Source: qijiezhao/pseudo-3d-pytorch, p3d_model.py (P3D.forward)
# Report: https://github.com/qijiezhao/pseudo-3d-pytorch/issues/28
# Pseudo-3D ResNet for action recognition: 3D stages with temporal down-sampling, then the
# clip is reshaped to 2D for the last stage (Res2D part). The reporter feeds 32-frame clips
# instead of 16. Stages are reduced to one conv each; synthetic clips, 4 classes.
import torch
import torch.nn as nn
import torch.nn.functional as F


class P3D(nn.Module):
    def __init__(self, num_classes=4):
        super(P3D, self).__init__()
        self.conv1_custom = nn.Conv3d(3, 16, kernel_size=(1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1), bias=False)
        self.bn1 = nn.BatchNorm3d(16)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool3d(kernel_size=(2, 3, 3), stride=2, padding=(0, 1, 1))
        self.maxpool_2 = nn.MaxPool3d(kernel_size=(2, 1, 1), padding=0, stride=(2, 1, 1))
        self.layer1 = nn.Sequential(nn.Conv3d(16, 32, (3, 3, 3), stride=(2, 1, 1), padding=1), nn.BatchNorm3d(32), nn.ReLU())
        self.layer2 = nn.Sequential(nn.Conv3d(32, 64, (1, 3, 3), stride=(1, 2, 2), padding=(0, 1, 1)), nn.BatchNorm3d(64), nn.ReLU())
        self.layer3 = nn.Sequential(nn.Conv3d(64, 64, (3, 3, 3), stride=(2, 1, 1), padding=1), nn.BatchNorm3d(64), nn.ReLU())
        self.layer4 = nn.Sequential(nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU())
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.dropout = nn.Dropout(p=0.5)
        self.fc = nn.Linear(128, num_classes)

    def forward(self, x):
        x = self.conv1_custom(x)
        x = self.bn1(x)
        x = self.relu(x)
        x = self.maxpool(x)
        x = self.maxpool_2(self.layer1(x))
        x = self.layer2(x)
        x = self.layer3(x)

        sizes = x.size()
        x = x.view(-1, sizes[1], sizes[3], sizes[4])  # Part Res2D
        x = self.layer4(x)
        x = self.avgpool(x)

        x = x.view(-1, self.fc.in_features)
        x = self.fc(self.dropout(x))
        return x


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    num_frames, n = 32, 48
    labels = torch.randint(0, 4, (n,), generator=gen)
    t = torch.arange(num_frames).float()
    clips = 0.3 * torch.randn(n, 3, num_frames, 32, 32, generator=gen)
    for c in range(4):
        clips[labels == c, :, :, 8 * c:8 * c + 8, :] += torch.sin(t * (c + 1) * 0.4)[None, None, :, None, None]
    model = P3D()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    for epoch in range(4):
        for i in range(0, n, 8):
            output = model(clips[i:i + 8])
            loss = criterion(output, labels[i:i + 8])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print("epoch %d loss %.4f" % (epoch, loss.item()))


if __name__ == "__main__":
    main()
