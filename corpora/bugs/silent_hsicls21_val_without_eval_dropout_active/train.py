# Source: eecn/Hyperspectral-Classification, models.py (get_model 'nn', Baseline, train, val, test), main.py, commit 08a85fcf5cf7c480ca627917407d752976fbed3c
# Report: https://github.com/eecn/Hyperspectral-Classification/issues/21
# DeepHyperX-style pixel classification of a hyperspectral image with the 'nn' baseline
# (4 fully connected layers with dropout), Adam, class-weighted cross-entropy with the
# 'undefined' label 0 ignored, ReduceLROnPlateau on -validation accuracy, and a val()
# pass over the validation pixels after every epoch. The hyperspectral scene is synthetic
# (6 land-cover classes with their own spectra, 60 bands, noise and illumination changes),
# the layer widths are divided by 8; 12 epochs on one CPU thread.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.nn import init
from torch.utils.data import DataLoader, Dataset


class HyperX(Dataset):
    def __init__(self, pixels, labels, ignored_labels):
        self.data = torch.from_numpy(pixels)
        self.labels = torch.from_numpy(labels)
        self.ignored_labels = ignored_labels
        self.name = "synthetic"

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        return self.data[i], self.labels[i]


class Baseline(nn.Module):
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
        self.fc1 = nn.Linear(input_channels, 256)
        self.fc2 = nn.Linear(256, 512)
        self.fc3 = nn.Linear(512, 256)
        self.fc4 = nn.Linear(256, n_classes)
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
    n_classes = kwargs['n_classes']
    n_bands = kwargs['n_bands']
    weights = torch.ones(n_classes)
    weights[torch.LongTensor(kwargs['ignored_labels'])] = 0.
    kwargs.setdefault('weights', weights)
    model = Baseline(n_bands, n_classes, kwargs.setdefault('dropout', False))
    lr = kwargs.setdefault('learning_rate', 0.0001)
    optimizer = optim.Adam(model.parameters(), lr=lr)
    criterion = nn.CrossEntropyLoss(weight=kwargs['weights'])
    epoch = kwargs.setdefault('epoch', 100)
    kwargs.setdefault('batch_size', 100)
    kwargs.setdefault('scheduler', optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.1, patience=epoch // 4))
    return model, optimizer, criterion, kwargs


def train(net, optimizer, criterion, data_loader, epoch, scheduler=None, val_loader=None):
    val_accuracies = []
    for e in range(1, epoch + 1):
        net.train()
        avg_loss = 0.
        for batch_idx, (data, target) in enumerate(data_loader):
            optimizer.zero_grad()
            output = net(data)
            loss = criterion(output, target)
            loss.backward()
            optimizer.step()
            avg_loss += loss.item()
        avg_loss /= len(data_loader)
        if val_loader is not None:
            val_acc = val(net, val_loader)
            val_accuracies.append(val_acc)
            metric = -val_acc
        else:
            metric = avg_loss
        if isinstance(scheduler, optim.lr_scheduler.ReduceLROnPlateau):
            scheduler.step(metric)
        elif scheduler is not None:
            scheduler.step()
        print("epoch {:2d}/{} train loss {:.4f} val accuracy {:.4f} lr {:.1e}".format(
            e, epoch, avg_loss, val_acc, optimizer.param_groups[0]['lr']))
    return val_accuracies


def test(net, pixels, hyperparams):
    net.eval()
    probs = []
    with torch.no_grad():
        for s in range(0, len(pixels), hyperparams['batch_size']):
            probs.append(net(torch.from_numpy(pixels[s:s + hyperparams['batch_size']])).numpy())
    return np.concatenate(probs)


def val(net, data_loader, device='cpu', supervision='full'):
    accuracy, total = 0., 0.
    ignored_labels = data_loader.dataset.ignored_labels
    for batch_idx, (data, target) in enumerate(data_loader):
        with torch.no_grad():
            data, target = data.to(device), target.to(device)
            output = net(data)
            _, output = torch.max(output, dim=1)
            for out, pred in zip(output.view(-1), target.view(-1)):
                if out.item() in ignored_labels:
                    continue
                else:
                    accuracy += out.item() == pred.item()
                    total += 1
    return accuracy / total


def make_scene(rng, n_pixels, n_bands, n_classes):
    wl = np.linspace(0, 1, n_bands)
    spectra = np.stack([0.5 + 0.3 * np.sin(2 * np.pi * (k + 1) * wl / 3 + k) for k in range(n_classes)])
    labels = rng.randint(1, n_classes + 1, size=n_pixels)
    illum = rng.uniform(0.6, 1.4, size=(n_pixels, 1))
    pixels = illum * spectra[labels - 1] + rng.normal(0, 0.35, size=(n_pixels, n_bands))
    return pixels.astype(np.float32), labels.astype(np.int64)


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    n_bands, n_land = 60, 6
    hyperparams = {'n_classes': n_land + 1, 'n_bands': n_bands, 'ignored_labels': [0], 'dropout': True,
                   'epoch': 12, 'batch_size': 100, 'learning_rate': 1e-4}
    train_px, train_gt = make_scene(rng, 3000, n_bands, n_land)
    val_px, val_gt = make_scene(rng, 1500, n_bands, n_land)
    model, optimizer, loss, hyperparams = get_model('nn', **hyperparams)
    train_loader = DataLoader(HyperX(train_px, train_gt, [0]), batch_size=hyperparams['batch_size'], shuffle=True)
    val_loader = DataLoader(HyperX(val_px, val_gt, [0]), batch_size=hyperparams['batch_size'])

    train(model, optimizer, loss, train_loader, hyperparams['epoch'], scheduler=hyperparams['scheduler'],
          val_loader=val_loader)
    probs = test(model, val_px, hyperparams)
    prediction = np.argmax(probs, axis=1)
    print("accuracy of test() on the validation pixels: {:.4f}".format((prediction == val_gt).mean()))


if __name__ == "__main__":
    main()
