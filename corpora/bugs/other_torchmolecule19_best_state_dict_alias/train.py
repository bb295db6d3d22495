# Source: liugangcode/torch-molecule, torch_molecule/predictor/gnn/modeling_gnn.py (GNNMolecularPredictor.fit, _setup_optimizers, _train_epoch, _evaluation_epoch, predict), commit 74ba35cc7d389704fe403b8cd881f0660ca51dfe
# Report: https://github.com/liugangcode/torch-molecule/pull/19
# torch-molecule's GNN property predictor: fit() trains for `epochs`, evaluates on the
# validation set each epoch, keeps the state of the best epoch (early stopping with
# patience) and restores it at the end. The torch_geometric GIN on SMILES graphs is reduced
# to a dense-adjacency GIN on synthetic 10-atom molecular graphs; the target is a noisy
# count-based property; 48 training molecules so the model overfits after a few epochs.
import warnings
from typing import List, Optional, Tuple, Any

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class GIN(nn.Module):
    def __init__(self, num_atom_types=6, hidden=64, num_layer=3, num_task=1):
        super().__init__()
        self.embed = nn.Embedding(num_atom_types, hidden)
        self.mlps = nn.ModuleList([nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, hidden))
                                   for _ in range(num_layer)])
        self.head = nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, num_task))

    def initialize_parameters(self):
        for m in self.modules():
            if isinstance(m, nn.Linear):
                m.reset_parameters()

    def forward(self, atoms, adj):
        h = self.embed(atoms)
        for mlp in self.mlps:
            h = torch.relu(mlp(h + adj @ h))
        return self.head(h.mean(1))


def make_molecules(n, rng):
    atoms = rng.randint(0, 6, size=(n, 10))
    adj = np.zeros((n, 10, 10), dtype=np.float32)
    for i in range(n):
        for a in range(1, 10):  # random tree + a few ring closures
            b = rng.randint(0, a)
            adj[i, a, b] = adj[i, b, a] = 1
        for _ in range(2):
            a, b = rng.randint(0, 10, 2)
            if a != b:
                adj[i, a, b] = adj[i, b, a] = 1
    bonds_cn = np.einsum('nab,na,nb->n', adj, (atoms == 1).astype(np.float32), (atoms == 2).astype(np.float32))
    y = 0.5 * bonds_cn + 0.3 * (atoms == 3).sum(1) - 0.2 * (atoms == 4).sum(1) + 0.5 * rng.randn(n)
    return torch.tensor(atoms), torch.tensor(adj), torch.tensor(y, dtype=torch.float32).unsqueeze(1)


class GNNMolecularPredictor:
    def __init__(self, epochs=60, batch_size=16, learning_rate=5e-3, weight_decay=0.0, patience=50,
                 use_lr_scheduler=False, scheduler_factor=0.5, scheduler_patience=5, verbose=False):
        self.epochs = epochs
        self.batch_size = batch_size
        self.learning_rate = learning_rate
        self.weight_decay = weight_decay
        self.patience = patience
        self.use_lr_scheduler = use_lr_scheduler
        self.scheduler_factor = scheduler_factor
        self.scheduler_patience = scheduler_patience
        self.verbose = verbose
        self.evaluate_higher_better = False
        self.evaluate_name = 'mae'
        self.model_class = GIN

    def _initialize_model(self, model_class):
        self.model = model_class()

    def _setup_optimizers(self) -> Tuple[torch.optim.Optimizer, Optional[Any]]:
        optimizer = torch.optim.Adam(
            self.model.parameters(), lr=self.learning_rate, weight_decay=self.weight_decay
        )
        scheduler = None
        if self.use_lr_scheduler:
            scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
                optimizer,
                mode="min",
                factor=self.scheduler_factor,
                patience=self.scheduler_patience,
                min_lr=1e-6,
            )
        return optimizer, scheduler

    def _train_epoch(self, train_loader, optimizer, epoch, global_pbar=None):
        self.model.train()
        losses = []
        for atoms, adj, y in train_loader:
            optimizer.zero_grad()
            loss = nn.functional.mse_loss(self.model(atoms, adj), y)
            loss.backward()
            optimizer.step()
            losses.append(loss.item())
        return losses

    def _evaluation_epoch(self, loader):
        self.model.eval()
        with torch.no_grad():
            errors = [(self.model(atoms, adj) - y).abs() for atoms, adj, y in loader]
        self.model.train()
        return torch.cat(errors).mean().item()

    def fit(self, train_dataset, val_dataset=None) -> "GNNMolecularPredictor":
        self._initialize_model(self.model_class)
        self.model.initialize_parameters()
        optimizer, scheduler = self._setup_optimizers()

        train_loader = DataLoader(train_dataset, batch_size=self.batch_size, shuffle=True, num_workers=0)
        val_loader = DataLoader(val_dataset, batch_size=self.batch_size, shuffle=False, num_workers=0)

        # Initialize training state
        self.fitting_loss = []
        self.fitting_epoch = 0
        self.val_history = []
        best_state_dict = None
        best_eval = float('-inf') if self.evaluate_higher_better else float('inf')
        cnt_wait = 0

        for epoch in range(self.epochs):
            # Training phase
            train_losses = self._train_epoch(train_loader, optimizer, epoch)
            self.fitting_loss.append(float(np.mean(train_losses)))

            # Validation phase
            current_eval = self._evaluation_epoch(val_loader)
            self.val_history.append(current_eval)

            if scheduler:
                scheduler.step(current_eval)

            # Model selection (check if current evaluation is better)
            is_better = (
                current_eval > best_eval if self.evaluate_higher_better
                else current_eval < best_eval
            )

            if is_better:
                self.fitting_epoch = epoch
                best_eval = current_eval
                best_state_dict = self.model.state_dict()
                cnt_wait = 0
            else:
                cnt_wait += 1
                if cnt_wait > self.patience:
                    break

        # Restore best model
        if best_state_dict is not None:
            self.model.load_state_dict(best_state_dict)
        else:
            warnings.warn(
                "No improvement was achieved during training. "
                "The model may not be fitted properly.",
                UserWarning
            )

        self.is_fitted_ = True
        return self


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    train, val, test = make_molecules(48, rng), make_molecules(64, rng), make_molecules(256, rng)
    predictor = GNNMolecularPredictor(epochs=60, patience=50)
    predictor.fit(TensorDataset(*train), TensorDataset(*val))
    for e in range(0, predictor.epochs, 10):
        print('epoch %2d: train loss %.4f  val mae %.4f' % (e, predictor.fitting_loss[e], predictor.val_history[e]))
    print('best epoch %d: val mae %.4f' % (predictor.fitting_epoch, predictor.val_history[predictor.fitting_epoch]))
    print('last epoch %d: val mae %.4f' % (len(predictor.val_history) - 1, predictor.val_history[-1]))
    restored_val = predictor._evaluation_epoch(DataLoader(TensorDataset(*val), batch_size=64))
    test_mae = predictor._evaluation_epoch(DataLoader(TensorDataset(*test), batch_size=64))
    print('restored model: val mae %.4f  test mae %.4f' % (restored_val, test_mae))


if __name__ == '__main__':
    main()
