"""Siamese network: one ResNet trunk applied to both images (forward_once twice), features
concatenated into an MLP head, sigmoid + BCELoss on pair labels, Adadelta + StepLR, a test pass
thresholding outputs > 0.5 under eval() + no_grad.

Source: pytorch/examples, siamese_network/main.py, commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Reduced: a toy-width ResNet trunk (_nets.py) for torchvision's resnet18, 12x12 single-channel
pairs, 3 train batches of 8 pairs, 1 test batch.
"""

import torch
import torch.nn as nn
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR

from corpus._nets import resnet


class SiameseNetwork(nn.Module):
    def __init__(self):
        super(SiameseNetwork, self).__init__()
        self.resnet = resnet(in_ch=1)
        self.fc_in_features = self.resnet.fc.in_features
        self.resnet = torch.nn.Sequential(*(list(self.resnet.children())[:-1]))
        self.fc = nn.Sequential(nn.Linear(self.fc_in_features * 2, 16), nn.ReLU(inplace=True), nn.Linear(16, 1))
        self.sigmoid = nn.Sigmoid()
        self.resnet.apply(self.init_weights)
        self.fc.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        output = self.resnet(x)
        return output.view(output.size()[0], -1)

    def forward(self, input1, input2):
        output1 = self.forward_once(input1)
        output2 = self.forward_once(input2)
        output = torch.cat((output1, output2), 1)
        output = self.fc(output)
        return self.sigmoid(output)


def pairs(n, seed):
    g = torch.Generator().manual_seed(seed)
    return [(torch.rand(8, 1, 12, 12, generator=g), torch.rand(8, 1, 12, 12, generator=g),
             torch.tensor([1.0, 0.0] * 4)) for _ in range(n)]


def build():
    torch.manual_seed(0)
    train_loader, test_loader = pairs(3, 0), pairs(1, 1)
    model = SiameseNetwork()
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.7)

    def train():
        model.train()
        criterion = nn.BCELoss()
        for batch_idx, (images_1, images_2, targets) in enumerate(train_loader):
            optimizer.zero_grad()
            outputs = model(images_1, images_2).squeeze()
            loss = criterion(outputs, targets)
            loss.backward()
            optimizer.step()
        model.eval()
        test_loss, correct = 0, 0
        with torch.no_grad():
            for images_1, images_2, targets in test_loader:
                outputs = model(images_1, images_2).squeeze()
                test_loss += criterion(outputs, targets).sum().item()
                pred = torch.where(outputs > 0.5, 1, 0)
                correct += pred.eq(targets.view_as(pred)).sum().item()
        scheduler.step()

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
