"""Sub-pixel super-resolution (ESPCN): conv stack + PixelShuffle, orthogonal init, MSELoss, Adam,
a PSNR test pass under no_grad (the model has no dropout or batch norm), a checkpoint of the
whole model.

Source: pytorch/examples, super_resolution/main.py and model.py, commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Reduced: channels 64/64/32 -> 8/8/8, 8x8 inputs upscaled x2, 3 train batches, 1 test batch;
the checkpoint goes to an in-memory buffer.
"""

import io
from math import log10

import torch
import torch.nn as nn
import torch.nn.init as init
import torch.optim as optim


class Net(nn.Module):
    def __init__(self, upscale_factor):
        super(Net, self).__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, 8, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(8, 8, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(8, 8, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(8, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        return self.pixel_shuffle(self.conv4(x))

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv2.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv3.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv4.weight)


def build():
    torch.manual_seed(123)
    hr = torch.rand(32, 1, 16, 16)
    lr_imgs = torch.nn.functional.avg_pool2d(hr, 2)
    training_data_loader = [(lr_imgs[i:i + 8], hr[i:i + 8]) for i in range(0, 24, 8)]
    testing_data_loader = [(lr_imgs[24:], hr[24:])]
    model = Net(upscale_factor=2)
    criterion = nn.MSELoss()
    optimizer = optim.Adam(model.parameters(), lr=0.01)

    def train():
        for epoch in range(1, 2):
            epoch_loss = 0
            for iteration, batch in enumerate(training_data_loader, 1):
                input, target = batch[0], batch[1]
                optimizer.zero_grad()
                loss = criterion(model(input), target)
                epoch_loss += loss.item()
                loss.backward()
                optimizer.step()
            avg_psnr = 0
            with torch.no_grad():
                for batch in testing_data_loader:
                    input, target = batch[0], batch[1]
                    prediction = model(input)
                    mse = criterion(prediction, target)
                    avg_psnr += 10 * log10(1 / mse.item())
            torch.save(model, io.BytesIO())

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
