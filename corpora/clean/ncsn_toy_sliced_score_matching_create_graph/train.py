# Source: ermongroup/ncsn, runners/toy_runner.py (ToyRunner.train, fisher_information) + losses/sliced_sm.py (sliced_score_estimation_vr) + models/gmm.py (GMMDist), commit 7f27f4a16471d20a0af3be8b8b4c2ec57c8a0bc1
# https://github.com/ermongroup/ncsn
#
# Sliced score matching (variance-reduced) on the toy two-Gaussian mixture, from the NCSN authors' toy runner:
# the data samples themselves get requires_grad_(True), the network's Jacobian-vector term comes from
# autograd.grad(..., create_graph=True) so that loss.backward() is a double backward; the loss is an
# unnormalised objective (0.5 * ||s||^2 + v^T J v) that goes negative; Softplus MLP score net, Adam 1e-3.
# Adaptation: 10000 steps -> 1500 with the per-step logging.info printed every 250 steps; the matplotlib
# visualisation is replaced by a number: the Fisher divergence 0.5 * E||s(x) - grad log p(x)||^2 on fresh
# teacher samples, the true score taken with autograd.grad of GMMDist.log_prob as in the runner's
# fisher_information / data_score (the model here outputs the score directly); seeds fixed.
import logging

import numpy as np
import torch
import torch.autograd as autograd
import torch.nn as nn
import torch.optim as optim

logging.basicConfig(level=logging.INFO, format='%(message)s')


def sliced_score_estimation_vr(score_net, samples, n_particles=1):
    """
    Be careful if the shape of samples is not B x x_dim!!!!
    """
    dup_samples = samples.unsqueeze(0).expand(n_particles, *samples.shape).contiguous().view(-1, *samples.shape[1:])
    dup_samples.requires_grad_(True)
    vectors = torch.randn_like(dup_samples)

    grad1 = score_net(dup_samples)
    gradv = torch.sum(grad1 * vectors)
    grad2 = autograd.grad(gradv, dup_samples, create_graph=True)[0]

    grad1 = grad1.view(dup_samples.shape[0], -1)
    loss1 = torch.sum(grad1 * grad1, dim=-1) / 2.

    loss2 = torch.sum((vectors * grad2).view(dup_samples.shape[0], -1), dim=-1)

    loss1 = loss1.view(n_particles, -1).mean(dim=0)
    loss2 = loss2.view(n_particles, -1).mean(dim=0)

    loss = loss1 + loss2
    return loss.mean(), loss1.mean(), loss2.mean()


class GMMDist(object):
    def __init__(self, dim):
        self.mix_probs = torch.tensor([0.8, 0.2])
        self.means = torch.stack([5 * torch.ones(dim), -torch.ones(dim) * 5], dim=0)
        self.sigma = 1
        self.std = torch.stack([torch.ones(dim) * self.sigma for i in range(len(self.mix_probs))], dim=0)

    def sample(self, n):
        n = n[0]
        mix_idx = torch.multinomial(self.mix_probs, n, replacement=True)
        means = self.means[mix_idx]
        stds = self.std[mix_idx]
        return torch.randn_like(means) * stds + means

    def log_prob(self, samples):
        logps = []
        for i in range(len(self.mix_probs)):
            logps.append((-((samples - self.means[i]) ** 2).sum(dim=-1) / (2 * self.sigma ** 2) - 0.5 * np.log(
                2 * np.pi * self.sigma ** 2)) + self.mix_probs[i].log())
        logp = torch.logsumexp(torch.stack(logps, dim=0), dim=0)
        return logp


class ToyRunner():
    def __init__(self, args, config):
        self.args = args
        self.config = config

    def fisher_information(self, score, data, teacher):
        data.requires_grad_(True)
        model_score = score(data)
        log_pdf_actual = teacher.log_prob(data)
        actual_score = autograd.grad(log_pdf_actual.sum(), data)[0]
        return 1 / 2 * ((model_score - actual_score) ** 2).sum(1).mean(0)

    def train(self):
        hidden_units = 128
        score = nn.Sequential(
            nn.Linear(2, hidden_units),
            nn.Softplus(),
            nn.Linear(hidden_units, hidden_units),
            nn.Softplus(),
            nn.Linear(hidden_units, 2),
        )

        teacher = GMMDist(dim=2)
        optimizer = optim.Adam(score.parameters(), lr=0.001)
        eval_data = teacher.sample((2000,))
        logging.info('initial fisher divergence: {:.4f}'.format(
            self.fisher_information(score, eval_data.clone(), teacher).item()))

        for step in range(1500):
            samples = teacher.sample((128,))

            loss, *_ = sliced_score_estimation_vr(score, samples, n_particles=1)

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            if step % 250 == 0 or step == 1499:
                logging.info('step: {}, loss: {}'.format(step, loss.item()))
                logging.info('    fisher divergence: {:.4f}'.format(
                    self.fisher_information(score, eval_data.clone(), teacher).item()))


def main():
    torch.manual_seed(0)
    ToyRunner(args=None, config=None).train()


if __name__ == '__main__':
    main()
