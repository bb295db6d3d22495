# Source: wiseodd/generative-models, GAN/infogan/infogan_pytorch.py, commit b930d5fa9e2f69adfd4ea8ec759f38f6ce6da4c2
# https://github.com/wiseodd/generative-models/blob/master/GAN/infogan/infogan_pytorch.py
#
# InfoGAN with hand-written parameters: weights are plain leaf tensors (Variable(..., requires_grad=True)), no
# nn.Module; the discriminator step back-propagates into the generator's weights too (G_sample is not detached)
# and reset_grad() then replaces every .grad with a new zero tensor; the generator's parameters are in TWO
# optimizers (G_solver and Q_solver = Adam(G_params + Q_params)), so the mutual-information loss also updates G
# with its own Adam moments; G_sample is recomputed three times per iteration with the same z, c; the
# non-saturating G loss -log D(G(z)); biases broadcast with .repeat; log(x + 1e-8) guards; the loop runs at
# module level (here under the __main__ guard).
# Adaptation: MNIST through tensorflow's input_data replaced by a stand-in with the same next_batch API over 5000
# synthetic 8x8 "digits" (10 binary prototypes + noise), so X_dim 784 -> 64; 100000 -> 2000 iterations, printing
# every 250 instead of 1000; matplotlib sample grids replaced by two printed numbers: the mutual-information loss
# and the mean distance of generated images to the nearest class prototype; seeds fixed.
import torch
import torch.nn.functional as nn
import torch.autograd as autograd
import torch.optim as optim
import numpy as np
import os
from torch.autograd import Variable


class _Split:
    """Stand-in for tensorflow's MNIST helper: 10 classes of 8x8 'digits' (a prototype per class + noise)."""

    def __init__(self, n, seed):
        rng = np.random.RandomState(seed)
        self.prototypes = (np.random.RandomState(1234).rand(10, 64) > 0.6).astype(np.float32)
        labels = rng.randint(0, 10, n)
        self.images = np.clip(self.prototypes[labels] + 0.1 * rng.randn(n, 64), 0, 1).astype(np.float32)
        self.labels = np.eye(10, dtype=np.float32)[labels]
        self.rng = rng

    def next_batch(self, batch_size):
        idx = self.rng.randint(0, len(self.images), batch_size)
        return self.images[idx], self.labels[idx]


class _Mnist:
    def __init__(self):
        self.train = _Split(5000, seed=0)


np.random.seed(0)
torch.manual_seed(0)
mnist = _Mnist()
mb_size = 32
Z_dim = 16
X_dim = mnist.train.images.shape[1]
y_dim = mnist.train.labels.shape[1]
h_dim = 128
cnt = 0
lr = 1e-3
N_ITERS = 2000


def xavier_init(size):
    in_dim = size[0]
    xavier_stddev = 1. / np.sqrt(in_dim / 2.)
    return Variable(torch.randn(*size) * xavier_stddev, requires_grad=True)


""" ==================== GENERATOR ======================== """

Wzh = xavier_init(size=[Z_dim + 10, h_dim])
bzh = Variable(torch.zeros(h_dim), requires_grad=True)

Whx = xavier_init(size=[h_dim, X_dim])
bhx = Variable(torch.zeros(X_dim), requires_grad=True)


def G(z, c):
    inputs = torch.cat([z, c], 1)
    h = nn.relu(inputs @ Wzh + bzh.repeat(inputs.size(0), 1))
    X = nn.sigmoid(h @ Whx + bhx.repeat(h.size(0), 1))
    return X


""" ==================== DISCRIMINATOR ======================== """

Wxh = xavier_init(size=[X_dim, h_dim])
bxh = Variable(torch.zeros(h_dim), requires_grad=True)

Why = xavier_init(size=[h_dim, 1])
bhy = Variable(torch.zeros(1), requires_grad=True)


def D(X):
    h = nn.relu(X @ Wxh + bxh.repeat(X.size(0), 1))
    y = nn.sigmoid(h @ Why + bhy.repeat(h.size(0), 1))
    return y


