"""Forward-forward training: each layer is an nn.Linear subclass with its own Adam optimizer and a
local goodness loss on positive / negative data (labels overlaid on the image), layers kept in a
plain Python list on the Net and trained one after another on the previous layer's detached
outputs; prediction by the label with the highest goodness (argmax).

Source: pytorch/examples, mnist_forward_forward/main.py, commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Reduced: 20-pixel inputs, dims [20, 16, 16], 3 epochs per layer, batch 16.
"""

import torch
import torch.nn as nn
from torch.optim import Adam

lr, threshold, epochs = 0.03, 2.0, 3


def overlay_y_on_x(x, y):
    x_ = x.clone()
    x_[:, :10] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=lr)
        self.threshold = threshold
        self.num_epochs = epochs

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        for i in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log1p(torch.exp(torch.cat([-g_pos + self.threshold, g_neg - self.threshold]))).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


class Net(torch.nn.Module):
    def __init__(self, dims):
        super().__init__()
        self.layers = []
        for d in range(len(dims) - 1):
            self.layers = self.layers + [Layer(dims[d], dims[d + 1])]

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness = goodness + [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1)

    def train(self, x_pos, x_neg):
        h_pos, h_neg = x_pos, x_neg
        for i, layer in enumerate(self.layers):
            h_pos, h_neg = layer.train(h_pos, h_neg)


def build():
    torch.manual_seed(1234)
    x, y = torch.rand(16, 20), torch.randint(0, 10, (16,))
    x_te, y_te = torch.rand(8, 20), torch.randint(0, 10, (8,))
    net = Net([20, 16, 16])

    def train():
        x_pos = overlay_y_on_x(x, y)
        rnd = torch.randperm(x.size(0))
        x_neg = overlay_y_on_x(x, y[rnd])
        net.train(x_pos, x_neg)
        train_error = 1.0 - net.predict(x).eq(y).float().mean().item()
        test_error = 1.0 - net.predict(x_te).eq(y_te).float().mean().item()
        return train_error, test_error

    return net.layers, [layer.opt for layer in net.layers], train


if __name__ == "__main__":
    build()[2]()
