# Source: deepchem/deepchem, deepchem/models/losses.py (Loss, PoissonLoss, _make_pytorch_shapes_consistent), deepchem/models/torch_models/torch_model.py (TorchModel.fit / fit_generator, _StandardLoss), commit fbe3b911a94a6eb8c84c1a9e7ac67a472c49ea80
# Report: https://github.com/deepchem/deepchem/issues/5099
# A DeepChem TorchModel regressing counts (how many times a substructure occurs in a molecule)
# from fingerprint bits with dc.models.losses.PoissonLoss; the network's last layer is a ReLU
# so the predicted rate is non-negative. TorchModel.fit's loop (_StandardLoss with per-sample
# weights, Adam, the logged average loss) is kept in reduced form; the molecules are
# synthetic 256-bit fingerprints whose counts follow a Poisson law, many of them zero.
import logging
import time

import numpy as np
import torch
import torch.nn as nn

logger = logging.getLogger(__name__)


class Loss:
    """A loss function for use in training models."""

    def _create_pytorch_loss(self):
        raise NotImplementedError("Subclasses must implement this")


def _make_pytorch_shapes_consistent(output, labels):
    """Try to make inputs have the same shape by adding dimensions of size 1."""
    shape1 = output.shape
    shape2 = labels.shape
    len1 = len(shape1)
    len2 = len(shape2)
    if len1 == len2:
        return (output, labels)
    shape1 = tuple(shape1)
    shape2 = tuple(shape2)
    if len1 > len2 and all(i == 1 for i in shape1[len2:]):
        for i in range(len1 - len2):
            labels = torch.unsqueeze(labels, -1)
        return (output, labels)
    if len2 > len1 and all(i == 1 for i in shape2[len1:]):
        for i in range(len2 - len1):
            output = torch.unsqueeze(output, -1)
        return (output, labels)
    raise ValueError(
        "Incompatible shapes for outputs and labels: %s versus %s" %
        (str(shape1), str(shape2)))


class PoissonLoss(Loss):
    """The Poisson loss function is defined as the mean of the elements of y_pred - (y_true * log(y_pred) for an input of (y_true, y_pred).
    Poisson loss is generally used for regression tasks where the data follows the poisson
    """

    def _create_pytorch_loss(self):

        def loss(output, labels):
            output, labels = _make_pytorch_shapes_consistent(output, labels)
            return torch.mean(output - labels * torch.log(output))

        return loss


class _StandardLoss(object):
    """The implements the loss function for models that use a dc.models.losses.Loss."""

    def __init__(self, model, loss: Loss) -> None:
        self.model = model
        self.loss = loss  # not used
        self.criterion = loss._create_pytorch_loss()

    def __call__(self, outputs, labels, weights):
        if len(outputs) != 1 or len(labels) != 1 or len(weights) != 1:
            raise ValueError(
                "Loss functions expects exactly one each of outputs, labels, and weights"
            )
        losses = self.criterion(outputs[0], labels[0])
        w = weights[0]
        if len(w.shape) < len(losses.shape):
            shape = tuple(w.shape)
            w = w.reshape(shape + (1,) * (len(losses.shape) - len(w.shape)))

        loss = losses * w
        loss = loss.mean()
        return loss


class NumpyDataset:
    def __init__(self, X, y, w):
        self.X, self.y, self.w = X, y, w

    def iterbatches(self, batch_size, epochs, deterministic, rng):
        n = len(self.X)
        for epoch in range(epochs):
            order = np.arange(n) if deterministic else rng.permutation(n)
            for i in range(0, n, batch_size):
                idx = order[i:i + batch_size]
                yield ([self.X[idx]], [self.y[idx]], [self.w[idx]])


