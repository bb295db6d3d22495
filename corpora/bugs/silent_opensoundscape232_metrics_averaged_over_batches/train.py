# Source: kitzeslab/opensoundscape, opensoundscape/torch/train.py, opensoundscape/metrics.py, commit 211e5e12464cc192ea1e5c78887bce3653b40686
# Report: https://github.com/kitzeslab/opensoundscape/issues/232
# opensoundscape.torch.train.train with its Metrics object: a binary species-presence classifier
# on spectrograms. The SingleTargetAudioDataset is replaced by synthetic 3x32x32 "spectrograms"
# (a faint horizontal call band marks the rare positive class), resnet18 by a small CNN with an
# `fc` head; metadata/checkpoint saving is off (save_dir=None).
import time

import numpy as np
import torch
import torch.nn as nn
import yaml
from sklearn.metrics import accuracy_score, precision_recall_fscore_support


class Metrics:
    def __init__(self, num_classes):
        self.num_classes = num_classes
        self.loss = 0.0
        self.accuracy = 0.0
        self.precision = np.array([0.0 for _ in range(num_classes)])
        self.recall = np.array([0.0 for _ in range(num_classes)])
        self.f1 = np.array([0.0 for _ in range(num_classes)])

    def update_loss(self, loss):
        self.loss += loss

    def update_metrics(self, targets, predictions):
        self.accuracy += accuracy_score(targets, predictions)
        prec_rec_f1 = precision_recall_fscore_support(
            targets, predictions, labels=list(range(self.num_classes))
        )

        self.precision += prec_rec_f1[0]
        self.recall += prec_rec_f1[1]
        self.f1 += prec_rec_f1[2]

    def compute_metrics(self, loader_size):
        return (
            self.loss / loader_size,
            self.accuracy / loader_size,
            self.precision / loader_size,
            self.recall / loader_size,
            self.f1 / loader_size,
        )


class SpectrogramDataset(torch.utils.data.Dataset):
    """Stands in for SingleTargetAudioDataset: items are {"X": (3, H, W), "y": (1,)}."""

    def __init__(self, n, positive_rate, seed):
        rng = np.random.RandomState(seed)
        self.labels = (rng.uniform(size=n) < positive_rate).astype(np.int64)
        X = rng.normal(0, 1, size=(n, 1, 32, 32)).astype(np.float32)
        rows = rng.randint(6, 26, size=n)
        for i in np.where(self.labels == 1)[0]:
            X[i, 0, rows[i] - 2:rows[i] + 2, 4:28] += 1.6
        self.X = np.repeat(X, 3, axis=1)
        self.label_dict = {0: "absent", 1: "present"}

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, idx):
        return {"X": torch.from_numpy(self.X[idx]), "y": torch.tensor([self.labels[idx]])}


class SmallCNN(nn.Module):
    def __init__(self, num_classes=2):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(32, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.AdaptiveMaxPool2d(1),
        )
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


def train(
    save_dir,
    model,
    train_dataset,
    valid_dataset,
    optimizer,
    loss_fn,
    epochs=25,
    batch_size=1,
    num_workers=0,
    log_every=5,
    print_logging=True,
):
    device = torch.device("cpu")

    labels_yaml = yaml.dump(train_dataset.label_dict)

    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=batch_size, shuffle=True, num_workers=num_workers
    )

    valid_loader = torch.utils.data.DataLoader(
        valid_dataset, batch_size=batch_size, shuffle=False, num_workers=num_workers
    )

    model.to(device)

    # Model training
    stats = []
    for epoch in range(epochs):

        # Train model
        if print_logging:
            print(f"Epoch {epoch}")
        train_metrics = Metrics(model.fc.out_features)
        model.train()

        for t in train_loader:
            X, y = t["X"], t["y"]
            X = X.to(device)
            y = y.to(device)
            targets = y.squeeze(1)

            # Run model
            outputs = model(X)

            # Learn from batch
            loss = loss_fn(outputs, targets)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            # Update metrics with loss & class predictions for batch
            train_metrics.update_loss(loss.clone().detach().item())
            batch_scores = outputs.clone().detach()
            batch_predictions = batch_scores.argmax(dim=1)
            train_metrics.update_metrics(targets.cpu(), batch_predictions.cpu())

        # Validate model
        valid_metrics = Metrics(model.fc.out_features)
        model.eval()
        with torch.no_grad():
            for t in valid_loader:
                X, y = t["X"], t["y"]
                X = X.to(device)
                y = y.to(device)
                targets = y.squeeze(1)

                # Run model
                outputs = model(X)

                # Update metrics with class predictions for batch
                batch_scores = outputs.clone().detach()
                batch_predictions = batch_scores.argmax(dim=1)
                valid_metrics.update_metrics(targets.cpu(), batch_predictions.cpu())

        if (epoch % log_every == 0) or (epoch == epochs - 1):
            t_loss, t_acc, t_prec, t_rec, t_f1 = train_metrics.compute_metrics(
                len(train_loader)
            )
            _, v_acc, v_prec, v_rec, v_f1 = valid_metrics.compute_metrics(
                len(valid_loader)
            )

            epoch_results = {
                "train_loss": t_loss,
                "train_accuracy": t_acc,
                "train_f1": t_f1,
                "valid_accuracy": v_acc,
                "valid_precision": v_prec,
                "valid_recall": v_rec,
                "valid_f1": v_f1,
            }

            if print_logging:
                print("  Validation results:")
                for metric, result in epoch_results.items():
                    print(f"    {metric}: {np.round(result, 4)}")
            stats.append(epoch_results)
    return stats


def main():
    torch.manual_seed(0)
    train_dataset = SpectrogramDataset(480, positive_rate=0.1, seed=1)
    valid_dataset = SpectrogramDataset(200, positive_rate=0.1, seed=2)
    print(f"train positives {train_dataset.labels.sum()}/{len(train_dataset)}, "
          f"valid positives {valid_dataset.labels.sum()}/{len(valid_dataset)}")
    model = SmallCNN(num_classes=2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    start = time.time()
    train(None, model, train_dataset, valid_dataset, optimizer, loss_fn,
          epochs=8, batch_size=16, log_every=2)
    print(f"done in {time.time() - start:.1f}s")


if __name__ == "__main__":
    main()
