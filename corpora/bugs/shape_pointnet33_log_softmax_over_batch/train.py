# Source: fxia22/pointnet.pytorch, pointnet.py (STN3d, PointNetfeat, PointNetCls), train_classification.py, commit 2ec315f174ed5ffc05d127d5cf14c94ce873c1e0
# Report: https://github.com/fxia22/pointnet.pytorch/pull/33
# PointNet classification: input transform net (STN3d), shared per-point MLP with max pooling,
# 3-layer classifier head returning log-probabilities, trained with nll_loss and SGD as in
# train_classification.py. ShapeNet part data is replaced by synthetic point clouds of 4 shapes
# (sphere, cube surface, cylinder, cone), the widths are reduced (1024 -> 64 global features).
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data
from torch.autograd import Variable


class STN3d(nn.Module):
    def __init__(self):
        super(STN3d, self).__init__()
        self.conv1 = torch.nn.Conv1d(3, 16, 1)
        self.conv2 = torch.nn.Conv1d(16, 32, 1)
        self.conv3 = torch.nn.Conv1d(32, 64, 1)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 16)
        self.fc3 = nn.Linear(16, 9)
        self.relu = nn.ReLU()

        self.bn1 = nn.BatchNorm1d(16)
        self.bn2 = nn.BatchNorm1d(32)
        self.bn3 = nn.BatchNorm1d(64)
        self.bn4 = nn.BatchNorm1d(32)
        self.bn5 = nn.BatchNorm1d(16)

    def forward(self, x):
        batchsize = x.size()[0]
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.relu(self.bn2(self.conv2(x)))
        x = F.relu(self.bn3(self.conv3(x)))
        x = torch.max(x, 2, keepdim=True)[0]
        x = x.view(-1, 64)

        x = F.relu(self.bn4(self.fc1(x)))
        x = F.relu(self.bn5(self.fc2(x)))
        x = self.fc3(x)

        iden = Variable(torch.from_numpy(np.array([1, 0, 0, 0, 1, 0, 0, 0, 1]).astype(np.float32))).view(1, 9).repeat(
            batchsize, 1)
        x = x + iden
        x = x.view(-1, 3, 3)
        return x


class PointNetfeat(nn.Module):
    def __init__(self, global_feat=True):
        super(PointNetfeat, self).__init__()
        self.stn = STN3d()
        self.conv1 = torch.nn.Conv1d(3, 16, 1)
        self.conv2 = torch.nn.Conv1d(16, 32, 1)
        self.conv3 = torch.nn.Conv1d(32, 64, 1)
        self.bn1 = nn.BatchNorm1d(16)
        self.bn2 = nn.BatchNorm1d(32)
        self.bn3 = nn.BatchNorm1d(64)
        self.global_feat = global_feat

    def forward(self, x):
        batchsize = x.size()[0]
        n_pts = x.size()[2]
        trans = self.stn(x)
        x = x.transpose(2, 1)
        x = torch.bmm(x, trans)
        x = x.transpose(2, 1)
        x = F.relu(self.bn1(self.conv1(x)))
        pointfeat = x
        x = F.relu(self.bn2(self.conv2(x)))
        x = self.bn3(self.conv3(x))
        x = torch.max(x, 2, keepdim=True)[0]
        x = x.view(-1, 64)
        if self.global_feat:
            return x, trans
        else:
            x = x.view(-1, 64, 1).repeat(1, 1, n_pts)
            return torch.cat([x, pointfeat], 1), trans


class PointNetCls(nn.Module):
    def __init__(self, k=2):
        super(PointNetCls, self).__init__()
        self.feat = PointNetfeat(global_feat=True)
        self.fc1 = nn.Linear(64, 32)
        self.fc2 = nn.Linear(32, 16)
        self.fc3 = nn.Linear(16, k)
        self.bn1 = nn.BatchNorm1d(32)
        self.bn2 = nn.BatchNorm1d(16)
        self.relu = nn.ReLU()

    def forward(self, x):
        x, trans = self.feat(x)
        x = F.relu(self.bn1(self.fc1(x)))
        x = F.relu(self.bn2(self.fc2(x)))
        x = self.fc3(x)
        return F.log_softmax(x, dim=0), trans


def make_cloud(label, rng, n=128):
    u = rng.uniform(-1, 1, size=(n, 3))
    if label == 0:
        p = u / np.linalg.norm(u, axis=1, keepdims=True)
    elif label == 1:
        p = u.copy()
        ax = rng.randint(0, 3, size=n)
        p[np.arange(n), ax] = np.sign(p[np.arange(n), ax])
    elif label == 2:
        th = rng.uniform(0, 2 * np.pi, n)
        p = np.stack([np.cos(th), np.sin(th), u[:, 2]], 1)
    else:
        h = rng.uniform(0, 1, n)
        th = rng.uniform(0, 2 * np.pi, n)
        p = np.stack([(1 - h) * np.cos(th), (1 - h) * np.sin(th), 2 * h - 1], 1)
    p = p * rng.uniform(0.7, 1.0) + 0.03 * rng.randn(n, 3)
    return p.astype(np.float32)


class ShapeDataset(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        rng = np.random.RandomState(seed)
        self.labels = rng.randint(0, 4, size=n)
        self.points = [make_cloud(int(c), rng) for c in self.labels]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return torch.from_numpy(self.points[i]), torch.tensor([self.labels[i]])


def main():
    batchSize = 32
    torch.manual_seed(0)
    dataset = ShapeDataset(256, 1)
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=batchSize, shuffle=True, drop_last=True)
    test_dataset = ShapeDataset(96, 2)
    testdataloader = torch.utils.data.DataLoader(test_dataset, batch_size=batchSize, shuffle=False)
    num_classes = 4

    classifier = PointNetCls(k=num_classes)
    optimizer = optim.SGD(classifier.parameters(), lr=0.01, momentum=0.9)
    num_batch = len(dataset) / batchSize

    for epoch in range(5):
        for i, data in enumerate(dataloader, 0):
            points, target = data
            points, target = Variable(points), Variable(target[:, 0])
            points = points.transpose(2, 1)
            optimizer.zero_grad()
            classifier = classifier.train()
            pred, _ = classifier(points)
            loss = F.nll_loss(pred, target)
            loss.backward()
            optimizer.step()
            pred_choice = pred.data.max(1)[1]
            correct = pred_choice.eq(target.data).cpu().sum()
        print('[%d: %d/%d] train loss: %f accuracy: %f' % (epoch, i, num_batch, loss.item(),
                                                          correct.item() / float(batchSize)))

        classifier = classifier.eval()
        total_correct, total, mass = 0, 0, []
        with torch.no_grad():
            for points, target in testdataloader:
                points, target = points.transpose(2, 1), target[:, 0]
                pred, _ = classifier(points)
                total_correct += pred.max(1)[1].eq(target).sum().item()
                total += len(target)
                mass.append(pred.exp().sum(1))
        mass = torch.cat(mass)
        print('[%d] test accuracy: %f  probability mass per sample: min %.3f max %.3f'
              % (epoch, total_correct / float(total), mass.min().item(), mass.max().item()))


if __name__ == "__main__":
    main()
