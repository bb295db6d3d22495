# Source: noegroup/bgflow, bgflow/distribution/normal.py (TruncatedNormalDistribution), commit bc90bce6fcc23e01f57ebfec180709c706f2779d
# Report: https://github.com/noegroup/bgflow/issues/14
# bgflow's TruncatedNormalDistribution with is_learnable=True (mu and log-sigma as parameters),
# used as a learnable prior over molecular bond angles on [0, pi] and fitted by maximum likelihood
# with Adam on mini-batches of angles. The Energy / Sampler base classes are reduced to what the
# distribution uses; the data are synthetic angles of three bonds drawn from a truncated normal.
import numpy as np
import torch

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class Energy(torch.nn.Module):
    def __init__(self, dim, **kwargs):
        super().__init__(**kwargs)
        self._event_shape = torch.Size(dim)

    @property
    def event_shape(self):
        return self._event_shape

    def _energy(self, *xs, **kwargs):
        raise NotImplementedError()

    def energy(self, *xs, temperature=1.0, **kwargs):
        return self._energy(*xs, **kwargs) / temperature


class Sampler(torch.nn.Module):

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def _sample_with_temperature(self, n_samples, temperature, *args, **kwargs):
        raise NotImplementedError()

    def _sample(self, n_samples, *args, **kwargs):
        raise NotImplementedError()

    def sample(self, n_samples, temperature=1.0, *args, **kwargs):
        if temperature != 1.0:
            return self._sample_with_temperature(n_samples, temperature, *args, **kwargs)
        else:
            return self._sample(n_samples, *args, **kwargs)


