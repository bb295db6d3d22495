# Source: rtqichen/torchdiffeq, examples/ode_demo.py (+ torchdiffeq/_impl/rk_common.py rk4_alt_step_func), commit 657943acefa826ef04c025ebeb1ff5e9d60dc268
# https://github.com/rtqichen/torchdiffeq
#
# The neural-ODE demo: the ground-truth spiral dy/dt = (y**3) @ A is integrated once under no_grad; an MLP
# vector field f(t, y) = net(y**3) that ignores t is fitted by backpropagating through the solver on random
# 10-point windows with an L1 loss and RMSprop; every test_freq iterations the whole 1000-point trajectory
# is integrated under no_grad from true_y0 and the mean absolute error printed.
# Adaptation: the torchdiffeq package is not installed, so `odeint` below is a fixed-grid solver using
# torchdiffeq's own rk4_alt_step_func (3/8 rule) on each interval of t (2 sub-steps per interval; 8 for the ground truth), with the
# same call signature and output layout (T, *y0.shape); the demo's default is adaptive dopri5. niters 2000
# -> 300, test_freq 20 -> 100; --viz / matplotlib parts removed; argparse defaults kept (parse_args([])).
import argparse
import time

import numpy as np

import torch
import torch.nn as nn
import torch.optim as optim

parser = argparse.ArgumentParser('ODE demo')
parser.add_argument('--method', type=str, choices=['dopri5', 'adams'], default='dopri5')
parser.add_argument('--data_size', type=int, default=1000)
parser.add_argument('--batch_time', type=int, default=10)
parser.add_argument('--batch_size', type=int, default=20)
parser.add_argument('--niters', type=int, default=2000)
parser.add_argument('--test_freq', type=int, default=20)
parser.add_argument('--viz', action='store_true')
parser.add_argument('--gpu', type=int, default=0)
parser.add_argument('--adjoint', action='store_true')
args = parser.parse_args(['--niters', '300', '--test_freq', '100'])

_one_third = 1 / 3
_two_thirds = 2 / 3


def rk4_alt_step_func(func, t0, dt, t1, y0):
    k1 = func(t0, y0)
    k2 = func(t0 + dt * _one_third, y0 + dt * k1 * _one_third)
    k3 = func(t0 + dt * _two_thirds, y0 + dt * (k2 - k1 * _one_third))
    k4 = func(t1, y0 + dt * (k1 - k2 + k3))
    return (k1 + 3 * (k2 + k3) + k4) * dt * 0.125


def odeint(func, y0, t, method=None, substeps=2):
    ys = [y0]
    y = y0
    for i in range(len(t) - 1):
        t0, dt = t[i], (t[i + 1] - t[i]) / substeps
        for j in range(substeps):
            ta = t0 + j * dt
            y = y + rk4_alt_step_func(func, ta, dt, ta + dt, y)
        ys.append(y)
    return torch.stack(ys, 0)


device = torch.device('cuda:' + str(args.gpu) if torch.cuda.is_available() else 'cpu')

true_y0 = torch.tensor([[2., 0.]]).to(device)
t = torch.linspace(0., 25., args.data_size).to(device)
true_A = torch.tensor([[-0.1, 2.0], [-2.0, -0.1]]).to(device)


class Lambda(nn.Module):

    def forward(self, t, y):
        return torch.mm(y**3, true_A)


with torch.no_grad():
    true_y = odeint(Lambda(), true_y0, t, method='dopri5', substeps=8)


def get_batch():
    s = torch.from_numpy(np.random.choice(np.arange(args.data_size - args.batch_time, dtype=np.int64), args.batch_size, replace=False))
    batch_y0 = true_y[s]  # (M, D)
    batch_t = t[:args.batch_time]  # (T)
    batch_y = torch.stack([true_y[s + i] for i in range(args.batch_time)], dim=0)  # (T, M, D)
    return batch_y0.to(device), batch_t.to(device), batch_y.to(device)


class ODEFunc(nn.Module):

    def __init__(self):
        super(ODEFunc, self).__init__()

        self.net = nn.Sequential(
            nn.Linear(2, 50),
            nn.Tanh(),
            nn.Linear(50, 2),
        )

        for m in self.net.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, mean=0, std=0.1)
                nn.init.constant_(m.bias, val=0)

    def forward(self, t, y):
        return self.net(y**3)


class RunningAverageMeter(object):
    """Computes and stores the average and current value"""

    def __init__(self, momentum=0.99):
        self.momentum = momentum
        self.reset()

    def reset(self):
        self.val = None
        self.avg = 0

    def update(self, val):
        if self.val is None:
            self.avg = val
        else:
            self.avg = self.avg * self.momentum + val * (1 - self.momentum)
        self.val = val


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    ii = 0

    func = ODEFunc().to(device)

    optimizer = optim.RMSprop(func.parameters(), lr=1e-3)
    end = time.time()

    time_meter = RunningAverageMeter(0.97)

    loss_meter = RunningAverageMeter(0.97)

    with torch.no_grad():
        pred_y = odeint(func, true_y0, t)
        print('Iter {:04d} | Total Loss {:.6f}'.format(0, torch.mean(torch.abs(pred_y - true_y)).item()))

    for itr in range(1, args.niters + 1):
        optimizer.zero_grad()
        batch_y0, batch_t, batch_y = get_batch()
        pred_y = odeint(func, batch_y0, batch_t).to(device)
        loss = torch.mean(torch.abs(pred_y - batch_y))
        loss.backward()
        optimizer.step()

        time_meter.update(time.time() - end)
        loss_meter.update(loss.item())

        if itr % args.test_freq == 0:
            with torch.no_grad():
                pred_y = odeint(func, true_y0, t)
                loss = torch.mean(torch.abs(pred_y - true_y))
                print('Iter {:04d} | Total Loss {:.6f} | batch loss avg {:.6f}'.format(itr, loss.item(), loss_meter.avg))
                ii += 1

        end = time.time()


if __name__ == '__main__':
    main()