class TorchModel:
    def __init__(self, model, loss, batch_size=100, learning_rate=0.001, log_frequency=100):
        self.model = model
        self._loss_fn = _StandardLoss(self, loss)
        self.batch_size = batch_size
        self.log_frequency = log_frequency
        self._pytorch_optimizer = torch.optim.Adam(model.parameters(), lr=learning_rate)
        self._global_step = 0
        self._rng = np.random.RandomState(0)

    def _prepare_batch(self, batch):
        inputs, labels, weights = batch
        to = lambda xs: [torch.as_tensor(x, dtype=torch.float32) for x in xs]
        return to(inputs), to(labels), to(weights)

    def fit(self, dataset, nb_epoch=10, all_losses=None):
        return self.fit_generator(dataset.iterbatches(self.batch_size, nb_epoch, False, self._rng), all_losses=all_losses)

    def fit_generator(self, generator, all_losses=None):
        self.model.train()
        avg_loss = 0.0
        last_avg_loss = 0.0
        averaged_batches = 0
        loss = self._loss_fn
        optimizer = self._pytorch_optimizer
        time1 = time.time()

        # Main training loop.

        for batch in generator:
            inputs, labels, weights = self._prepare_batch(batch)
            if isinstance(inputs, list) and len(inputs) == 1:
                inputs = inputs[0]
            optimizer.zero_grad()
            outputs = self.model(inputs)
            if isinstance(outputs, torch.Tensor):
                outputs = [outputs]
            batch_loss = loss(outputs, labels, weights)
            batch_loss.backward()
            optimizer.step()
            self._global_step += 1
            current_step = self._global_step

            avg_loss += batch_loss

            # Report progress and write checkpoints.
            averaged_batches += 1
            should_log = (current_step % self.log_frequency == 0)
            if should_log:
                avg_loss = float(avg_loss) / averaged_batches
                logger.info('Ending global_step %d: Average loss %g' %
                            (current_step, avg_loss))
                if all_losses is not None:
                    all_losses.append(avg_loss)
                # Capture the last avg_loss in case of return since we're resetting to 0 now
                last_avg_loss = avg_loss
                avg_loss = 0.0
                averaged_batches = 0

        # Report final results.
        if averaged_batches > 0:
            avg_loss = float(avg_loss) / averaged_batches
            if all_losses is not None:
                all_losses.append(avg_loss)
            last_avg_loss = avg_loss
        return last_avg_loss

    def predict_on_batch(self, X):
        self.model.eval()
        with torch.no_grad():
            out = self.model(torch.as_tensor(X, dtype=torch.float32)).numpy()
        self.model.train()
        return out


def make_data(n, rng, w_true):
    X = (rng.rand(n, 256) < 0.1).astype(np.float32)
    rate = np.exp(X @ w_true - 1.5)
    y = rng.poisson(rate).astype(np.float32).reshape(-1, 1)
    return NumpyDataset(X, y, np.ones((n, 1), dtype=np.float32))


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    w_true = np.where(rng.rand(256) < 0.1, rng.rand(256) * 1.2, 0.0)
    train, valid = make_data(2000, rng, w_true), make_data(500, rng, w_true)
    print('fraction of zero counts: %.3f' % (train.y == 0).mean())

    net = nn.Sequential(nn.Linear(256, 128), nn.ReLU(), nn.Linear(128, 64), nn.ReLU(), nn.Linear(64, 1), nn.ReLU())
    with torch.no_grad():
        net[4].bias.fill_(1.0)
    model = TorchModel(net, PoissonLoss(), batch_size=50, learning_rate=1e-3, log_frequency=40)

    for epoch in range(8):
        losses = []
        model.fit(train, nb_epoch=1, all_losses=losses)
        pred = model.predict_on_batch(valid.X)
        mae = np.abs(pred - valid.y).mean()
        print('epoch %d: train loss %s  valid MAE %.4f  zero predictions %d/%d' %
              (epoch, ' '.join('%.4f' % l for l in losses), mae, (pred == 0).sum(), len(pred)))


if __name__ == '__main__':
    main()
