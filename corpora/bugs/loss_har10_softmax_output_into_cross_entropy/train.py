# Source: jindongwang/Deep-learning-activity-recognition, pytorch/network.py, pytorch/main_pytorch.py, pytorch/config.py, commit 6ec30f24c54f47d30fbaae875a9cd40aba256442
# Report: https://github.com/jindongwang/Deep-learning-activity-recognition/issues/10
# Human activity recognition (UCI-HAR layout: 9 inertial channels x 128 samples, 6 activities)
# with a 2-layer CNN. The UCI-HAR .npy files are replaced by synthetic sensor windows: each activity
# has its own mix of frequencies and amplitudes per channel, plus noise and per-window jitter.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

config_info = {
    'epoch': 6,
    'lr': 0.01,
    'batch_size': 64,
    'momemtum': 0.9
}
DEVICE = torch.device('cpu')
result = []


class Network(nn.Module):
    def __init__(self):
        super(Network, self).__init__()
        self.conv1 = nn.Sequential(
            nn.Conv2d(in_channels=9, out_channels=32, kernel_size=(1, 9)),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=(1, 2), stride=2)
        )
        self.conv2 = nn.Sequential(
            nn.Conv2d(in_channels=32, out_channels=64, kernel_size=(1, 9)),
            nn.ReLU(),
            nn.MaxPool2d(kernel_size=(1, 2), stride=2)
        )
        self.fc1 = nn.Sequential(
            nn.Linear(in_features=64 * 26, out_features=1000),
            nn.ReLU()
        )
        self.fc2 = nn.Sequential(
            nn.Linear(in_features=1000, out_features=500),
            nn.ReLU()
        )
        self.fc3 = nn.Sequential(
            nn.Linear(in_features=500, out_features=6)
        )

    def forward(self, x):
        out = self.conv1(x)
        out = self.conv2(out)
        out = out.reshape(-1, 64 * 26)
        out = self.fc1(out)
        out = self.fc2(out)
        out = self.fc3(out)
        out = F.softmax(out, dim=1)
        return out


def train(model, optimizer, train_loader, test_loader):
    n_batch = len(train_loader.dataset) // config_info['batch_size']
    criterion = nn.CrossEntropyLoss()

    for e in range(config_info['epoch']):
        model.train()
        correct, total_loss = 0, 0
        total = 0
        for index, (sample, target) in enumerate(train_loader):
            sample, target = sample.to(
                DEVICE).float(), target.to(DEVICE).long()
            sample = sample.view(-1, 9, 1, 128)
            output = model(sample)
            loss = criterion(output, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total_loss += loss.item()
            _, predicted = torch.max(output.data, 1)
            total += target.size(0)
            correct += (predicted == target).sum()
        acc_train = float(correct) * 100.0 / \
            (config_info['batch_size'] * n_batch)
        print(
            'Epoch: [{}/{}], loss: {:.4f}, train acc: {:.2f}%'.format(e + 1, config_info['epoch'], total_loss * 1.0 / n_batch,
                                                                      acc_train))

        model.train(False)
        with torch.no_grad():
            correct, total = 0, 0
            for sample, target in test_loader:
                sample, target = sample.to(
                    DEVICE).float(), target.to(DEVICE).long()
                sample = sample.view(-1, 9, 1, 128)
                output = model(sample)
                _, predicted = torch.max(output.data, 1)
                total += target.size(0)
                correct += (predicted == target).sum()
        acc_test = float(correct) * 100 / total
        print('Epoch: [{}/{}], test acc: {:.2f}%'.format(e + 1,
                                                         config_info['epoch'], float(correct) * 100 / total))
        result.append([acc_train, acc_test])


def load(batch_size=64):
    rng = np.random.RandomState(0)
    t = np.arange(128) / 50.0
    freqs = rng.uniform(0.5, 4.0, size=(6, 9))
    amps = rng.uniform(0.2, 1.0, size=(6, 9))
    gravity = rng.uniform(-0.25, 0.25, size=(6, 9))

    def make(n):
        y = rng.randint(0, 6, n)
        phase = rng.uniform(0, 2 * np.pi, size=(n, 9, 1))
        jitter = rng.uniform(0.9, 1.1, size=(n, 1, 1))
        x = amps[y][:, :, None] * np.sin(2 * np.pi * freqs[y][:, :, None] * jitter * t[None, None] + phase)
        x += gravity[y][:, :, None] + 0.3 * rng.randn(n, 9, 128)
        return torch.utils.data.TensorDataset(torch.tensor(x, dtype=torch.float32).view(n, 9, 1, 128), torch.tensor(y))

    train_loader = torch.utils.data.DataLoader(make(1536), batch_size=batch_size, shuffle=True, drop_last=True)
    test_loader = torch.utils.data.DataLoader(make(512), batch_size=batch_size, shuffle=False)
    return train_loader, test_loader


if __name__ == '__main__':
    torch.manual_seed(10)
    train_loader, test_loader = load(
        batch_size=config_info['batch_size'])
    model = Network().to(DEVICE)
    optimizer = optim.SGD(params=model.parameters(
    ), lr=config_info['lr'], momentum=config_info['momemtum'])
    train(model, optimizer, train_loader, test_loader)
