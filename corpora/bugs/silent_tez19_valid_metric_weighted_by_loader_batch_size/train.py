# Source: abhishekkrthakur/tez, tez/model/model.py (Model.train_one_epoch, validate_one_epoch, fit, predict), tez/utils.py (AverageMeter), commit ddd7da840721a09c1a31cbcc405108bec3cb23b7
# Report: https://github.com/abhishekkrthakur/tez/issues/19
# tez.Model: a user model inherits from it, defines forward -> (output, loss, metrics),
# fetch_optimizer / fetch_scheduler and monitor_metrics, and calls fit(); the fit loop, the
# per-epoch train / valid meters and predict() are kept from tez, tqdm, callbacks, fp16 and
# TPU branches are dropped. The user's model is a tabular MLP classifier on synthetic
# credit-style data: 600 training rows, 230 validation rows (train_bs 64, valid_bs 64).
import numpy as np
import torch
import torch.nn as nn
from sklearn import metrics as skm


class AverageMeter:
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class Model(nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.train_loader = None
        self.valid_loader = None
        self.optimizer = None
        self.scheduler = None
        self.step_scheduler_after = None
        self.current_epoch = 0
        self.device = None
        self.accumulation_steps = 0
        self.batch_index = 0
        self.metrics = {"train": {}, "valid": {}}

    def fetch_optimizer(self, *args, **kwargs):
        return

    def fetch_scheduler(self, *args, **kwargs):
        return

    def model_fn(self, data):
        for key, value in data.items():
            data[key] = value.to(self.device)
        output, loss, metrics = self(**data)
        return output, loss, metrics

    def train_one_step(self, data):
        if self.accumulation_steps == 1 and self.batch_index == 0:
            self.zero_grad()
        _, loss, metrics = self.model_fn(data)
        loss = loss / self.accumulation_steps
        loss.backward()
        if (self.batch_index + 1) % self.accumulation_steps == 0:
            self.optimizer.step()
            if self.scheduler:
                if self.step_scheduler_after == "batch":
                    self.scheduler.step()
            if self.batch_index > 0:
                self.zero_grad()
        return loss, metrics

    def validate_one_step(self, data):
        _, loss, metrics = self.model_fn(data)
        return loss, metrics

    def train_one_epoch(self, data_loader):
        self.train()
        losses = AverageMeter()
        if self.accumulation_steps > 1:
            self.optimizer.zero_grad()
        for b_idx, data in enumerate(data_loader):
            self.batch_index = b_idx
            loss, metrics = self.train_one_step(data)
            losses.update(loss.item() * self.accumulation_steps, data_loader.batch_size)
            if b_idx == 0:
                metrics_meter = {k: AverageMeter() for k in metrics}
            monitor = {}
            for m_m in metrics_meter:
                metrics_meter[m_m].update(metrics[m_m], data_loader.batch_size)
                monitor[m_m] = metrics_meter[m_m].avg
        self.metrics["train"].update(monitor)
        self.metrics["train"]["loss"] = losses.avg
        return losses.avg

    def validate_one_epoch(self, data_loader):
        self.eval()
        losses = AverageMeter()
        for b_idx, data in enumerate(data_loader):
            with torch.no_grad():
                loss, metrics = self.validate_one_step(data)
            losses.update(loss.item(), data_loader.batch_size)
            if b_idx == 0:
                metrics_meter = {k: AverageMeter() for k in metrics}
            monitor = {}
            for m_m in metrics_meter:
                metrics_meter[m_m].update(metrics[m_m], data_loader.batch_size)
                monitor[m_m] = metrics_meter[m_m].avg
        self.metrics["valid"].update(monitor)
        self.metrics["valid"]["loss"] = losses.avg
        return losses.avg

    def predict(self, dataset, batch_size=16):
        data_loader = torch.utils.data.DataLoader(dataset, batch_size=batch_size)
        if self.training:
            self.eval()
        for data in data_loader:
            with torch.no_grad():
                output, _, _ = self.model_fn(data)
                yield output.cpu().detach().numpy()

    def fit(self, train_dataset, valid_dataset=None, device="cpu", epochs=10, train_bs=16, valid_bs=16,
            train_shuffle=True, valid_shuffle=False, accumulation_steps=1):
        self.device = device
        self.accumulation_steps = accumulation_steps
        self.train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=train_bs, shuffle=train_shuffle)
        if valid_dataset is not None:
            self.valid_loader = torch.utils.data.DataLoader(valid_dataset, batch_size=valid_bs, shuffle=valid_shuffle)
        self.optimizer = self.fetch_optimizer()
        self.scheduler = self.fetch_scheduler()
        for _ in range(epochs):
            self.train_one_epoch(self.train_loader)
            if self.valid_loader:
                self.validate_one_epoch(self.valid_loader)
            if self.scheduler and self.step_scheduler_after == "epoch":
                self.scheduler.step()
            print("epoch {}: train loss {:.4f} acc {:.4f} | valid loss {:.4f} acc {:.4f}".format(
                self.current_epoch, self.metrics["train"]["loss"], self.metrics["train"]["accuracy"],
                self.metrics["valid"]["loss"], self.metrics["valid"]["accuracy"]))
            self.current_epoch += 1


