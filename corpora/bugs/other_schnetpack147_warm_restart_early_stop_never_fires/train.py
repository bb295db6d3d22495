# Source: atomistic-machine-learning/schnetpack, src/schnetpack/train/hooks/scheduling.py (WarmRestartHook, MaxEpochHook), src/schnetpack/train/trainer.py (Trainer.train), commit 355729cb174f970a3fc1ed632104d1a45a639ede
# Report: https://github.com/atomistic-machine-learning/schnetpack/pull/148
# SchNetPack training with cosine annealing warm restarts and restart-level early stopping
# (WarmRestartHook: after each cycle the best validation loss of the cycle is compared with the
# previous cycles', and training stops after `patience` cycles without improvement), a
# MaxEpochHook as the hard limit, and the Trainer's best-model tracking. The SchNet model is
# reduced to an embedding + one continuous-filter interaction on radial basis functions with
# sum pooling; QM9 is replaced by 96 / 64 synthetic 8-atom molecules whose energy is a sum of
# species-dependent pair potentials; a small logging hook prints one line per epoch.
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn


class Hook:
    def on_train_begin(self, trainer): pass
    def on_epoch_begin(self, trainer): pass
    def on_batch_begin(self, trainer, train_batch): pass
    def on_batch_end(self, trainer, train_batch, result, loss): pass
    def on_validation_end(self, trainer, val_loss): pass
    def on_epoch_end(self, trainer): pass
    def on_train_ends(self, trainer): pass


class WarmRestartHook(Hook):
    def __init__(self, T0=10, Tmult=2, each_step=False, lr_min=1e-6, lr_factor=1.0, patience=1):
        self.scheduler = None
        self.each_step = each_step
        self.T0 = T0
        self.Tmult = Tmult
        self.Tmax = T0
        self.lr_min = lr_min
        self.lr_factor = lr_factor
        self.patience = patience
        self.waiting = 0
        self.best_previous = float("Inf")
        self.best_current = float("Inf")

    def on_train_begin(self, trainer):
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(trainer.optimizer, self.Tmax, self.lr_min)
        self.init_opt_state = trainer.optimizer.state_dict()

    def on_batch_begin(self, trainer, train_batch):
        if self.each_step:
            self.scheduler.step()

    def on_epoch_begin(self, trainer):
        if not self.each_step:
            self.scheduler.step()

    def on_validation_end(self, trainer, val_loss):
        if self.best_current < val_loss:
            self.best_current = val_loss

        if self.scheduler.last_epoch >= self.Tmax:
            self.Tmax *= self.Tmult
            self.scheduler.last_epoch = -1
            self.scheduler.T_max = self.Tmax
            self.scheduler.base_lrs = [base_lr * self.lr_factor for base_lr in self.scheduler.base_lrs]
            trainer.optimizer.load_state_dict(self.init_opt_state)

            if self.best_current > self.best_previous:
                self.waiting += 1
            else:
                self.waiting = 0
                self.best_previous = self.best_current

            if self.waiting > self.patience:
                trainer._stop = True


class MaxEpochHook(Hook):
    def __init__(self, max_epochs):
        self.max_epochs = max_epochs

    def on_epoch_begin(self, trainer):
        if trainer.epoch > self.max_epochs:
            trainer._stop = True


class PrintHook(Hook):
    def on_validation_end(self, trainer, val_loss):
        print(f"epoch {trainer.epoch:3d} lr {trainer.optimizer.param_groups[0]['lr']:.2e} "
              f"val_loss {val_loss:.5f} best {trainer.best_loss:.5f}")


class SchNetLite(nn.Module):
    def __init__(self, n_species=3, n_atom_basis=32, n_rbf=16, cutoff=5.0):
        super().__init__()
        self.embedding = nn.Embedding(n_species, n_atom_basis)
        self.centers = nn.Parameter(torch.linspace(0, cutoff, n_rbf), requires_grad=False)
        self.filter_net = nn.Sequential(nn.Linear(n_rbf, n_atom_basis), nn.Softplus(), nn.Linear(n_atom_basis, n_atom_basis))
        self.in2f = nn.Linear(n_atom_basis, n_atom_basis, bias=False)
        self.f2out = nn.Sequential(nn.Linear(n_atom_basis, n_atom_basis), nn.Softplus(), nn.Linear(n_atom_basis, n_atom_basis))
        self.atomwise = nn.Sequential(nn.Linear(n_atom_basis, 16), nn.Softplus(), nn.Linear(16, 1))

    def forward(self, inputs):
        Z, R = inputs["_atomic_numbers"], inputs["_positions"]
        x = self.embedding(Z)
        d = torch.cdist(R, R)
        rbf = torch.exp(-4.0 * (d.unsqueeze(-1) - self.centers) ** 2)
        W = self.filter_net(rbf) * (1 - torch.eye(Z.size(1))).unsqueeze(0).unsqueeze(-1)
        v = (W * self.in2f(x).unsqueeze(1)).sum(2)
        x = x + self.f2out(v)
        return {"energy": self.atomwise(x).sum(1).squeeze(-1)}


