# Source: ChrisWaites/pyvacy, tutorials/mnist.py + pyvacy/sampling/batch_samplers.py, commit 1f03e27b38083183d706b4c8012731dfdfd50bfd;
# the DPOptimizerClass (microbatch API used by that tutorial) from pyvacy/optim/dp_optimizer.py of the fork
# jpgard/pyvacy at commit f9df3c34959b3525addf774b2476624ab04f5d88
# DP-SGD by hand: Poisson-sampled minibatches, per-example (microbatch_size=1) backward, per-example L2 clipping of
# the full gradient vector, accumulation in optimizer-held buffers, Gaussian noise l2_norm_clip*noise_multiplier,
# scaling by microbatch/minibatch size, then the wrapped torch.optim.SGD step.
# Suspicious-looking but correct patterns kept from the original:
#   - optimizer.zero_grad() is overridden and only clears the private accum_grads; p.grad is cleared per example by
#     zero_microbatch_grad(); step() OVERWRITES p.grad.data with accum + noise (the raw per-example grad left in
#     p.grad is replaced; it was already clipped into accum)
#   - every update adds isotropic N(0, (clip*sigma)^2) noise to every coordinate, so the loss is noisy and can rise
#     between iterations; gradients are clipped per example, not per batch
#   - Poisson (IID) sampling gives a different minibatch size every iteration, while the scaling uses the nominal
#     minibatch_size; empty draws are skipped by the sampler
#   - extra state ('accum_grads') stored inside optimizer.param_groups; total norm read with .item() per example
#   - LogSoftmax in the model + NLLLoss; the printed loss is that of the last microbatch only
# Adaptation: MNIST replaced by synthetic 28x28 digit-like class templates + noise; the privacy accountant
# (analysis.epsilon) removed; iterations 14000 -> 40, minibatch 256 -> 32; model pickling and CUDA removed.
import numpy as np

import torch
import torch.nn as nn
from torch.optim import SGD
from torch.utils.data import DataLoader, TensorDataset


# Deterministic output
torch.manual_seed(0)
np.random.seed(0)


def make_optimizer_class(cls):
    class DPOptimizerClass(cls):
        def __init__(self, l2_norm_clip, noise_multiplier, minibatch_size, microbatch_size, *args, **kwargs):
            super(DPOptimizerClass, self).__init__(*args, **kwargs)

            self.l2_norm_clip = l2_norm_clip
            self.noise_multiplier = noise_multiplier
            self.microbatch_size = microbatch_size
            self.minibatch_size = minibatch_size

            for group in self.param_groups:
                group['accum_grads'] = [torch.zeros_like(param.data) if param.requires_grad else None for param in group['params']]

        def zero_microbatch_grad(self):
            super(DPOptimizerClass, self).zero_grad()

        def microbatch_step(self):
            total_norm = 0.
            for group in self.param_groups:
                for param in group['params']:
                    if param.requires_grad:
                        total_norm += param.grad.data.norm(2).item() ** 2.
            total_norm = total_norm ** .5
            if self.l2_norm_clip:  # Case: standard DP-SGD with clipping.
                clip_coef = min(self.l2_norm_clip / (total_norm + 1e-6), 1.)
            else:  # No clipping.
                clip_coef = 1.

            for group in self.param_groups:
                for param, accum_grad in zip(group['params'], group['accum_grads']):
                    if param.requires_grad:
                        accum_grad.add_(param.grad.data.mul(clip_coef))

        def zero_grad(self):
            for group in self.param_groups:
                for accum_grad in group['accum_grads']:
                    if accum_grad is not None:
                        accum_grad.zero_()

        def step(self, *args, **kwargs):
            for group in self.param_groups:
                for param, accum_grad in zip(group['params'], group['accum_grads']):
                    if param.requires_grad:
                        param.grad.data = accum_grad.clone()
                        if self.l2_norm_clip:  # Case: standard DP-SGD with clipping
                            param.grad.data.add_(self.l2_norm_clip * self.noise_multiplier * torch.randn_like(param.grad.data))
                        else:  # No clipping.
                            param.grad.data.add_(self.noise_multiplier * torch.randn_like(param.grad.data))
                        param.grad.data.mul_(self.microbatch_size / self.minibatch_size)
            super(DPOptimizerClass, self).step(*args, **kwargs)

    return DPOptimizerClass


DPSGD = make_optimizer_class(SGD)


