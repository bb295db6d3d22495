# Source: locuslab/fast_adversarial, MNIST/train_mnist.py + MNIST/mnist_net.py, commit 54f728755e71857b632882ba6d6cef22f56e2172
# https://github.com/locuslab/fast_adversarial
#
# "Fast is better than free": FGSM adversarial training with a random start. The attack's loss.backward()
# writes gradients into the model parameters as well as into delta; they are thrown away by the
# opt.zero_grad() before the training backward. delta is edited through .data, the learning rate follows a
# cyclic (triangular) schedule that starts at 0 and is written into param_groups by hand every step.
# Adaptation: MNIST download replaced by synthetic 28x28 digit-like images in [0, 1] (class templates of
# strokes + noise); .cuda() removed; epochs 10 -> 3, 3000 training images; epsilon 0.3 -> 0.2 and
# alpha 0.375 -> 0.25 (same alpha/epsilon ratio 1.25); argparse -> a namespace of constants; the model file
# is not written; a clean + FGSM test accuracy is printed at the end.
import logging
import time
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

logger = logging.getLogger(__name__)
logging.basicConfig(
    format='[%(asctime)s] - %(message)s',
    datefmt='%Y/%m/%d %H:%M:%S',
    level=logging.DEBUG)


class Flatten(nn.Module):
    def forward(self, x):
        return x.view(x.size(0), -1)


def mnist_net():
    model = nn.Sequential(
        nn.Conv2d(1, 16, 4, stride=2, padding=1),
        nn.ReLU(),
        nn.Conv2d(16, 32, 4, stride=2, padding=1),
        nn.ReLU(),
        Flatten(),
        nn.Linear(32*7*7,100),
        nn.ReLU(),
        nn.Linear(100, 10)
    )
    return model


def synthetic_mnist(n, seed):
    g = torch.Generator().manual_seed(1234)
    templates = torch.zeros(10, 1, 28, 28)
    for c in range(10):
        for _ in range(4):
            r, col = torch.randint(4, 20, (2,), generator=g).tolist()
            if torch.rand(1, generator=g).item() < 0.5:
                templates[c, 0, r:r + 3, col:col + 8] = 1.0
            else:
                templates[c, 0, r:r + 8, col:col + 3] = 1.0
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 10, (n,), generator=g)
    X = templates[y] * (0.7 + 0.3 * torch.rand(n, 1, 1, 1, generator=g))
    X = (X + 0.25 * torch.randn(n, 1, 28, 28, generator=g)).clamp(0, 1)
    return X, y


def get_args():
    return SimpleNamespace(batch_size=100, epochs=3, attack='fgsm', epsilon=0.2, alpha=0.25,
                           attack_iters=40, lr_max=5e-3, lr_type='cyclic', seed=0)


def main():
    args = get_args()
    logger.info(args)

    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    torch.cuda.manual_seed(args.seed)

    mnist_train = TensorDataset(*synthetic_mnist(3000, seed=1))
    train_loader = DataLoader(mnist_train, batch_size=args.batch_size, shuffle=True)

    model = mnist_net()
    model.train()

    opt = torch.optim.Adam(model.parameters(), lr=args.lr_max)
    if args.lr_type == 'cyclic':
        lr_schedule = lambda t: np.interp([t], [0, args.epochs * 2//5, args.epochs], [0, args.lr_max, 0])[0]
    elif args.lr_type == 'flat':
        lr_schedule = lambda t: args.lr_max
    else:
        raise ValueError('Unknown lr_type')

    criterion = nn.CrossEntropyLoss()

    logger.info('Epoch \t Time \t LR \t \t Train Loss \t Train Acc')
    for epoch in range(args.epochs):
        start_time = time.time()
        train_loss = 0
        train_acc = 0
        train_n = 0
        for i, (X, y) in enumerate(train_loader):
            lr = lr_schedule(epoch + (i+1)/len(train_loader))
            opt.param_groups[0].update(lr=lr)

            if args.attack == 'fgsm':
                delta = torch.zeros_like(X).uniform_(-args.epsilon, args.epsilon)
                delta.requires_grad = True
                output = model(X + delta)
                loss = F.cross_entropy(output, y)
                loss.backward()
                grad = delta.grad.detach()
                delta.data = torch.clamp(delta + args.alpha * torch.sign(grad), -args.epsilon, args.epsilon)
                delta.data = torch.max(torch.min(1-X, delta.data), 0-X)
                delta = delta.detach()
            elif args.attack == 'none':
                delta = torch.zeros_like(X)
            elif args.attack == 'pgd':
                delta = torch.zeros_like(X).uniform_(-args.epsilon, args.epsilon)
                delta.data = torch.max(torch.min(1-X, delta.data), 0-X)
                for _ in range(args.attack_iters):
                    delta.requires_grad = True
                    output = model(X + delta)
                    loss = criterion(output, y)
                    opt.zero_grad()
                    loss.backward()
                    grad = delta.grad.detach()
                    I = output.max(1)[1] == y
                    delta.data[I] = torch.clamp(delta + args.alpha * torch.sign(grad), -args.epsilon, args.epsilon)[I]
                    delta.data[I] = torch.max(torch.min(1-X, delta.data), 0-X)[I]
                delta = delta.detach()
            output = model(torch.clamp(X + delta, 0, 1))
            loss = criterion(output, y)
            opt.zero_grad()
            loss.backward()
            opt.step()

            train_loss += loss.item() * y.size(0)
            train_acc += (output.max(1)[1] == y).sum().item()
            train_n += y.size(0)

        train_time = time.time()
        logger.info('%d \t %.1f \t %.4f \t %.4f \t %.4f',
            epoch, train_time - start_time, lr, train_loss/train_n, train_acc/train_n)

    # evaluation in the style of evaluate_mnist.py: clean and FGSM (eps) accuracy on held-out images
    model.eval()
    X_test, y_test = synthetic_mnist(1000, seed=2)
    with torch.no_grad():
        clean_acc = (model(X_test).max(1)[1] == y_test).float().mean().item()
    delta = torch.zeros_like(X_test, requires_grad=True)
    loss = F.cross_entropy(model(X_test + delta), y_test)
    grad = torch.autograd.grad(loss, delta)[0]
    X_adv = torch.clamp(X_test + args.epsilon * torch.sign(grad), 0, 1)
    with torch.no_grad():
        adv_acc = (model(X_adv).max(1)[1] == y_test).float().mean().item()
    logger.info('Test clean acc %.4f \t FGSM acc %.4f', clean_acc, adv_acc)


if __name__ == "__main__":
    main()
