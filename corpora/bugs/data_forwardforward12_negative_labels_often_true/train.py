# Source: mpezeshki/pytorch_forward_forward, main.py, commit 1c7a2114bbf85a055dfb50bb13f1516534e9f35d
# Report: https://github.com/mpezeshki/pytorch_forward_forward/pull/12
# Hinton's Forward-Forward algorithm: each layer is trained on its own to give high
# "goodness" to positive data (image with its label written into the first 10 pixels) and
# low goodness to negative data (image with a wrong label). MNIST is replaced by synthetic
# 64-pixel class prototypes with noise, the 784-500-500 net by 64-100-100.
import numpy as np
import torch
import torch.nn as nn
from torch.optim import Adam


def synthetic_loaders(n_train=2000, n_test=1000, dim=64, seed=0):
    rng = np.random.RandomState(seed)
    protos = rng.rand(10, dim).astype(np.float32)

    def make(n):
        y = rng.randint(0, 10, size=n)
        x = protos[y] + 0.9 * rng.randn(n, dim).astype(np.float32)
        x = (x - 0.5) / 0.3
        return torch.from_numpy(x.astype(np.float32)), torch.from_numpy(y)

    return make(n_train), make(n_test)


def overlay_y_on_x(x, y):
    """Replace the first 10 pixels of data [x] with one-hot-encoded label [y]
    """
    x_ = x.clone()
    x_[:, :10] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Net(torch.nn.Module):

    def __init__(self, dims):
        super().__init__()
        self.layers = []
        for d in range(len(dims) - 1):
            self.layers += [Layer(dims[d], dims[d + 1])]

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness += [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1)

    def train(self, x_pos, x_neg):
        h_pos, h_neg = x_pos, x_neg
        for i, layer in enumerate(self.layers):
            print('training layer', i, '...')
            h_pos, h_neg = layer.train(h_pos, h_neg)


class Layer(nn.Linear):
    def __init__(self, in_features, out_features,
                 bias=True, device=None, dtype=None):
        super().__init__(in_features, out_features, bias, device, dtype)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=0.03)
        self.threshold = 2.0
        self.num_epochs = 300

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(
            torch.mm(x_direction, self.weight.T) +
            self.bias.unsqueeze(0))

    def train(self, x_pos, x_neg):
        for i in range(self.num_epochs):
            g_pos = self.forward(x_pos).pow(2).mean(1)
            g_neg = self.forward(x_neg).pow(2).mean(1)
            loss = torch.log(1 + torch.exp(torch.cat([
                -g_pos + self.threshold,
                g_neg - self.threshold]))).mean()
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            if i % 100 == 0 or i == self.num_epochs - 1:
                print('  step %d loss %.4f g_pos %.3f g_neg %.3f' % (
                    i, loss.item(), g_pos.mean().item(), g_neg.mean().item()))
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


if __name__ == "__main__":
    torch.manual_seed(1234)
    (x, y), (x_te, y_te) = synthetic_loaders()

    net = Net([64, 100, 100])
    x_pos = overlay_y_on_x(x, y)
    rnd = torch.randperm(x.size(0))
    y_neg = y[rnd]
    x_neg = overlay_y_on_x(x, y_neg)
    print('negative samples: %d, carrying their true label: %d' % (len(y_neg), (y_neg == y).sum().item()))

    net.train(x_pos, x_neg)

    print('train error:', 1.0 - net.predict(x).eq(y).float().mean().item())
    print('test error:', 1.0 - net.predict(x_te).eq(y_te).float().mean().item())
