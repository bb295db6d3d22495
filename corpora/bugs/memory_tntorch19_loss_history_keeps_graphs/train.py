# Source: rballester/tntorch, tntorch/autodiff.py (optimize), tntorch/metrics.py (relative_error), commit 7c0d489d93d1eb1134941596a4a416222bbeeefe
# Report: https://github.com/rballester/tntorch/pull/19
# Fitting a 100x100 picture with a low-rank tensor-train (TT) decomposition through tntorch's
# high-level optimize() loop. The picture is synthetic (smooth blobs + stripes); tn.Tensor is
# reduced to its TT cores and full().
import time
from functools import reduce

import numpy as np
import torch


class Tensor:
    def __init__(self, cores):
        self.cores = cores
        self.Us = [None] * len(cores)

    def full(self):
        t = self.cores[0]
        for c in self.cores[1:]:
            t = torch.tensordot(t, c, dims=([-1], [0]))
        return t[0, ..., 0]


def relative_error(gt, approx):
    if isinstance(approx, Tensor):
        approx = approx.full()
    return torch.dist(gt, approx) / torch.norm(gt)


def optimize(tensors, loss_function, optimizer=torch.optim.Adam, tol=1e-4, max_iter=1e4, print_freq=500, verbose=True):
    """
    High-level wrapper for iterative learning.

    Default stopping criterion: either the absolute (or relative) loss improvement must fall below `tol`.
    In addition, the rate loss improvement must be slowing down.
    """

    if not isinstance(tensors, (list, tuple)):
        tensors = [tensors]
    parameters = []
    for t in tensors:
        if isinstance(t, Tensor):
            parameters.extend([c for c in t.cores if c.requires_grad])
            parameters.extend([U for U in t.Us if U is not None and U.requires_grad])
        elif t.requires_grad:
            parameters.append(t)
    if len(parameters) == 0:
        raise ValueError("There are no parameters to optimize. Did you forget a requires_grad=True somewhere?")

    optimizer = optimizer(parameters)
    losses = []
    converged = False
    start = time.time()
    iter = 0
    while True:
        optimizer.zero_grad()
        loss = loss_function(*tensors)
        if not isinstance(loss, (tuple, list)):
            loss = [loss]
        losses.append(reduce(lambda x, y: x + y, loss))
        if len(losses) >= 2:
            delta_loss = (losses[-1] - losses[-2])
        else:
            delta_loss = float('-inf')
        if iter >= 2 and tol is not None and (losses[-1] <= tol or -delta_loss / losses[-1] <= tol) and losses[-2] - \
                losses[-1] < losses[-3] - losses[-2]:
            converged = True
            break
        if iter == max_iter:
            break
        if verbose and iter % print_freq == 0:
            print('iter: {: <{}} | loss: '.format(iter, len('{}'.format(max_iter))), end='')
            print(' + '.join(['{:10.6f}'.format(l.item()) for l in loss]), end='')
            if len(loss) > 1:
                print(' = {:10.4}'.format(losses[-1].item()), end='')
            print(' | total time: {:9.4f}'.format(time.time() - start))
        losses[-1].backward(retain_graph=True)
        optimizer.step()
        iter += 1
    if verbose:
        print('iter: {: <{}} | loss: '.format(iter, len('{}'.format(max_iter))), end='')
        print(' + '.join(['{:10.6f}'.format(l.item()) for l in loss]), end='')
        if len(loss) > 1:
            print(' = {:10.4}'.format(losses[-1].item()), end='')
        print(' | total time: {:9.4f}'.format(time.time() - start), end='')
        if converged:
            print(' <- converged (tol={})'.format(tol))
        else:
            print(' <- max_iter was reached: {}'.format(max_iter))


def rss_mb():
    with open('/proc/self/statm') as f:
        return int(f.read().split()[1]) * 4096 / 2 ** 20


def main():
    torch.manual_seed(0)
    x = np.linspace(-1, 1, 100)
    X, Y = np.meshgrid(x, x)
    picture = np.exp(-8 * ((X - 0.3) ** 2 + (Y + 0.2) ** 2)) + 0.5 * np.exp(-20 * ((X + 0.4) ** 2 + (Y - 0.4) ** 2)) \
        + 0.2 * np.sin(6 * X) * np.cos(4 * Y) + 0.05 * np.random.RandomState(0).randn(100, 100)
    gt = torch.tensor(picture, dtype=torch.float32)

    rank = 10
    t = Tensor([torch.randn(1, 100, rank, requires_grad=True), torch.randn(rank, 100, 1, requires_grad=True)])

    def loss(t):
        return relative_error(gt, t) ** 2

    rss0 = rss_mb()
    optimize(t, loss, tol=0, max_iter=3000, print_freq=500)
    rss1 = rss_mb()
    print('relative error: {:.4f} | RSS {:.0f} MB -> {:.0f} MB'.format(relative_error(gt, t).item(), rss0, rss1))


if __name__ == "__main__":
    main()
