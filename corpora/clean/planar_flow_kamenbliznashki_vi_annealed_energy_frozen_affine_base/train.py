# Source: kamenbliznashki/normalizing_flows, planar_flow.py, commit 97a73a01bcee3ac8015dfeeb3cffb035ec39a1f2
# https://github.com/kamenbliznashki/normalizing_flows
#
# Variational inference with planar flows (Rezende & Mohamed 2015, table 1 energies): samples of a fixed base
# Gaussian go through an AffineTransform whose mu/logsigma are nn.Parameters with requires_grad False (learn_base
# off) but still handed to RMSprop(weight_decay=1e-3), then K planar transforms with u re-parametrised (u_hat) for
# invertibility; the loss is the reverse KL up to log Z: base_log_prob - sum log|det J| + beta * temp(i) * U(z_K),
# where the target's temperature is annealed from 0.01 to 1 with the step count, so the loss is not comparable
# across steps; base_log_prob carries no gradient; log|det| gets +1e-6 inside the log.
# Adaptation: matplotlib plots and checkpoint files dropped; argparse -> a namespace with the repository defaults
# (base_sigma 4, batch 100, weight_decay 1e-3, beta 1, seed 2, RMSprop momentum 0.9 alpha 0.9 eps 1e-6) except
# target_potential u_z1, flow_length 2 -> 8, lr 1e-5 -> 1e-3 and n_steps 1e6 -> 1500 with the annealing horizon
# 10000 -> 750 steps and the log every 10000 -> 250 steps; a fixed-sample evaluation of the temperature-1 loss
# (reverse KL + log Z) is printed before and after training.
import torch
import torch.nn as nn
import torch.distributions as D

import math
from types import SimpleNamespace

# --------------------
# Flow
# --------------------

class PlanarTransform(nn.Module):
    def __init__(self, init_sigma=0.01):
        super().__init__()
        self.u = nn.Parameter(torch.randn(1, 2).normal_(0, init_sigma))
        self.w = nn.Parameter(torch.randn(1, 2).normal_(0, init_sigma))
        self.b = nn.Parameter(torch.randn(1).fill_(0))

    def forward(self, x, normalize_u=True):
        # allow for a single forward pass over all the transforms in the flows with a Sequential container
        if isinstance(x, tuple):
            z, sum_log_abs_det_jacobians = x
        else:
            z, sum_log_abs_det_jacobians = x, 0

        # normalize u s.t. w @ u >= -1; sufficient condition for invertibility
        u_hat = self.u
        if normalize_u:
            wtu = (self.w @ self.u.t()).squeeze()
            m_wtu = - 1 + torch.log1p(wtu.exp())
            u_hat = self.u + (m_wtu - wtu) * self.w / (self.w @ self.w.t())

        # compute transform
        f_z = z + u_hat * torch.tanh(z @ self.w.t() + self.b)
        # compute log_abs_det_jacobian
        psi = (1 - torch.tanh(z @ self.w.t() + self.b)**2) @ self.w
        det = 1 + psi @ u_hat.t()
        log_abs_det_jacobian = torch.log(torch.abs(det) + 1e-6).squeeze()
        sum_log_abs_det_jacobians = sum_log_abs_det_jacobians + log_abs_det_jacobian

        return f_z, sum_log_abs_det_jacobians

class AffineTransform(nn.Module):
    def __init__(self, learnable=False):
        super().__init__()
        self.mu = nn.Parameter(torch.zeros(2)).requires_grad_(learnable)
        self.logsigma = nn.Parameter(torch.zeros(2)).requires_grad_(learnable)

    def forward(self, x):
        z = self.mu + self.logsigma.exp() * x
        sum_log_abs_det_jacobians = self.logsigma.sum()
        return z, sum_log_abs_det_jacobians


# --------------------
# Test energy functions -- NF paper table 1
# --------------------

w1 = lambda z: torch.sin(2 * math.pi * z[:,0] / 4)
w2 = lambda z: 3 * torch.exp(-0.5 * ((z[:,0] - 1)/0.6)**2)
w3 = lambda z: 3 * torch.sigmoid((z[:,0] - 1) / 0.3)

u_z1 = lambda z: 0.5 * ((torch.norm(z, p=2, dim=1) - 2) / 0.4)**2 - \
                 torch.log(torch.exp(-0.5*((z[:,0] - 2) / 0.6)**2) + torch.exp(-0.5*((z[:,0] + 2) / 0.6)**2) + 1e-10)
