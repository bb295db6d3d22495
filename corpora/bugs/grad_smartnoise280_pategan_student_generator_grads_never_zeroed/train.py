# Source: opendp/smartnoise-sdk, sdk/opendp/whitenoise/synthesizers/pytorch/nn/__init__.py (Generator, Discriminator, PATEGAN.train, PATEGAN.generate), sdk/opendp/whitenoise/synthesizers/pytorch/nn/privacy_utils.py (weights_init, pate, moments_acc), commit 58068753df057eaa1a7ad8b699de6c4231bf4256
# Report: https://github.com/opendp/smartnoise-sdk/issues/280
# PATE-GAN differentially private tabular synthesizer: the rows are split among teacher
# discriminators (one per 1000 rows) trained on real vs generated rows; a student
# discriminator learns from the teachers' Laplace-noised votes on generated rows; the generator
# is trained against the student; the moments accountant stops training when epsilon is spent.
# The data set is a synthetic 3000-row, 12-column table (three correlated numeric blocks);
# epsilon is set so that training runs a few hundred rounds; a fidelity report compares the
# generated table's column means and correlations with the real ones.
import math

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


def weights_init(m):
    if type(m) == nn.Linear:
        nn.init.xavier_uniform_(m.weight)


def pate(data, teachers, lap_scale):
    num_teachers = len(teachers)
    labels = torch.Tensor(num_teachers, data.shape[0]).type(torch.int64)
    for i in range(num_teachers):
        output = teachers[i](data)
        pred = (output > 0.5).type(torch.Tensor).squeeze()
        labels[i] = pred
    votes = torch.sum(labels, dim=0).unsqueeze(1).type(torch.DoubleTensor)
    noise = torch.from_numpy(np.random.laplace(loc=0, scale=1 / lap_scale, size=votes.size()))
    noisy_votes = votes + noise
    noisy_labels = (noisy_votes > num_teachers / 2).type(torch.DoubleTensor)
    return noisy_labels, votes


def moments_acc(num_teachers, votes, lap_scale, l_list):
    q = (2 + lap_scale * torch.abs(2 * votes - num_teachers)) / (4 * torch.exp(lap_scale * torch.abs(2 * votes - num_teachers)))
    alpha = []
    for l in l_list:
        a = 2 * lap_scale ** 2 * l * (l + 1)
        t_one = (1 - q) * torch.pow((1 - q) / (1 - math.exp(2 * lap_scale) * q), l)
        t_two = q * torch.exp(2 * lap_scale * l)
        t = t_one + t_two
        alpha.append(torch.clamp(t, max=a).sum())
    return torch.DoubleTensor(alpha)


class Generator(nn.Module):
    def __init__(self, latent_dim, output_dim, binary=True):
        super(Generator, self).__init__()

        def block(in_, out, Activation):
            return nn.Sequential(nn.Linear(in_, out, bias=False), nn.LayerNorm(out), Activation())

        self.layer_0 = block(latent_dim, latent_dim, nn.Tanh if binary else lambda: nn.LeakyReLU(0.2))
        self.layer_1 = block(latent_dim, latent_dim, nn.Tanh if binary else lambda: nn.LeakyReLU(0.2))
        self.layer_2 = block(latent_dim, output_dim, nn.Tanh if binary else lambda: nn.LeakyReLU(0.2))

    def forward(self, noise):
        noise = self.layer_0(noise) + noise
        noise = self.layer_1(noise) + noise
        noise = self.layer_2(noise)
        return noise