""" ====================== Q(c|X) ========================== """

Wqxh = xavier_init(size=[X_dim, h_dim])
bqxh = Variable(torch.zeros(h_dim), requires_grad=True)

Whc = xavier_init(size=[h_dim, 10])
bhc = Variable(torch.zeros(10), requires_grad=True)


def Q(X):
    h = nn.relu(X @ Wqxh + bqxh.repeat(X.size(0), 1))
    c = nn.softmax(h @ Whc + bhc.repeat(h.size(0), 1))
    return c


G_params = [Wzh, bzh, Whx, bhx]
D_params = [Wxh, bxh, Why, bhy]
Q_params = [Wqxh, bqxh, Whc, bhc]
params = G_params + D_params + Q_params


""" ===================== TRAINING ======================== """


def reset_grad():
    for p in params:
        if p.grad is not None:
            data = p.grad.data
            p.grad = Variable(data.new().resize_as_(data).zero_())


G_solver = optim.Adam(G_params, lr=1e-3)
D_solver = optim.Adam(D_params, lr=1e-3)
Q_solver = optim.Adam(G_params + Q_params, lr=1e-3)


def sample_c(size):
    c = np.random.multinomial(1, 10*[0.1], size=size)
    c = Variable(torch.from_numpy(c.astype('float32')))
    return c


def sample_quality(G_sample):
    """Mean distance of generated images to their nearest class prototype (lower = closer to the data)."""
    d = ((G_sample.data.numpy()[:, None, :] - mnist.train.prototypes[None]) ** 2).sum(-1)
    return float(np.sqrt(d.min(1)).mean())


if __name__ == '__main__':
    history = []
    for it in range(N_ITERS):
        # Sample data
        X, _ = mnist.train.next_batch(mb_size)
        X = Variable(torch.from_numpy(X))

        z = Variable(torch.randn(mb_size, Z_dim))
        c = sample_c(mb_size)

        # Dicriminator forward-loss-backward-update
        G_sample = G(z, c)
        D_real = D(X)
        D_fake = D(G_sample)

        D_loss = -torch.mean(torch.log(D_real + 1e-8) + torch.log(1 - D_fake + 1e-8))

        D_loss.backward()
        D_solver.step()

        # Housekeeping - reset gradient
        reset_grad()

        # Generator forward-loss-backward-update
        G_sample = G(z, c)
        D_fake = D(G_sample)

        G_loss = -torch.mean(torch.log(D_fake + 1e-8))

        G_loss.backward()
        G_solver.step()

        # Housekeeping - reset gradient
        reset_grad()

        # Q forward-loss-backward-update
        G_sample = G(z, c)
        Q_c_given_x = Q(G_sample)

        crossent_loss = torch.mean(-torch.sum(c * torch.log(Q_c_given_x + 1e-8), dim=1))
        mi_loss = crossent_loss

        mi_loss.backward()
        Q_solver.step()

        # Housekeeping - reset gradient
        reset_grad()

        # Print and plot every now and then
        if it % 250 == 0 or it == N_ITERS - 1:
            idx = np.random.randint(0, 10)
            c = np.zeros([mb_size, 10])
            c[range(mb_size), idx] = 1
            c = Variable(torch.from_numpy(c.astype('float32')))
            samples = G(z, c).data.numpy()[:16]

            print('Iter-{}; D_loss: {}; G_loss: {}; Idx: {}'
                  .format(it, D_loss.data.numpy(), G_loss.data.numpy(), idx))
            history.append((mi_loss.item(), sample_quality(G(z, c))))
            print('         mi_loss: {:.4f}; distance of samples to nearest prototype: {:.3f}'.format(*history[-1]))

    print('[summary] mi_loss first={:.4f} last={:.4f} decreased={}'.format(history[0][0], history[-1][0], history[-1][0] < history[0][0]))
    print('[summary] sample distance to nearest prototype first={:.3f} last={:.3f} decreased={}'.format(history[0][1], history[-1][1], history[-1][1] < history[0][1]))