class TruncatedNormalDistribution(Energy, Sampler):
    """
    Truncated normal distribution (normal distribution restricted to the interval [lower_bound, upper_bound]
    of dim many independent variables. Used to model molecular angles and bonds.
    """
    def __init__(
        self,
        mu,
        sigma=torch.tensor(1.0),
        lower_bound=torch.tensor(0.0),
        upper_bound=torch.tensor(np.inf),
        assert_range=True,
        sampling_method="icdf",
        is_learnable=False
    ):
        for t in [mu, sigma, lower_bound, upper_bound]:
            assert type(t) is torch.Tensor
            if type(t) is torch.Tensor:
                assert t.shape in (torch.Size([]), (1,), mu.shape)

        super().__init__(dim=mu.shape)

        if is_learnable:
            self._mu = torch.nn.Parameter(mu)
            self._logsigma = torch.nn.Parameter(torch.log(sigma.to(mu)))
        else:
            self.register_buffer("_mu", mu)
            self.register_buffer("_logsigma", torch.log(sigma.to(mu)))
        self.register_buffer("_upper_bound", upper_bound.to(mu))
        self.register_buffer("_lower_bound", lower_bound.to(mu))
        self.assert_range = assert_range

        self._standard_normal = torch.distributions.normal.Normal(torch.tensor(0.0).to(mu), torch.tensor(1.0).to(mu))

        if sampling_method == "rejection":
            self._sample_impl = self._rejection_sampling
        elif sampling_method == "icdf":
            self._sample_impl = self._icdf_sampling
            alpha = (self._lower_bound - self._mu) / self._sigma
            beta = (self._upper_bound - self._mu) / self._sigma
            self.register_buffer("_cdf_lower_bound", self._standard_normal.cdf(alpha))
            self.register_buffer("_cdf_upper_bound", self._standard_normal.cdf(beta))
        else:
            raise ValueError(f'Unknown sampling method "{sampling_method}"')

    @property
    def _sigma(self):
        return torch.exp(self._logsigma)

    def _sample(self, n_samples):
        return self._sample_with_temperature(n_samples, temperature=1)

    def _rejection_sampling(self, n_samples, temperature):
        sigma = self._sigma * np.sqrt(temperature)
        rejected = torch.ones(n_samples, device=self._mu.device, dtype=bool)
        samples = torch.empty(n_samples, *self.event_shape, device=self._mu.device, dtype=self._mu.dtype)
        while True:
            n_rejected = (rejected).long().sum()
            samples[rejected] = torch.randn(
                n_rejected, *self.event_shape, device=self._mu.device, dtype=self._mu.dtype
            ) * sigma + self._mu
            rejected = torch.any(
                ((samples > self._upper_bound) | (samples < self._lower_bound)).view(n_samples, -1),
                dim=-1
            )
            if not torch.any(rejected):
                break
        return samples

    def _icdf_sampling(self, n_samples, temperature):
        sigma = self._sigma * np.sqrt(temperature)
        u = torch.rand(n_samples, *self.event_shape).to(self._mu)
        r = (self._cdf_upper_bound - self._cdf_lower_bound) * u + self._cdf_lower_bound
        x = self._standard_normal.icdf(r) * sigma + self._mu
        return x

    def _sample_with_temperature(self, n_samples, temperature):
        return self._sample_impl(n_samples, temperature)

    def _energy(self, x):
        energies = (
            (x - self._mu) / self._sigma
        ) ** 2  # the sqrt(2) amounts to the 0.5 factor (see return statement)
        if self.assert_range:
            if (x < self._lower_bound).any() or (x > self._upper_bound).any():
                raise ValueError("input out of bounds")
        else:
            energies[x < self._lower_bound] = np.inf
            energies[x > self._upper_bound] = np.inf
        return 0.5 * energies.sum(dim=-1, keepdim=True)

    def icdf(self, x):
        r = self.Z * x + self._cdf_lower_bound
        return self._standard_normal.icdf(r) * self._sigma + self._mu

    def cdf(self, x):
        return (self._standard_normal.cdf((x - self._mu)/self._sigma) - self._cdf_lower_bound)/self.Z

    def log_prob(self, x):
        return self._standard_normal.log_prob((x - self._mu)/self._sigma) - torch.log(self.Z * self._sigma)

    @property
    def Z(self):
        return self._cdf_upper_bound - self._cdf_lower_bound

    @property
    def upper_bound(self):
        return self._upper_bound

    @property
    def lower_bound(self):
        return self._lower_bound

    @property
    def mu(self):
        return self._mu

    @property
    def sigma(self):
        return self._sigma


def make_angles(n):
    reference = TruncatedNormalDistribution(
        mu=torch.tensor([1.9, 1.2, 2.9]),
        sigma=torch.tensor([0.3, 0.5, 0.4]),
        lower_bound=torch.tensor(0.0),
        upper_bound=torch.tensor(np.pi),
    )
    return reference.sample(n).detach()


def train(n_iterations=300, batch_size=256):
    data = make_angles(8192)
    prior = TruncatedNormalDistribution(
        mu=torch.tensor([1.5, 1.5, 1.5]),
        sigma=torch.ones(3),
        lower_bound=torch.tensor(0.0),
        upper_bound=torch.tensor(np.pi),
        is_learnable=True,
    )
    optimizer = torch.optim.Adam(prior.parameters(), lr=1e-2)
    for it in range(n_iterations):
        idx = torch.randint(0, len(data), (batch_size,))
        x = data[idx]
        optimizer.zero_grad()
        nll = -prior.log_prob(x).sum(dim=-1).mean()
        nll.backward()
        optimizer.step()
        if it % 50 == 0 or it == n_iterations - 1:
            print(f"iter {it:4d}  NLL {nll.item():.4f}  mu {prior.mu.detach().numpy().round(3)}  "
                  f"sigma {prior.sigma.detach().numpy().round(3)}")
    with torch.no_grad():
        full_nll = -prior.log_prob(data).sum(dim=-1).mean().item()
    print(f"final NLL on all {len(data)} samples: {full_nll:.4f}")


if __name__ == "__main__":
    train()
