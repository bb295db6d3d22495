# Source: ContinualAI/avalanche, avalanche/training/plugins/ewc.py (EWCPlugin, July 2022)
# Report: https://github.com/ContinualAI/avalanche/issues/1099
# Two-experience class-incremental stream on synthetic data with Avalanche's EWCPlugin
# (mode="separate"); the strategy loop (clock, before_backward / after_training_exp
# callbacks) is reduced to the few lines Naive/EWC strategies run.
from collections import defaultdict

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

def copy_params_dict(model):
    return {k: p.detach().clone() for k, p in model.named_parameters()}

def zerolike_params_dict(model):
    return {k: torch.zeros_like(p) for k, p in model.named_parameters()}

class EWCPlugin:
    def __init__(self, ewc_lambda, mode="separate", decay_factor=None, keep_importance_data=False):
        self.ewc_lambda = ewc_lambda
        self.mode = mode
        self.decay_factor = decay_factor
        self.keep_importance_data = True if mode == "separate" else keep_importance_data

        self.saved_params = defaultdict(dict)
        self.importances = defaultdict(dict)

    def before_backward(self, strategy, **kwargs):
        """
        Compute EWC penalty and add it to the loss.
        """
        exp_counter = strategy.clock.train_exp_counter
        if exp_counter == 0:
            return

        penalty = torch.tensor(0).float().to(strategy.device)

        if self.mode == "separate":
            for experience in range(exp_counter):
                for k, cur_param in strategy.model.named_parameters():
                    # new parameters do not count
                    if k not in self.saved_params[experience]:
                        continue
                    saved_param = self.saved_params[experience][k]
                    imp = self.importances[experience][k]
                    n_units = saved_param.shape[0]
                    cur_param = saved_param[:n_units]
                    penalty += (imp * (cur_param - saved_param).pow(2)).sum()
        else:
            raise ValueError("Wrong EWC mode.")

        strategy.last_penalty = penalty.item()
        strategy.loss += self.ewc_lambda * penalty

    def after_training_exp(self, strategy, **kwargs):
        exp_counter = strategy.clock.train_exp_counter
        importances = self.compute_importances(strategy.model, strategy._criterion, strategy.optimizer,
                                               strategy.experience, strategy.device, strategy.train_mb_size)
        self.importances[exp_counter] = importances
        self.saved_params[exp_counter] = copy_params_dict(strategy.model)

    def compute_importances(self, model, criterion, optimizer, dataset, device, batch_size):
        model.eval()
        importances = zerolike_params_dict(model)
        dataloader = DataLoader(dataset, batch_size=batch_size)
        for i, batch in enumerate(dataloader):
            x, y = batch[0].to(device), batch[1].to(device)
            optimizer.zero_grad()
            out = model(x)
            loss = criterion(out, y)
            loss.backward()
            for (k1, p), (k2, imp) in zip(model.named_parameters(), importances.items()):
                assert k1 == k2
                if p.grad is not None:
                    imp.data += p.grad.data.clone().pow(2)
        for _, imp in importances.items():
            imp.data /= float(len(dataloader))
        return importances

class Clock:
    train_exp_counter = 0

class EWC:
    def __init__(self, model, optimizer, criterion, ewc_lambda, train_mb_size, train_epochs, device="cpu"):
        self.model, self.optimizer, self._criterion = model, optimizer, criterion
        self.train_mb_size, self.train_epochs, self.device = train_mb_size, train_epochs, device
        self.plugins = [EWCPlugin(ewc_lambda, mode="separate")]
        self.clock = Clock()
        self.last_penalty = 0.0

    def train(self, experience):
        self.experience = experience
        self.model.train()
        for epoch in range(self.train_epochs):
            for self.mb_x, self.mb_y in DataLoader(experience, batch_size=self.train_mb_size, shuffle=True):
                self.optimizer.zero_grad()
                self.loss = self._criterion(self.model(self.mb_x), self.mb_y)
                for p in self.plugins:
                    p.before_backward(self)
                self.loss.backward()
                self.optimizer.step()
        for p in self.plugins:
            p.after_training_exp(self)
        self.clock.train_exp_counter += 1

    @torch.no_grad()
    def eval(self, experience):
        self.model.eval()
        x, y = experience.tensors
        return (self.model(x).argmax(1) == y).float().mean().item()

def make_experience(seed, n=600):
    # PermutedMNIST-like stream: same 10 classes, each experience permutes the input features
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(10, 20, generator=torch.Generator().manual_seed(0))
    y = torch.randint(0, 10, (n,), generator=g)
    x = centers[y] + torch.randn(n, 20, generator=g) * 1.0
    perm = torch.randperm(20, generator=g) if seed > 0 else torch.arange(20)
    return TensorDataset(x[:, perm], y)

def main():
    torch.manual_seed(0)
    stream = [make_experience(0), make_experience(1)]
    model = nn.Sequential(nn.Linear(20, 64), nn.ReLU(), nn.Linear(64, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    strategy = EWC(model, optimizer, nn.CrossEntropyLoss(), ewc_lambda=1e4, train_mb_size=64, train_epochs=4)
    for i, exp in enumerate(stream):
        strategy.train(exp)
        accs = [strategy.eval(e) for e in stream[: i + 1]]
        print(f"after experience {i}: accuracy per experience {[round(a, 3) for a in accs]} "
              f"last EWC penalty {strategy.last_penalty:.6f}")

if __name__ == "__main__":
    main()
