# Source: sktime/sktime, sktime/regression/deep_learning/base/_base_torch.py (BaseDeepRegressorTorch._fit, _run_epoch, _predict, PytorchDataset), sktime/regression/deep_learning/mlp/_mlp_torch.py, sktime/networks/mlp/_mlp_torch.py, commit 7bd7d1620c0656f3210eeb850bb1c0034159ee47
# Report: https://github.com/sktime/sktime/issues/10931
# Time-series regression with sktime's torch MLPRegressorTorch: each series (1 channel, 24 steps)
# is mapped to a scalar target. The estimator scaffolding (tags, checks, mtype conversion,
# _safe_import) is removed; the fit/epoch/predict code and the network are kept.
import warnings

import numpy as np
import torch
from torch.optim.lr_scheduler import ReduceLROnPlateau
from torch.utils.data import DataLoader, Dataset


class PytorchDataset(Dataset):
    """Dataset for use in sktime deep learning regressor based on pytorch."""

    def __init__(self, X, y=None):
        X = np.transpose(X, (0, 2, 1))
        self.X = X
        self.y = y

    def __len__(self):
        return len(self.X)

    def __getitem__(self, i):
        x = self.X[i]
        x = torch.tensor(x, dtype=torch.float)
        inputs = {"X": x}
        if self.y is None:
            return inputs
        y = self.y[i]
        y = torch.tensor(y, dtype=torch.float)
        return inputs, y


class MLPNetworkTorch(torch.nn.Module):
    def __init__(self, input_shape, num_classes, hidden_dim=500, n_layers=4, activation=None,
                 activation_hidden=None, bias=True, dropout=(0.1, 0.2, 0.2, 0.3), fc_dropout=0.0, random_state=0):
        super().__init__()
        self.input_shape = input_shape
        self.num_classes = num_classes
        self.hidden_dim = hidden_dim
        self.n_layers = n_layers
        self.bias = bias
        self.dropout = dropout
        self.fc_dropout = fc_dropout
        self.activation = activation
        self.activation_hidden = activation_hidden
        in_features = self.input_shape[1] * self.input_shape[2]
        layers = [torch.nn.Flatten()]
        prev_dim = in_features
        for i in range(self.n_layers):
            if self.dropout[i] > 0.0:
                layers.append(torch.nn.Dropout(self.dropout[i]))
            layers.append(torch.nn.Linear(in_features=prev_dim, out_features=self.hidden_dim, bias=self.bias))
            if self.activation_hidden:
                layers.append(self.activation_hidden)
            prev_dim = self.hidden_dim
        self.mlp = torch.nn.Sequential(*layers)
        if self.fc_dropout:
            self.out_dropout = torch.nn.Dropout(p=self.fc_dropout)
        self.fc = torch.nn.Linear(in_features=self.hidden_dim, out_features=self.num_classes, bias=self.bias)

    def forward(self, X):
        out = self.mlp(X)
        if self.fc_dropout:
            out = self.out_dropout(out)
        out = self.fc(out)
        if self.activation:
            out = self.activation(out)
        return out


class MLPRegressorTorch:
    def __init__(self, hidden_dim=500, n_layers=4, dropout=(0.1, 0.2, 0.2, 0.3), num_epochs=100, batch_size=1,
                 lr=0.001, verbose=False, random_state=0):
        self.hidden_dim = hidden_dim
        self.n_layers = n_layers
        self.dropout = dropout
        self.num_epochs = num_epochs
        self.batch_size = batch_size
        self.lr = lr
        self.verbose = verbose
        self.random_state = random_state
        self._metrics_objects = None

    def _build_network(self, X):
        self.input_shape = X.shape
        return MLPNetworkTorch(input_shape=self.input_shape, num_classes=1, hidden_dim=self.hidden_dim,
                               n_layers=self.n_layers, activation=None, activation_hidden=torch.nn.ReLU(),
                               dropout=self.dropout, random_state=self.random_state)

    def fit(self, X, y):
        torch.manual_seed(self.random_state)
        self._fit(X, y)
        return self

    def _fit(self, X, y):
        self.network = self._build_network(X)
        self._criterion = torch.nn.MSELoss()
        self._optimizer = torch.optim.Adam(self.network.parameters(), lr=self.lr)
        self._schedulers = [ReduceLROnPlateau(self._optimizer)]
        dataloader = self._build_dataloader(X, y)

        self.network.train()
        for epoch in range(self.num_epochs):
            self._run_epoch(epoch, dataloader)

    def _run_epoch(self, epoch, dataloader):
        losses = []
        metric_values = {name: [] for name in (self._metrics_objects or {})}

        for inputs, outputs in dataloader:
            y_pred = self.network(**inputs)
            loss = self._criterion(y_pred, outputs)
            self._optimizer.zero_grad()
            loss.backward()
            self._optimizer.step()
            losses.append(loss.item())

        epoch_loss = np.average(losses)

        if self._schedulers:
            for scheduler in self._schedulers:
                if isinstance(scheduler, ReduceLROnPlateau):
                    scheduler.step(epoch_loss)
                else:
                    scheduler.step()

        if self.verbose:
            msg = f"Epoch {epoch + 1}: Loss: {epoch_loss}"
            print(msg)

    def _build_dataloader(self, X, y=None):
        dataset = PytorchDataset(X, y)
        return DataLoader(dataset, self.batch_size)

    def predict(self, X):
        self.network.eval()
        dataloader = self._build_dataloader(X)
        y_pred = []
        with torch.no_grad():
            for inputs in dataloader:
                y_pred.append(self.network(**inputs).detach())
        y_pred = torch.cat(y_pred, dim=0)
        y_pred = y_pred.numpy()
        if y_pred.ndim == 2 and y_pred.shape[1] == 1:
            y_pred = y_pred.squeeze()
        return y_pred


def make_series(rng, n, length=24):
    t = np.linspace(0, 1, length)
    amp = rng.uniform(0.5, 2.0, n)
    freq = rng.uniform(1.0, 3.0, n)
    X = amp[:, None] * np.sin(2 * np.pi * freq[:, None] * t[None]) + 0.05 * rng.standard_normal((n, length))
    y = amp * freq
    return X[:, None, :].astype(np.float32), y.astype(np.float32)


def main():
    warnings.simplefilter("once")
    rng = np.random.default_rng(0)
    X_train, y_train = make_series(rng, 512)
    X_test, y_test = make_series(rng, 128)
    reg = MLPRegressorTorch(hidden_dim=64, num_epochs=15, batch_size=32, lr=1e-3, verbose=True)
    reg.fit(X_train, y_train)
    y_pred = reg.predict(X_test)
    rmse = float(np.sqrt(np.mean((y_pred - y_test) ** 2)))
    r2 = 1 - np.sum((y_pred - y_test) ** 2) / np.sum((y_test - y_test.mean()) ** 2)
    print(f"test RMSE {rmse:.4f}  R^2 {r2:.4f}  (predicted std {y_pred.std():.3f}, target std {y_test.std():.3f})")


if __name__ == "__main__":
    main()
