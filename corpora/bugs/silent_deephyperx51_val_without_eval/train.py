# Source: nshaud/DeepHyperX, models.py (Baseline, get_model, train, val), datasets.py (HyperX), main.py, commit 176e582e53df92a6b4014b022c7f67034b489889
# Report: https://github.com/nshaud/DeepHyperX/issues/51
# DeepHyperX's fully connected baseline ("nn" model, with dropout) trained on single-pixel
# spectra; each epoch ends with val() on 5% of the labelled pixels, whose accuracy drives
# ReduceLROnPlateau and the checkpoint name. The hyperspectral scene is replaced by a
# synthetic 96x96 image with 32 bands and 6 classes (0 = unlabelled), the layer widths
# 2048/4096/2048 by 128/256/128; tqdm, visdom and checkpoint writing are removed.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data as data
from torch.nn import init


class HyperX(torch.utils.data.Dataset):
    """ Generic class for a hyperspectral scene (patch_size = 1: one spectrum per pixel) """

    def __init__(self, data, gt, **hyperparams):
        super(HyperX, self).__init__()
        self.data = data
        self.label = gt
        self.name = hyperparams["dataset"]
        self.patch_size = hyperparams["patch_size"]
        self.ignored_labels = set(hyperparams["ignored_labels"])
        mask = np.ones_like(gt)
        for l in self.ignored_labels:
            mask[gt == l] = 0
        x_pos, y_pos = np.nonzero(mask)
        self.indices = np.array([(x, y) for x, y in zip(x_pos, y_pos)])
        self.labels = [self.label[x, y] for x, y in self.indices]
        np.random.shuffle(self.indices)

    def __len__(self):
        return len(self.indices)

    def __getitem__(self, i):
        x, y = self.indices[i]
        x1, y1 = x - self.patch_size // 2, y - self.patch_size // 2
        x2, y2 = x1 + self.patch_size, y1 + self.patch_size

        data = self.data[x1:x2, y1:y2]
        label = self.label[x1:x2, y1:y2]
        data = np.asarray(np.copy(data).transpose((2, 0, 1)), dtype="float32")
        label = np.asarray(np.copy(label), dtype="int64")
        data = torch.from_numpy(data)
        label = torch.from_numpy(label)
        data = data[:, 0, 0]
        label = label[0, 0]
        return data, label


class Baseline(nn.Module):
    """
    Baseline network
    """

    @staticmethod
    def weight_init(m):
        if isinstance(m, nn.Linear):
            init.kaiming_normal_(m.weight)
            init.zeros_(m.bias)

    def __init__(self, input_channels, n_classes, dropout=False):
        super(Baseline, self).__init__()
        self.use_dropout = dropout
        if dropout:
            self.dropout = nn.Dropout(p=0.5)

        self.fc1 = nn.Linear(input_channels, 128)
        self.fc2 = nn.Linear(128, 256)
        self.fc3 = nn.Linear(256, 128)
        self.fc4 = nn.Linear(128, n_classes)

        self.apply(self.weight_init)

    def forward(self, x):
        x = F.relu(self.fc1(x))
        if self.use_dropout:
            x = self.dropout(x)
        x = F.relu(self.fc2(x))
        if self.use_dropout:
            x = self.dropout(x)
        x = F.relu(self.fc3(x))
        if self.use_dropout:
            x = self.dropout(x)
        x = self.fc4(x)
        return x


