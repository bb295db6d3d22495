# Source: pytorchbearer/torchbearer, torchbearer/metrics/primitives.py (MeanSquaredError), torchbearer/metrics/aggregators.py (Mean, RunningMetric, RunningMean), torchbearer/trial.py (Trial._fit_pass), commit a726222bf255bada431f542a49eed423c0746d80
# Report: https://github.com/pytorchbearer/torchbearer/pull/507
# torchbearer Trial training a convolutional autoencoder with metrics=['mse']: after every
# optimizer step the metric list processes the state; the 'mse' metric is the pixelwise
# squared error fed to a Mean aggregator (epoch mean) and a RunningMean (last 50 batches).
# The decorator / MetricTree machinery is written out as one MetricTree with the two
# aggregators; callbacks, samplers, validation and printing are reduced to a per-epoch line
# with the process RSS, read every 10 batches. CIFAR images are replaced by synthetic 32x32
# blobs.
import numpy as np
import torch
import torch.nn as nn
from collections import deque

Y_PRED, Y_TRUE, X, LOSS, MODEL, CRITERION, OPTIMIZER, METRIC_LIST, METRICS = (
    'y_pred', 'y_true', 'x', 'loss', 'model', 'criterion', 'optimizer', 'metric_list', 'metrics')


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096 / 2 ** 20


class Metric(object):
    def __init__(self, name):
        self.name = name

    def process(self, *args):
        pass

    def process_final(self, *args):
        pass

    def reset(self, state):
        pass


class Mean(Metric):
    """Metric aggregator which calculates the mean of process outputs between calls to reset."""

    def __init__(self, name, dim=None):
        super(Mean, self).__init__(name)
        self._kwargs = {'dim': dim} if dim is not None else {}
        self._sum = 0.0
        self._count = 0

    def process(self, *args):
        data = args[0]
        tot = data.sum(**self._kwargs)
        self._sum += tot
        self._count += data.numel() / tot.numel()

    def process_final(self, *args):
        res = self._sum / self._count
        return res.item() if res.numel() <= 1 else res.tolist()

    def reset(self, state):
        super(Mean, self).reset(state)
        self._sum = 0.0
        self._count = 0


class RunningMetric(Metric):
    """A metric which aggregates batches of results and presents a method to periodically process these into a value."""

    def __init__(self, name, batch_size=50, step_size=10):
        super(RunningMetric, self).__init__(name)
        self._batch_size = batch_size
        self._step_size = step_size
        self._cache = deque()
        self._result = {}
        self._i = 0

    def process(self, *args):
        self._cache.append(self._process_train(*args))
        if len(self._cache) > self._batch_size:
            self._cache.popleft()
        if self._i % self._step_size == 0:
            self._result = self._step(list(self._cache))
        self._i += 1
        return self._result

    def reset(self, state):
        self._i = 0


class RunningMean(RunningMetric):
    def __init__(self, name, batch_size=50, step_size=10, dim=None):
        super(RunningMean, self).__init__(name, batch_size=batch_size, step_size=step_size)
        self._kwargs = {'dim': dim} if dim is not None else {}

    def _process_train(self, *args):
        data = args[0]
        res = data.mean(**self._kwargs)
        return res

    def _step(self, cache):
        res = sum(cache) / float(len(cache))
        return res.item() if res.numel() <= 1 else res.tolist()


class MeanSquaredError(Metric):
    """Mean squared error metric. Computes the pixelwise squared error which is then averaged with decorators."""

    def __init__(self, pred_key=Y_PRED, target_key=Y_TRUE):
        super(MeanSquaredError, self).__init__('mse')
        self.pred_key = pred_key
        self.target_key = target_key

    def process(self, *args):
        state = args[0]
        y_pred = state[self.pred_key]
        y_true = state[self.target_key]
        return torch.pow(y_pred - y_true.view_as(y_pred), 2)


class MetricTree(Metric):
    """The root metric feeds its output to its children (@mean, @running_mean)."""

    def __init__(self, root, children):
        super().__init__(root.name)
        self.root, self.children = root, children

    def process(self, state):
        out = self.root.process(state)
        res = {}
        for child in self.children:
            r = child.process(out)
            if r is not None and r != {}:
                res['running_' + self.name] = r
        return res

    def process_final(self, state):
        return {self.name: self.children[0].process_final()}

    def reset(self, state):
        for child in self.children:
            child.reset(state)


class AutoEncoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(3, 16, 3, 2, 1), nn.ReLU(), nn.Conv2d(16, 32, 3, 2, 1), nn.ReLU())
        self.decoder = nn.Sequential(nn.ConvTranspose2d(32, 16, 4, 2, 1), nn.ReLU(),
                                     nn.ConvTranspose2d(16, 3, 4, 2, 1), nn.Sigmoid())

    def forward(self, x):
        return self.decoder(self.encoder(x))


def fit_pass(state, loader):
    """Trial._fit_pass: closure (zero_grad, forward, criterion, backward), optimizer.step(closure),
    then the metric list processes the state."""
    state[MODEL].train()
    state[METRIC_LIST].reset(state)
    state[METRICS] = {}
    rss = []
    for batch, (x, y) in enumerate(loader):
        state[X], state[Y_TRUE] = x, y

        def closure():
            # Zero grads
            state[OPTIMIZER].zero_grad()
            # Forward Pass
            state[Y_PRED] = state[MODEL](state[X])
            # Loss Calculation
            state[LOSS] = state[CRITERION](state[Y_PRED], state[Y_TRUE])
            # Backwards pass
            state[LOSS].backward()

        # Update parameters
        state[OPTIMIZER].step(closure)
        state[METRICS] = state[METRIC_LIST].process(state)
        if batch % 10 == 9:
            rss.append(rss_mb())
    state[METRICS].update(state[METRIC_LIST].process_final(state))
    return state, rss


def make_images(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    yy, xx = torch.meshgrid(torch.arange(32.0), torch.arange(32.0), indexing="ij")
    c = torch.rand(n, 2, generator=g) * 20 + 6
    colour = torch.rand(n, 3, 1, 1, generator=g)
    blob = torch.exp(-((xx - c[:, 0, None, None]) ** 2 + (yy - c[:, 1, None, None]) ** 2) / 30.0)
    return (colour * blob[:, None]).clamp(0, 1)


def main():
    torch.manual_seed(0)
    torch.set_num_threads(1)
    images = make_images(5120)
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(images, images), batch_size=128, shuffle=True)
    model = AutoEncoder()
    optimizer = torch.optim.Adam(model.parameters(), lr=2e-3)
    mse = MetricTree(MeanSquaredError(), [Mean('mse'), RunningMean('running_mse')])
    state = {MODEL: model, CRITERION: nn.MSELoss(), OPTIMIZER: optimizer, METRIC_LIST: mse}
    print(f"start: process RSS {rss_mb():.0f} MB")
    for epoch in range(3):
        state, rss = fit_pass(state, loader)
        print(f"epoch {epoch}: mse {state[METRICS]['mse']:.5f} running_mse {state[METRICS].get('running_mse', 0):.5f} "
              f"process RSS every 10 batches (MB): {' '.join(f'{v:.0f}' for v in rss)}")


if __name__ == "__main__":
    main()