u_z2 = lambda z: 0.5 * ((z[:,1] - w1(z)) / 0.4)**2
u_z3 = lambda z: - torch.log(torch.exp(-0.5*((z[:,1] - w1(z))/0.35)**2) + torch.exp(-0.5*((z[:,1] - w1(z) + w2(z))/0.35)**2) + 1e-10)
u_z4 = lambda z: - torch.log(torch.exp(-0.5*((z[:,1] - w1(z))/0.4)**2) + torch.exp(-0.5*((z[:,1] - w1(z) + w3(z))/0.35)**2) + 1e-10)


# --------------------
# Training
# --------------------

def optimize_flow(base_dist, flow, target_energy_potential, optimizer, args):

    # anneal rate for free energy
    temp = lambda i: min(1, 0.01 + i/750)

    for i in range(args.start_step, args.n_steps):

        # sample base dist
        z = base_dist.sample((args.batch_size, )).to(args.device)

        # pass through flow:
        # 1. compute expected log_prob of data under base dist -- nothing tied to parameters here so irrelevant to grads
        base_log_prob = base_dist.log_prob(z)
        # 2. compute sum of log_abs_det_jacobian through the flow
        zk, sum_log_abs_det_jacobians = flow(z)
        # 3. compute expected log_prob of z_k the target_energy potential
        p_log_prob = - temp(i) * target_energy_potential(zk)  # p = exp(-potential) ==> p_log_prob = - potential

        loss = base_log_prob - sum_log_abs_det_jacobians - args.beta * p_log_prob
        loss = loss.mean(0)

        # compute loss and optimize
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()

        if i % 250 == 0:
            # display loss
            log_qk = base_dist.log_prob(z) - sum_log_abs_det_jacobians
            print('{}: step {:5d} / {}; loss {:.3f}; base_log_prob {:.3f}, sum log dets {:.3f}, p_log_prob {:.3f}, max base = {:.3f}; max qk = {:.3f} \
                zk_mean {}, zk_sigma {}; base_mu {}, base_log_sigma {}'.format(
                args.target_potential, i, args.n_steps, loss.item(), base_log_prob.mean(0).item(), sum_log_abs_det_jacobians.mean(0).item(),
                p_log_prob.mean(0).item(), base_log_prob.exp().max().item(), log_qk.exp().max().item(),
                zk.mean(0).cpu().data.numpy(), zk.var(0).sqrt().cpu().data.numpy(),
                base_dist.loc.cpu().data.numpy() if not args.learn_base else flow[0].mu.cpu().data.numpy(),
                base_dist.covariance_matrix.cpu().diag().data.numpy() if not args.learn_base else flow[0].logsigma.cpu().data.numpy()))


@torch.no_grad()
def free_energy(base_dist, flow, u_z, n=5000):
    """temperature-1 loss on a fixed sample: E_q[log q(z_K) + U(z_K)] = KL(q || p) - log Z."""
    g = torch.Generator().manual_seed(123)
    z = torch.randn(n, 2, generator=g) @ base_dist.scale_tril.T + base_dist.loc
    zk, sum_log_abs_det_jacobians = flow(z)
    return (base_dist.log_prob(z) - sum_log_abs_det_jacobians + u_z(zk)).mean().item()


# --------------------
# Run
# --------------------

def main():
    args = SimpleNamespace(target_potential='u_z1', base_sigma=4, learn_base=False, flow_length=8, init_sigma=1,
                           batch_size=100, start_step=0, n_steps=1500, lr=1e-3, weight_decay=1e-3, beta=1, seed=2,
                           restore_file=None, output_dir='.', train=True)
    args.device = torch.device('cpu')
    torch.manual_seed(args.seed)

    # setup flow
    flow = nn.Sequential(AffineTransform(args.learn_base), *[PlanarTransform() for _ in range(args.flow_length)]).to(args.device)

    # setup target potential to approx
    u_z = globals()[args.target_potential]

    # setup base distribution
    base_dist = D.MultivariateNormal(torch.zeros(2).to(args.device), args.base_sigma * torch.eye(2).to(args.device))

    f0 = free_energy(base_dist, flow, u_z)
    print(f"free energy (temperature 1) before training: {f0:.3f}")
    if args.train:
        optimizer = torch.optim.RMSprop(flow.parameters(), lr=args.lr, momentum=0.9, alpha=0.90, eps=1e-6, weight_decay=args.weight_decay)
        args.n_steps = args.start_step + args.n_steps
        optimize_flow(base_dist, flow, u_z, optimizer, args)
    f1 = free_energy(base_dist, flow, u_z)
    print(f"free energy (temperature 1) after training: {f1:.3f}")
    print(f"[summary] free_energy(KL - logZ) first={f0:.3f} last={f1:.3f} decreased={f1 < f0}")


if __name__ == '__main__':
    torch.set_num_threads(1)
    main()