class IIDBatchSampler:
    def __init__(self, dataset, minibatch_size, iterations):
        self.length = len(dataset)
        self.minibatch_size = minibatch_size
        self.iterations = iterations

    def __iter__(self):
        for _ in range(self.iterations):
            indices = np.where(torch.rand(self.length) < (self.minibatch_size / self.length))[0]
            if indices.size > 0:
                yield indices

    def __len__(self):
        return self.iterations


def get_data_loaders(minibatch_size, microbatch_size, iterations, drop_last=True):
    def minibatch_loader(dataset):
        return DataLoader(
            dataset,
            batch_sampler=IIDBatchSampler(dataset, minibatch_size, iterations)
        )

    def microbatch_loader(minibatch):
        return DataLoader(
            minibatch,
            batch_size=microbatch_size,
            drop_last=drop_last,
        )

    return minibatch_loader, microbatch_loader


class Flatten(nn.Module):
    def forward(self, x):
        return x.view(x.size(0), -1)


class Classifier(nn.Module):
    def __init__(self, input_dim, device='cpu'):
        super(Classifier, self).__init__()
        self.model = nn.Sequential(
            nn.Conv2d(1, 16, 8, 2),
            nn.ReLU(),
            nn.MaxPool2d(2, 1),
            nn.Conv2d(16, 32, 4, 2),
            nn.ReLU(),
            nn.MaxPool2d(2, 1),
            Flatten(),
            nn.Linear(288, 10),
            nn.LogSoftmax(dim=1)
        ).to(device)

    def forward(self, x):
        return self.model(x)


def synthetic_mnist(n, seed):
    """ 10 fixed random blob templates (one per digit) + pixel noise, normalised like Normalize((0.5,), (0.5,)). """
    g = torch.Generator().manual_seed(123)
    templates = (torch.rand(10, 1, 7, 7, generator=g) > 0.6).float()
    templates = torch.nn.functional.interpolate(templates, size=(28, 28), mode='nearest')
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    X = (templates[y] * 0.8 + 0.4 * torch.rand(n, 1, 28, 28, generator=g)).clamp(0, 1)
    return TensorDataset((X - 0.5) / 0.5, y)


def accuracy(classifier, dataset):
    X, y = next(iter(DataLoader(dataset, batch_size=len(dataset))))
    with torch.no_grad():
        y_pred = classifier(X).max(1)[1]
    return (y_pred == y).float().mean().item()


def train(params, train_dataset, test_dataset):
    classifier = Classifier(
        input_dim=np.prod(train_dataset[0][0].shape),
        device=params['device']
    )

    optimizer = DPSGD(
        l2_norm_clip=params['l2_norm_clip'],
        noise_multiplier=params['noise_multiplier'],
        minibatch_size=params['minibatch_size'],
        microbatch_size=params['microbatch_size'],
        params=classifier.parameters(),
        lr=params['lr'],
        weight_decay=params['l2_penalty'],
    )

    loss_function = nn.NLLLoss()

    minibatch_loader, microbatch_loader = get_data_loaders(
        params['minibatch_size'],
        params['microbatch_size'],
        params['iterations']
    )

    acc0 = accuracy(classifier, test_dataset)
    print('Initial test accuracy: {:.3f}'.format(acc0))
    iteration = 0
    for X_minibatch, y_minibatch in minibatch_loader(train_dataset):
        optimizer.zero_grad()
        for X_microbatch, y_microbatch in microbatch_loader(TensorDataset(X_minibatch, y_minibatch)):
            X_microbatch = X_microbatch.to(params['device'])
            y_microbatch = y_microbatch.to(params['device'])

            optimizer.zero_microbatch_grad()
            loss = loss_function(classifier(X_microbatch), y_microbatch)
            loss.backward()
            optimizer.microbatch_step()
        optimizer.step()

        if iteration % 10 == 0:
            print('[Iteration %d/%d] [Loss: %f] [Test acc: %.3f]' % (iteration, params['iterations'], loss.item(),
                                                                    accuracy(classifier, test_dataset)))
        iteration += 1

    return classifier, acc0


def main():
    params = dict(delta=1e-5, device='cpu', iterations=40, l2_norm_clip=1., l2_penalty=0.001, lr=0.15,
                  microbatch_size=1, minibatch_size=32, noise_multiplier=1.1)
    train_dataset = synthetic_mnist(2000, seed=1)
    test_dataset = synthetic_mnist(500, seed=2)
    classifier, acc0 = train(params, train_dataset, test_dataset)
    acc = accuracy(classifier, test_dataset)
    print('Test Accuracy: {}'.format(acc))
    print('[summary] test_accuracy first={:.3f} last={:.3f} increased={}'.format(acc0, acc, acc > acc0))


if __name__ == '__main__':
    main()