def get_model(name, **kwargs):
    n_classes = kwargs["n_classes"]
    n_bands = kwargs["n_bands"]
    weights = torch.ones(n_classes)
    weights[torch.LongTensor(kwargs["ignored_labels"])] = 0.0
    kwargs.setdefault("weights", weights)
    kwargs["patch_size"] = 1
    center_pixel = True
    model = Baseline(n_bands, n_classes, kwargs.setdefault("dropout", False))
    lr = kwargs.setdefault("learning_rate", 0.0001)
    optimizer = optim.Adam(model.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss(weight=kwargs["weights"])
    kwargs.setdefault("epoch", 100)
    kwargs.setdefault("batch_size", 100)
    epoch = kwargs.setdefault("epoch", 100)
    kwargs.setdefault(
        "scheduler",
        optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.1, patience=epoch // 4),
    )
    kwargs["center_pixel"] = center_pixel
    return model, optimizer, criterion, kwargs


def train(net, optimizer, criterion, data_loader, epoch, scheduler=None,
          device=torch.device("cpu"), val_loader=None, supervision="full"):
    if criterion is None:
        raise Exception("Missing criterion. You must specify a loss function.")

    net.to(device)
    val_accuracies = []

    for e in range(1, epoch + 1):
        # Set the network to training mode
        net.train()
        avg_loss = 0.0

        # Run the training loop for one epoch
        for batch_idx, (data, target) in enumerate(data_loader):
            data, target = data.to(device), target.to(device)

            optimizer.zero_grad()
            output = net(data)
            loss = criterion(output, target)
            loss.backward()
            optimizer.step()

            avg_loss += loss.item()

        # Update the scheduler
        avg_loss /= len(data_loader)
        if val_loader is not None:
            val_acc = val(net, val_loader, device=device, supervision=supervision)
            val_accuracies.append(val_acc)
            metric = -val_acc
        else:
            metric = avg_loss

        if isinstance(scheduler, optim.lr_scheduler.ReduceLROnPlateau):
            scheduler.step(metric)
        elif scheduler is not None:
            scheduler.step()
        print("epoch {:2d} train loss {:.4f} val acc {:.4f} lr {:.0e}".format(
            e, avg_loss, val_acc, optimizer.param_groups[0]["lr"]))
    return val_accuracies


def val(net, data_loader, device="cpu", supervision="full"):
    # TODO : fix me using metrics()
    accuracy, total = 0.0, 0.0
    ignored_labels = data_loader.dataset.ignored_labels
    for batch_idx, (data, target) in enumerate(data_loader):
        with torch.no_grad():
            # Load the data into the GPU if required
            data, target = data.to(device), target.to(device)
            if supervision == "full":
                output = net(data)
            elif supervision == "semi":
                outs = net(data)
                output, rec = outs
            _, output = torch.max(output, dim=1)
            for out, pred in zip(output.view(-1), target.view(-1)):
                if out.item() in ignored_labels:
                    continue
                else:
                    accuracy += out.item() == pred.item()
                    total += 1
    return accuracy / total


def sample_gt(gt, train_size, mode="random"):
    indices = np.nonzero(gt)
    X = list(zip(*indices))
    y = gt[indices].ravel()
    train_gt = np.zeros_like(gt)
    test_gt = np.zeros_like(gt)
    perm = np.random.permutation(len(X))
    n_train = int(train_size * len(X))
    for k in perm[:n_train]:
        train_gt[X[k]] = y[k]
    for k in perm[n_train:]:
        test_gt[X[k]] = y[k]
    return train_gt, test_gt


def make_scene(h=96, w=96, bands=32, n_classes=6, seed=0):
    rng = np.random.RandomState(seed)
    gt = np.zeros((h, w), dtype=np.int64)
    for c in range(1, n_classes):
        for _ in range(16):
            y, x = rng.randint(0, h - 8), rng.randint(0, w - 8)
            gt[y:y + 8, x:x + 8] = c
    signatures = rng.uniform(0.2, 1.0, size=(n_classes, bands))
    img = signatures[gt] + rng.normal(0, 0.25, size=(h, w, bands))
    return img.astype("float32"), gt


def main():
    np.random.seed(0)
    torch.manual_seed(0)
    img, gt = make_scene()
    hyperparams = {"dataset": "Synthetic", "n_classes": 6, "n_bands": img.shape[-1], "ignored_labels": [0],
                   "device": torch.device("cpu"), "dropout": True, "epoch": 10, "batch_size": 100,
                   "learning_rate": 0.001}
    train_gt, test_gt = sample_gt(gt, 0.5, mode="random")
    model, optimizer, loss, hyperparams = get_model("nn", **hyperparams)
    # Split train set in train/val
    train_gt, val_gt = sample_gt(train_gt, 0.95, mode="random")
    train_dataset = HyperX(img, train_gt, **hyperparams)
    train_loader = data.DataLoader(train_dataset, batch_size=hyperparams["batch_size"], shuffle=True)
    val_dataset = HyperX(img, val_gt, **hyperparams)
    val_loader = data.DataLoader(val_dataset, batch_size=hyperparams["batch_size"])
    print(len(train_dataset), "training pixels", len(val_dataset), "validation pixels")

    train(model, optimizer, loss, train_loader, hyperparams["epoch"], scheduler=hyperparams["scheduler"],
          device=hyperparams["device"], supervision="full", val_loader=val_loader)

    model.eval()
    test_dataset = HyperX(img, test_gt, **hyperparams)
    test_loader = data.DataLoader(test_dataset, batch_size=hyperparams["batch_size"])
    print("test accuracy (eval mode) {:.4f}".format(val(model, test_loader)))


if __name__ == "__main__":
    main()
