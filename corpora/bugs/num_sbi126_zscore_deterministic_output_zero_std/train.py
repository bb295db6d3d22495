# Source: sbi-dev/sbi, sbi/inference/snpe/snpe_base.py (SnpeBase.__init__, __call__, _train), sbi/utils/sbiutils.py (Standardize), tests/linearGaussian_snpe_test.py, commit 5c753d47edde5850f1fc5652b74f3e4631f1e442
# Report: https://github.com/sbi-dev/sbi/issues/126
# SNPE (neural posterior estimation): pilot simulations from the prior fix the z-score of the
# simulator outputs x (a Standardize layer prepended to the density estimator's embedding
# net); each round simulates, splits train / validation and fits the conditional density
# q(theta | x) by maximum likelihood with early stopping on the validation log-probability.
# The linear-Gaussian simulator of the test suite has its last output fixed at 1.0, as in the
# report's deterministic simulator. pyknos' MAF is replaced by a conditional diagonal
# Gaussian (an MLP giving mean and log-std), tqdm / tensorboard / summaries are dropped.
from copy import deepcopy

import torch
from torch import Tensor, nn, optim
from torch.distributions import MultivariateNormal
from torch.nn.utils import clip_grad_norm_
from torch.utils import data
from torch.utils.data.sampler import SubsetRandomSampler


class Standardize(nn.Module):
    """
    Standardize inputs, i.e. subtract mean and divide by standard deviation. Inherits
     from nn.Module so we can use it in nn.Sequential
    """

    def __init__(self, mean, std):
        super(Standardize, self).__init__()
        self.mean = mean
        self.std = std

    def forward(self, tensor):
        # XXX guard against std \sim 0 (epsilon or raise)
        return (tensor - self.mean) / self.std