class Trainer:
    def __init__(self, model, loss_fn, optimizer, train_loader, validation_loader, hooks):
        self._model = model
        self.loss_fn = loss_fn
        self.optimizer = optimizer
        self.train_loader = train_loader
        self.validation_loader = validation_loader
        self.hooks = hooks
        self.epoch = 0
        self.step = 0
        self.best_loss = float("inf")
        self.validation_interval = 1
        self.loss_is_normalized = True
        self.best_model = None

    def train(self, n_epochs=sys.maxsize):
        self._stop = False
        for h in self.hooks:
            h.on_train_begin(self)
        for _ in range(n_epochs):
            self.epoch += 1
            for h in self.hooks:
                h.on_epoch_begin(self)
            if self._stop:
                self.epoch -= 1
                break
            for train_batch in self.train_loader():
                self.optimizer.zero_grad()
                for h in self.hooks:
                    h.on_batch_begin(self, train_batch)
                result = self._model(train_batch)
                loss = self.loss_fn(train_batch, result)
                loss.backward()
                self.optimizer.step()
                self.step += 1
                for h in self.hooks:
                    h.on_batch_end(self, train_batch, result, loss)
                if self._stop:
                    break
            if self.epoch % self.validation_interval == 0 or self._stop:
                val_loss, n_val = 0.0, 0
                with torch.no_grad():
                    for val_batch in self.validation_loader():
                        vsize = list(val_batch.values())[0].size(0)
                        n_val += vsize
                        val_result = self._model(val_batch)
                        val_batch_loss = self.loss_fn(val_batch, val_result).item()
                        val_loss += val_batch_loss * vsize
                val_loss /= n_val
                if self.best_loss > val_loss:
                    self.best_loss = val_loss
                    self.best_model = {k: v.clone() for k, v in self._model.state_dict().items()}
                for h in self.hooks:
                    h.on_validation_end(self, val_loss)
            for h in self.hooks:
                h.on_epoch_end(self)
            if self._stop:
                break
        for h in self.hooks:
            h.on_train_ends(self)


def make_molecules(n, rng, n_atoms=8):
    eps = np.array([[1.0, 0.6, 0.3], [0.6, 0.8, 0.5], [0.3, 0.5, 1.2]])
    Z = rng.randint(0, 3, size=(n, n_atoms))
    R = rng.uniform(0, 4.0, size=(n, n_atoms, 3))
    E = np.zeros(n)
    for k in range(n):
        d = np.linalg.norm(R[k][:, None] - R[k][None], axis=-1) + np.eye(n_atoms)
        pair = eps[Z[k][:, None], Z[k][None]] * np.exp(-d) * (1 - np.eye(n_atoms))
        E[k] = pair.sum() / 2
    return {"_atomic_numbers": torch.from_numpy(Z), "_positions": torch.from_numpy(R).float(),
            "energy": torch.from_numpy((E - 2.0) / 1.0).float()}


def loader(data, batch_size, shuffle, rng):
    def it():
        n = len(data["energy"])
        order = rng.permutation(n) if shuffle else np.arange(n)
        for s in range(0, n, batch_size):
            idx = torch.from_numpy(order[s:s + batch_size])
            yield {k: v[idx] for k, v in data.items()}
    return it


def mse_loss(batch, result):
    return torch.mean((batch["energy"] - result["energy"]) ** 2)


if __name__ == "__main__":
    torch.set_num_threads(1)
    warnings.filterwarnings("ignore", message="Detected call of")
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    train_data, val_data = make_molecules(24, rng), make_molecules(64, rng)
    model = SchNetLite()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    hooks = [WarmRestartHook(T0=5, Tmult=1, lr_min=1e-5, lr_factor=1.0, patience=1), MaxEpochHook(max_epochs=80),
             PrintHook()]
    trainer = Trainer(model, mse_loss, optimizer, loader(train_data, 8, True, rng), loader(val_data, 32, False, rng),
                      hooks)
    trainer.train()
    print(f"training finished after {trainer.epoch} epochs, {trainer.step} steps; best val_loss {trainer.best_loss:.5f}")
