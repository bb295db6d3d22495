"""CIFAR-10 classifier tutorial: LeNet-style Net with F.max_pool2d, CrossEntropyLoss, SGD with
momentum, running_loss += loss.item(), then accuracy over the test set with
torch.max(outputs.data, 1) under no_grad (the Net has no dropout or batch norm: no eval() needed).

Source: pytorch/tutorials, beginner_source/blitz/cifar10_tutorial.py,
commit c53e7d4efc0e39e455c531d21ec7db28ba220214.
Reduced: 16x16 images, channels 3/4/8, hidden 16, 4 train batches of 4, 2 test batches.

Mutation: the model re-created after the optimizer was built (`net = Net().to(device)` copied from the tutorial's GPU section).
Expected: error gradient.optimizer_stale at the optimizer's line (build it after the final model).
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 4, 3)
        self.pool = nn.MaxPool2d(2, 2)
        self.conv2 = nn.Conv2d(4, 8, 3)
        self.fc1 = nn.Linear(8 * 2 * 2, 16)
        self.fc2 = nn.Linear(16, 12)
        self.fc3 = nn.Linear(12, 10)

    def forward(self, x):
        x = self.pool(F.relu(self.conv1(x)))
        x = self.pool(F.relu(self.conv2(x)))
        x = torch.flatten(x, 1)
        x = F.relu(self.fc1(x))
        x = F.relu(self.fc2(x))
        return self.fc3(x)


def build():
    torch.manual_seed(0)
    trainloader = [(torch.rand(4, 3, 14, 14), torch.randint(0, 10, (4,))) for _ in range(4)]
    testloader = [(torch.rand(4, 3, 14, 14), torch.randint(0, 10, (4,))) for _ in range(2)]
    net = Net()
    criterion = nn.CrossEntropyLoss()
    optimizer = optim.SGD(net.parameters(), lr=0.001, momentum=0.9)  # <- bug
    net = Net().to("cpu")

    def train():
        for epoch in range(1):
            running_loss = 0.0
            for i, data in enumerate(trainloader, 0):
                inputs, labels = data
                optimizer.zero_grad()
                outputs = net(inputs)
                loss = criterion(outputs, labels)
                loss.backward()
                optimizer.step()
                running_loss += loss.item()
        correct = total = 0
        with torch.no_grad():
            for data in testloader:
                images, labels = data
                outputs = net(images)
                _, predicted = torch.max(outputs.data, 1)
                total += labels.size(0)
                correct += (predicted == labels).sum().item()
        return correct / total

    return [net], [optimizer], train


if __name__ == "__main__":
    build()[2]()