class Discriminator(nn.Module):
    def __init__(self, input_dim, wasserstein=False):
        super(Discriminator, self).__init__()
        self.model = nn.Sequential(
            nn.Linear(input_dim, 2 * input_dim // 3),
            nn.LeakyReLU(0.2),
            nn.Linear(2 * input_dim // 3, input_dim // 3),
            nn.LeakyReLU(0.2),
            nn.Linear(input_dim // 3, 1))
        if not wasserstein:
            self.model.add_module("activation", nn.Sigmoid())

    def forward(self, x):
        return self.model(x)


class PATEGAN:
    def __init__(self, binary=False, latent_dim=64, batch_size=64, teacher_iters=5, student_iters=5,
                 epsilon=1.0, delta=1e-5):
        self.binary = binary
        self.latent_dim = latent_dim
        self.batch_size = batch_size
        self.teacher_iters = teacher_iters
        self.student_iters = student_iters
        self.epsilon = epsilon
        self.delta = delta
        self.device = torch.device("cpu")

    def train(self, data):
        data_dim = data.shape[1]
        self.num_teachers = int(len(data) / 1000)
        data_partitions = np.array_split(data, self.num_teachers)
        tensor_partitions = [TensorDataset(torch.from_numpy(data.astype('double')).to(self.device))
                             for data in data_partitions]
        loader = []
        for teacher_id in range(self.num_teachers):
            loader.append(DataLoader(tensor_partitions[teacher_id], batch_size=self.batch_size, shuffle=True))

        self.generator = Generator(self.latent_dim, data_dim, binary=self.binary).double().to(self.device)
        self.generator.apply(weights_init)
        student_disc = Discriminator(data_dim).double().to(self.device)
        student_disc.apply(weights_init)
        teacher_disc = [Discriminator(data_dim).double().to(self.device) for i in range(self.num_teachers)]
        for i in range(self.num_teachers):
            teacher_disc[i].apply(weights_init)

        optimizer_g = optim.Adam(self.generator.parameters(), lr=1e-4)
        optimizer_s = optim.Adam(student_disc.parameters(), lr=1e-4)
        optimizer_t = [optim.Adam(teacher_disc[i].parameters(), lr=1e-4) for i in range(self.num_teachers)]
        criterion = nn.BCELoss()

        noise_multiplier = 1e-3
        alphas = torch.tensor([0.0 for i in range(100)])
        l_list = 1 + torch.tensor(range(100))
        eps = 0
        rounds = 0
        while eps < self.epsilon:
            for t_2 in range(self.teacher_iters):
                for i in range(self.num_teachers):
                    real_data = None
                    for j, data in enumerate(loader[i], 0):
                        real_data = data[0].to(self.device)
                        break
                    optimizer_t[i].zero_grad()
                    label_real = torch.full((real_data.shape[0],), 1, dtype=torch.float, device=self.device)
                    output = teacher_disc[i](real_data)
                    loss_t_real = criterion(output.squeeze(1), label_real.double())
                    loss_t_real.backward()
                    noise = torch.rand(self.batch_size, self.latent_dim, device=self.device)
                    label_fake = torch.full((self.batch_size,), 0, dtype=torch.float, device=self.device)
                    fake_data = self.generator(noise.double())
                    output = teacher_disc[i](fake_data)
                    loss_t_fake = criterion(output.squeeze(1), label_fake.double())
                    loss_t_fake.backward()
                    optimizer_t[i].step()

            for t_3 in range(self.student_iters):
                noise = torch.rand(self.batch_size, self.latent_dim, device=self.device)
                fake_data = self.generator(noise.double())
                predictions, votes = pate(fake_data, teacher_disc, noise_multiplier)
                output = student_disc(fake_data.detach())
                alphas = alphas + moments_acc(self.num_teachers, votes, noise_multiplier, l_list)
                loss_s = criterion(output, predictions.to(self.device))
                loss_s.backward()
                optimizer_s.step()

            label_g = torch.full((self.batch_size,), 1, dtype=torch.float, device=self.device)
            noise = torch.rand(self.batch_size, self.latent_dim, device=self.device)
            gen_data = self.generator(noise.double())
            output_g = student_disc(gen_data)
            loss_g = criterion(output_g.squeeze(1), label_g.double())
            loss_g.backward()
            optimizer_g.step()

            eps = min((alphas - math.log(self.delta)) / l_list)
            rounds += 1
            if rounds % 20 == 0:
                gn_s = torch.norm(torch.stack([p.grad.norm() for p in student_disc.parameters()])).item()
                gn_g = torch.norm(torch.stack([p.grad.norm() for p in self.generator.parameters()])).item()
                print(f"round {rounds:4d} eps {eps.item():.3f} loss_s {loss_s.item():.4f} loss_g {loss_g.item():.4f} "
                      f"student grad norm {gn_s:.3f} generator grad norm {gn_g:.3f}")
        print(f"stopped after {rounds} rounds, eps {eps.item():.3f}")

    def generate(self, n):
        steps = n // self.batch_size + 1
        data = []
        for i in range(steps):
            noise = torch.randn(self.batch_size, self.latent_dim, device=self.device)
            noise = noise.view(-1, self.latent_dim)
            fake_data = self.generator(noise.double())
            data.append(fake_data.detach().cpu().numpy())
        data = np.concatenate(data, axis=0)
        return data[:n]


def make_table(n, rng):
    z = rng.normal(size=(n, 3))
    cols = []
    for b in range(3):
        for k in range(4):
            cols.append(0.5 + 0.25 * (z[:, b] * (0.6 + 0.1 * k) + 0.4 * rng.normal(size=n)))
    return np.clip(np.stack(cols, 1), 0, 1)


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.manual_seed(0)
    np.random.seed(0)
    real = make_table(3000, np.random.RandomState(0))
    synth = PATEGAN(epsilon=1.8, batch_size=64)
    synth.train(real)
    fake = synth.generate(3000)
    mean_err = np.abs(fake.mean(0) - real.mean(0)).mean()
    corr_err = np.abs(np.corrcoef(fake.T) - np.corrcoef(real.T)).mean()
    print(f"fidelity: mean |column mean diff| {mean_err:.4f}, mean |correlation diff| {corr_err:.4f}")