class ConditionalGaussian(nn.Module):
    """Density estimator q(theta | x): diagonal Gaussian whose mean / log-std come from an MLP
    on the embedded x (stands in for pyknos' MAF)."""

    def __init__(self, dim_theta, dim_x, hidden=50):
        super().__init__()
        self._embedding_net = nn.Identity()
        self.net = nn.Sequential(nn.Linear(dim_x, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                 nn.Linear(hidden, 2 * dim_theta))

    def set_embedding_net(self, embedding_net):
        self._embedding_net = embedding_net

    def log_prob(self, inputs, context):
        mean, log_std = self.net(self._embedding_net(context)).chunk(2, dim=-1)
        z = (inputs - mean) / log_std.exp()
        return (-0.5 * z ** 2 - log_std - 0.5 * torch.log(torch.tensor(2 * torch.pi))).sum(-1)

    def mean(self, context):
        return self.net(self._embedding_net(context)).chunk(2, dim=-1)[0]


class Posterior:
    def __init__(self, neural_net, prior, x_o):
        self.neural_net = neural_net
        self.prior = prior
        self.x_o = x_o

    def set_embedding_net(self, embedding_net):
        self.neural_net.set_embedding_net(embedding_net)


class SnpeBase:
    def __init__(
        self,
        simulator,
        prior,
        x_o: Tensor,
        num_pilot_sims: int = 100,
        density_estimator=None,
        z_score_x: bool = True,
        retrain_from_scratch_each_round: bool = False,
        discard_prior_samples: bool = False,
        device=None,
    ):
        self._simulator = simulator
        self._prior = prior
        self._x_o = x_o
        self._device = device or torch.device("cpu")
        self._z_score_x = z_score_x

        self._num_pilot_sims = num_pilot_sims
        self._discard_prior_samples = discard_prior_samples
        self._theta_bank, self._x_bank = [], []
        self._prior_masks = []
        self._model_bank = []
        self._summary = {"epochs": [], "best_validation_log_probs": []}

        self._retrain_from_scratch_each_round = retrain_from_scratch_each_round

        self.pilot_theta = self._prior.sample((num_pilot_sims,))
        self.pilot_x = self._batched_simulator(self.pilot_theta)

        # create the neural posterior which can sample(), log_prob()
        self._neural_posterior = Posterior(neural_net=density_estimator, prior=self._prior, x_o=self._x_o)

        # obtain z-score for data x and define embedding net
        if self._z_score_x:
            self.x_mean = torch.mean(self.pilot_x, dim=0)
            self.x_std = torch.std(self.pilot_x, dim=0)
        else:
            self.x_mean = torch.zeros(self._x_o.shape)
            self.x_std = torch.ones(self._x_o.shape)

        # new embedding_net contains z-scoring
        embedding = nn.Sequential(
            Standardize(self.x_mean, self.x_std),
            self._neural_posterior.neural_net._embedding_net,
        )
        self._neural_posterior.set_embedding_net(embedding)

        # If we're retraining from scratch each round,
        # keep a copy of the original untrained model for reinitialization.
        self._untrained_neural_posterior = deepcopy(self._neural_posterior)

    def _batched_simulator(self, theta):
        return self._simulator(theta)

    def __call__(self, num_rounds, num_simulations_per_round, batch_size=100, learning_rate=5e-4,
                 validation_fraction=0.1, stop_after_epochs=20, clip_grad_norm=True):
        for round_ in range(num_rounds):
            # Run simulations for the round.
            theta, x, prior_mask = self._run_simulations(round_, num_simulations_per_round)
            self._theta_bank.append(theta)
            self._x_bank.append(x)
            self._prior_masks.append(prior_mask)

            # Fit posterior using newly aggregated data set.
            self._train(
                round_=round_,
                batch_size=batch_size,
                learning_rate=learning_rate,
                validation_fraction=validation_fraction,
                stop_after_epochs=stop_after_epochs,
                clip_grad_norm=clip_grad_norm,
            )

            # Store models at end of each round.
            self._model_bank.append(deepcopy(self._neural_posterior))
            self._model_bank[-1].neural_net.eval()
            print(f"round {round_}: {self._summary['epochs'][-1]} epochs, best validation log_prob "
                  f"{self._summary['best_validation_log_probs'][-1]:.4f}")
        return self._neural_posterior

    def _run_simulations(self, round_, num_sims):
        # We take at most the total requested number from the pilot run.
        theta = self.pilot_theta[:num_sims]
        x = self.pilot_x[:num_sims]

        num_missing_sims = max(num_sims - self._num_pilot_sims, 0)

        if num_missing_sims > 0:
            # If missing, we produce extra simulations as needed.
            missing_theta = self._prior.sample((num_missing_sims,))
            missing_x = self._batched_simulator(missing_theta)
            theta = torch.cat((theta, missing_theta), dim=0)
            x = torch.cat((x, missing_x), dim=0)
        return theta, x, torch.ones((theta.size(0), 1), dtype=torch.bool)

    def _train(
        self,
        round_,
        batch_size,
        learning_rate,
        validation_fraction,
        stop_after_epochs,
        clip_grad_norm,
    ):
        # Starting index for the training set (1 = discard round-0 samples).
        start_idx = int(self._discard_prior_samples and round_ > 0)
        num_total_examples = sum(len(theta) for theta in self._theta_bank[start_idx:])

        # Select random neural_net and validation splits from (theta, x) pairs.
        permuted_indices = torch.randperm(num_total_examples)
        num_training_examples = int((1 - validation_fraction) * num_total_examples)
        num_validation_examples = num_total_examples - num_training_examples
        train_indices, val_indices = (
            permuted_indices[:num_training_examples],
            permuted_indices[num_training_examples:],
        )

        # Dataset is shared for training and validation loaders.
        dataset = data.TensorDataset(
            torch.cat(self._theta_bank[start_idx:]),
            torch.cat(self._x_bank[start_idx:]),
            torch.cat(self._prior_masks[start_idx:]),
        )

        # Create neural_net and validation loaders using a subset sampler.
        train_loader = data.DataLoader(
            dataset,
            batch_size=min(batch_size, num_training_examples),
            drop_last=True,
            sampler=SubsetRandomSampler(train_indices),
        )
        val_loader = data.DataLoader(
            dataset,
            batch_size=min(batch_size, num_validation_examples),
            shuffle=False,
            drop_last=True,
            sampler=SubsetRandomSampler(val_indices),
        )

        optimizer = optim.Adam(
            list(self._neural_posterior.neural_net.parameters()), lr=learning_rate,
        )
        # Keep track of best_validation log_prob seen so far.
        best_validation_log_prob = float("-Inf")
        # Keep track of number of epochs since last improvement.
        epochs_since_last_improvement = 0
        # Keep track of model with best validation performance.
        best_model_state_dict = None

        # If retraining from scratch each round, reset the neural posterior
        # to the untrained copy.
        if self._retrain_from_scratch_each_round and round_ > 0:
            self._neural_posterior = deepcopy(self._untrained_neural_posterior)

        epochs = 0
        converged = False
        while not converged:

            # Train for a single epoch.
            self._neural_posterior.neural_net.train()
            train_losses = []
            for batch in train_loader:
                optimizer.zero_grad()
                theta_batch, x_batch, masks = (
                    batch[0].to(self._device),
                    batch[1].to(self._device),
                    batch[2].to(self._device),
                )

                # just do maximum likelihood in the first round
                log_prob = self._neural_posterior.neural_net.log_prob(
                    theta_batch, x_batch
                )
                loss = -torch.mean(log_prob)
                loss.backward()
                if clip_grad_norm:
                    clip_grad_norm_(
                        self._neural_posterior.neural_net.parameters(), max_norm=5.0
                    )
                optimizer.step()
                train_losses.append(loss.item())

            epochs += 1

            # Calculate validation performance.
            self._neural_posterior.neural_net.eval()
            log_prob_sum = 0
            with torch.no_grad():
                for batch in val_loader:
                    theta_batch, x_batch, masks = (
                        batch[0].to(self._device),
                        batch[1].to(self._device),
                        batch[2].to(self._device),
                    )
                    log_prob = self._neural_posterior.neural_net.log_prob(
                        theta_batch, x_batch
                    )
                    log_prob_sum += log_prob.sum().item()
            validation_log_prob = log_prob_sum / num_validation_examples
            if epochs % 10 == 1:
                print(f"  epoch {epochs}: train loss {sum(train_losses) / len(train_losses):.4f}, "
                      f"validation log_prob {validation_log_prob:.4f}")

            # Check for improvement in validation performance over previous epochs.
            if validation_log_prob > best_validation_log_prob:
                best_validation_log_prob = validation_log_prob
                epochs_since_last_improvement = 0
                best_model_state_dict = deepcopy(
                    self._neural_posterior.neural_net.state_dict()
                )
            else:
                epochs_since_last_improvement += 1

            # If no validation improvement over many epochs, stop training.
            if epochs_since_last_improvement > stop_after_epochs - 1:
                self._neural_posterior.neural_net.load_state_dict(best_model_state_dict)
                converged = True

        # Update summary.
        self._summary["epochs"].append(epochs)
        self._summary["best_validation_log_probs"].append(best_validation_log_prob)


class SnpeB(SnpeBase):
    pass


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    num_dim = 3
    true_observation = torch.zeros((1, num_dim))
    true_observation[:, num_dim - 1] = 1.0
    prior = MultivariateNormal(loc=torch.zeros(num_dim), covariance_matrix=torch.eye(num_dim))

    def linear_gaussian(theta):
        return theta + 0.5 * torch.randn_like(theta)

    def deterministic_simulator(theta):
        """Simulator with deterministic last output dimension (across batches)."""
        result = linear_gaussian(theta)
        result[:, num_dim - 1] = 1.0
        return result

    neural_net = ConditionalGaussian(num_dim, num_dim)
    infer = SnpeB(
        simulator=deterministic_simulator,
        x_o=true_observation,
        density_estimator=neural_net,
        prior=prior,
        num_pilot_sims=1000,
        z_score_x=True,
        retrain_from_scratch_each_round=False,
        discard_prior_samples=False,
    )
    print("z-score of x from the pilot runs: mean", [round(v, 3) for v in infer.x_mean.tolist()],
          "std", [round(v, 3) for v in infer.x_std.tolist()])
    posterior = infer(num_rounds=1, num_simulations_per_round=1000, batch_size=50, learning_rate=1e-3,
                      stop_after_epochs=10)
    with torch.no_grad():
        print("posterior mean at x_o:", [round(v, 3) for v in posterior.neural_net.mean(true_observation)[0].tolist()],
              "(analytic posterior mean: [0.0, 0.0, 0.0])")


if __name__ == "__main__":
    main()
