"""Spatial transformer network: a localization net regressing a 2x3 affine matrix initialised to
the identity, F.affine_grid + F.grid_sample in front of the classifier, Dropout2d, log_softmax +
nll_loss with SGD, and a test pass in eval() + no_grad with summed loss and argmax accuracy.

Source: pytorch/tutorials, intermediate_source/spatial_transformer_tutorial.py,
commit c53e7d4efc0e39e455c531d21ec7db28ba220214.
Reduced: 16x16 inputs, channels 4/8, 3 train batches of 8, 1 test batch.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class Net(nn.Module):
    def __init__(self):
        super(Net, self).__init__()
        self.conv1 = nn.Conv2d(1, 4, kernel_size=5)
        self.conv2 = nn.Conv2d(4, 8, kernel_size=3)
        self.conv2_drop = nn.Dropout2d()
        self.fc1 = nn.Linear(8 * 2 * 2, 16)
        self.fc2 = nn.Linear(16, 10)
        self.localization = nn.Sequential(nn.Conv2d(1, 4, kernel_size=5), nn.MaxPool2d(2, stride=2), nn.ReLU(True),
                                          nn.Conv2d(4, 4, kernel_size=3), nn.MaxPool2d(2, stride=2), nn.ReLU(True))
        self.fc_loc = nn.Sequential(nn.Linear(4 * 2 * 2, 16), nn.ReLU(True), nn.Linear(16, 3 * 2))
        self.fc_loc[2].weight.data.zero_()
        self.fc_loc[2].bias.data.copy_(torch.tensor([1, 0, 0, 0, 1, 0], dtype=torch.float))

    def stn(self, x):
        xs = self.localization(x)
        xs = xs.view(-1, 4 * 2 * 2)
        theta = self.fc_loc(xs)
        theta = theta.view(-1, 2, 3)
        grid = F.affine_grid(theta, x.size(), align_corners=False)
        return F.grid_sample(x, grid, align_corners=False)

    def forward(self, x):
        x = self.stn(x)
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
        x = x.view(-1, 8 * 2 * 2)
        x = F.relu(self.fc1(x))
        x = F.dropout(x, training=self.training)
        x = self.fc2(x)
        return F.log_softmax(x, dim=1)


def build():
    torch.manual_seed(0)
    train_loader = [(torch.randn(8, 1, 16, 16), torch.randint(0, 10, (8,))) for _ in range(3)]
    test_loader = [(torch.randn(8, 1, 16, 16), torch.randint(0, 10, (8,)))]
    model = Net()
    optimizer = optim.SGD(model.parameters(), lr=0.01)

    def train():
        model.train()
        for batch_idx, (data, target) in enumerate(train_loader):
            optimizer.zero_grad()
            output = model(data)
            loss = F.nll_loss(output, target)
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            model.eval()
            test_loss, correct = 0, 0
            for data, target in test_loader:
                output = model(data)
                test_loss += F.nll_loss(output, target, size_average=False).item()
                pred = output.max(1, keepdim=True)[1]
                correct += pred.eq(target.view_as(pred)).sum().item()

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