class CreditDataset:
    def __init__(self, features, targets):
        self.features = features
        self.targets = targets

    def __len__(self):
        return len(self.targets)

    def __getitem__(self, item):
        return {"x": torch.tensor(self.features[item], dtype=torch.float),
                "targets": torch.tensor(self.targets[item], dtype=torch.long)}


class CreditModel(Model):
    def __init__(self, num_features, num_classes):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(num_features, 64), nn.ReLU(), nn.Dropout(0.1),
                                 nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, num_classes))
        self.step_scheduler_after = "epoch"

    def fetch_optimizer(self):
        return torch.optim.Adam(self.parameters(), lr=3e-3)

    def fetch_scheduler(self):
        return torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=4, gamma=0.5)

    def loss(self, outputs, targets):
        return nn.CrossEntropyLoss()(outputs, targets)

    def monitor_metrics(self, outputs, targets):
        outputs = torch.argmax(outputs, dim=1).cpu().detach().numpy()
        targets = targets.cpu().detach().numpy()
        return {"accuracy": skm.accuracy_score(targets, outputs)}

    def forward(self, x, targets=None):
        outputs = self.net(x)
        if targets is not None:
            loss = self.loss(outputs, targets)
            met = self.monitor_metrics(outputs, targets)
            return outputs, loss, met
        return outputs, None, {}


def make_data(rng, n, shift):
    x = rng.normal(size=(n, 12)).astype(np.float32)
    x[:, 0] += shift
    logits = 1.5 * x[:, 0] - 1.0 * x[:, 1] + 0.8 * x[:, 2] * x[:, 3]
    y = (logits + rng.normal(0, 0.8, size=n) > 0).astype(np.int64)
    return x, y


def main():
    torch.manual_seed(42)
    rng = np.random.RandomState(42)
    xtr, ytr = make_data(rng, 600, 0.0)
    # validation rows arrive in application order; the most recent ones come from a shifted population
    xva1, yva1 = make_data(rng, 192, 0.0)
    xva2, yva2 = make_data(rng, 38, -1.2)
    xva, yva = np.concatenate([xva1, xva2]), np.concatenate([yva1, yva2])
    x2 = rng.normal(size=(38, 12)).astype(np.float32)
    xva[-38:, 1:] = x2[:, 1:] * 2.5

    train_dataset = CreditDataset(xtr, ytr)
    valid_dataset = CreditDataset(xva, yva)
    model = CreditModel(num_features=12, num_classes=2)
    model.fit(train_dataset, valid_dataset, device="cpu", epochs=10, train_bs=64, valid_bs=64)

    preds = np.concatenate(list(model.predict(valid_dataset, batch_size=64)))
    full_acc = skm.accuracy_score(yva, preds.argmax(1))
    full_loss = nn.CrossEntropyLoss()(torch.from_numpy(preds), torch.from_numpy(yva)).item()
    print("reported valid: loss {:.4f} acc {:.4f} | recomputed on all {} valid rows: loss {:.4f} acc {:.4f}".format(
        model.metrics["valid"]["loss"], model.metrics["valid"]["accuracy"], len(yva), full_loss, full_acc))


if __name__ == "__main__":
    main()
