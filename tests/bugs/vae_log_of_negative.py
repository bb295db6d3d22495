"""Variational autoencoder: reparameterization, BCE(sum) + KL, eval() test pass, decode samples.

Source: pytorch/examples, vae/main.py, commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Reduced: 64-pixel images, hidden 32, latent 4, random data in [0, 1], 3 batches.

Mutation: the KL term written with `torch.log(logvar)` as if the encoder's second head were a variance (it is a log-variance and goes negative).
Expected: error numerical.nonfinite_loss, op aten::log, at the KLD line.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset

D = 64


class VAE(nn.Module):
    def __init__(self):
        super(VAE, self).__init__()
        self.fc1 = nn.Linear(D, 32)
        self.fc21 = nn.Linear(32, 4)
        self.fc22 = nn.Linear(32, 4)
        self.fc3 = nn.Linear(4, 32)
        self.fc4 = nn.Linear(32, D)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, D))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    BCE = F.binary_cross_entropy(recon_x, x.view(-1, D), reduction="sum")
    KLD = -0.5 * torch.sum(1 + torch.log(logvar) - mu.pow(2) - logvar)  # <- bug
    return BCE + KLD


def build():
    torch.manual_seed(1)
    train_loader = DataLoader(TensorDataset(torch.rand(24, 1, 8, 8), torch.zeros(24)), batch_size=8, shuffle=True)
    test_loader = DataLoader(TensorDataset(torch.rand(8, 1, 8, 8), torch.zeros(8)), batch_size=8)
    model = VAE()
    optimizer = optim.Adam(model.parameters(), lr=1e-3)

    def train():
        for epoch in range(1, 2):
            model.train()
            train_loss = 0
            for batch_idx, (data, _) in enumerate(train_loader):
                optimizer.zero_grad()
                recon_batch, mu, logvar = model(data)
                loss = loss_function(recon_batch, data, mu, logvar)
                loss.backward()
                train_loss += loss.item()
                optimizer.step()
            model.eval()
            test_loss = 0
            with torch.no_grad():
                for i, (data, _) in enumerate(test_loader):
                    recon_batch, mu, logvar = model(data)
                    test_loss += loss_function(recon_batch, data, mu, logvar).item()
                    if i == 0:
                        n = min(data.size(0), 8)
                        comparison = torch.cat([data[:n], recon_batch.view(8, 1, 8, 8)[:n]])
            with torch.no_grad():
                sample = torch.randn(16, 4)
                sample = model.decode(sample).cpu()
                grid = sample.view(16, 1, 8, 8)
            return comparison, grid

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
