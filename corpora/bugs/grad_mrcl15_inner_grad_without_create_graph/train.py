# Source: kjaved0/mrcl, model/meta_learner.py (MetaLearnerRegression), commit 07eb050d8daaf933f2d5a8d68d96b8182be4656d
# Report: https://github.com/kjaved0/mrcl/issues/15
import argparse

import numpy as np
import torch
from torch import nn, optim
from torch.nn import functional as F

torch.manual_seed(0)
np.random.seed(0)


class Learner(nn.Module):
    def __init__(self, config):
        super(Learner, self).__init__()
        self.vars = nn.ParameterList()
        for out_f, in_f, learn in config:
            w = nn.Parameter(torch.empty(out_f, in_f))
            torch.nn.init.kaiming_normal_(w)
            b = nn.Parameter(torch.zeros(out_f))
            w.learn = learn
            b.learn = learn
            self.vars.extend([w, b])

    def forward(self, x, vars=None, bn_training=True):
        if vars is None:
            vars = self.vars
        n = len(vars) // 2
        for i in range(n):
            x = F.linear(x, vars[2 * i], vars[2 * i + 1])
            if i < n - 1:
                x = F.relu(x)
        return x

    def parameters(self):
        return list(self.vars)


class MetaLearnerRegression(nn.Module):
    def __init__(self, args, config):
        super(MetaLearnerRegression, self).__init__()

        self.update_lr = args.update_lr
        self.meta_lr = args.meta_lr
        self.update_step = args.update_step

        self.net = Learner(config)
        self.optimizer = optim.Adam(self.net.parameters(), lr=self.meta_lr)
        self.meta_optim = torch.optim.lr_scheduler.MultiStepLR(self.optimizer, [1500, 2500, 3500], 0.3)

    def forward(self, x_traj, y_traj, x_rand, y_rand):

        losses_q = [0 for _ in range(len(x_traj) + 1)]

        for i in range(1):
            logits = self.net(x_traj[0], vars=None, bn_training=True)
            logits_select = []
            for no, val in enumerate(y_traj[0, :, 1].long()):
                logits_select.append(logits[no, val])
            logits = torch.stack(logits_select).unsqueeze(1)
            loss = F.mse_loss(logits, y_traj[0, :, 0].unsqueeze(1))
            grad = torch.autograd.grad(loss, self.net.parameters())

            fast_weights = list(
                map(lambda p: p[1] - self.update_lr * p[0] if p[1].learn else p[1], zip(grad, self.net.parameters())))
            for params_old, params_new in zip(self.net.parameters(), fast_weights):
                params_new.learn = params_old.learn

            with torch.no_grad():

                logits = self.net(x_rand[0], vars=None, bn_training=True)

                logits_select = []
                for no, val in enumerate(y_rand[0, :, 1].long()):
                    logits_select.append(logits[no, val])
                logits = torch.stack(logits_select).unsqueeze(1)
                loss_q = F.mse_loss(logits, y_rand[0, :, 0].unsqueeze(1))
                losses_q[0] += loss_q

            for k in range(1, len(x_traj)):
                logits = self.net(x_traj[k], fast_weights, bn_training=True)

                logits_select = []
                for no, val in enumerate(y_traj[k, :, 1].long()):
                    logits_select.append(logits[no, val])
                logits = torch.stack(logits_select).unsqueeze(1)

                loss = F.mse_loss(logits, y_traj[k, :, 0].unsqueeze(1))
                grad = torch.autograd.grad(loss, fast_weights)
                fast_weights = list(
                    map(lambda p: p[1] - self.update_lr * p[0] if p[1].learn else p[1], zip(grad, fast_weights)))

                for params_old, params_new in zip(self.net.parameters(), fast_weights):
                    params_new.learn = params_old.learn

                logits_q = self.net(x_rand[0, 0:int((k + 1) * len(x_rand[0]) / len(x_traj)), :], fast_weights,
                                    bn_training=True)

                logits_select = []
                for no, val in enumerate(y_rand[0, 0:int((k + 1) * len(x_rand[0]) / len(x_traj)), 1].long()):
                    logits_select.append(logits_q[no, val])
                logits = torch.stack(logits_select).unsqueeze(1)
                loss_q = F.mse_loss(logits, y_rand[0, 0:int((k + 1) * len(x_rand[0]) / len(x_traj)), 0].unsqueeze(1))

                losses_q[k + 1] += loss_q

        self.optimizer.zero_grad()

        loss_q = losses_q[k + 1]
        loss_q.backward()

        self.optimizer.step()

        return losses_q


def sample_episode(rng, tasks=10, per_task=8):
    # incremental sine regression: one task per inner step, task id one-hot in the input
    amp = rng.uniform(0.1, 5.0, tasks)
    phase = rng.uniform(0, np.pi, tasks)
    x_traj, y_traj = [], []
    for t in range(tasks):
        x = rng.uniform(-5, 5, (per_task * 2, 1))
        onehot = np.zeros((per_task * 2, tasks))
        onehot[:, t] = 1
        inp = np.concatenate([x, onehot], 1)
        y = amp[t] * np.sin(x[:, 0] + phase[t])
        tgt = np.stack([y, np.zeros_like(y)], 1)
        x_traj.append(inp)
        y_traj.append(tgt)
    x_traj = np.stack(x_traj)
    y_traj = np.stack(y_traj)
    x_rand = x_traj[:, per_task:].reshape(1, -1, tasks + 1)
    y_rand = y_traj[:, per_task:].reshape(1, -1, 2)
    f = lambda a: torch.tensor(a, dtype=torch.float32)
    return f(x_traj[:, :per_task]), f(y_traj[:, :per_task]), f(x_rand), f(y_rand)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--update_lr", type=float, default=0.03)
    p.add_argument("--meta_lr", type=float, default=1e-3)
    p.add_argument("--update_step", type=int, default=10)
    args = p.parse_args()
    config = [(32, 11, False), (32, 32, False), (32, 32, True), (1, 32, True)]
    maml = MetaLearnerRegression(args, config)
    rng = np.random.RandomState(0)
    hist = []
    for step in range(args.steps):
        x_traj, y_traj, x_rand, y_rand = sample_episode(rng)
        losses = maml(x_traj, y_traj, x_rand, y_rand)
        maml.meta_optim.step()
        hist.append(float(losses[-1].detach()))
        if step % 30 == 0 or step == args.steps - 1:
            print("step %d: meta loss before %.4f after %.4f" % (step, float(losses[0].detach()), float(losses[-1].detach())))
    print("mean meta loss over last 30 steps: %.4f" % np.mean(hist[-30:]))


if __name__ == "__main__":
    main()
