# Source: bkong999/COVNet, main.py (train_model, evaluate_model, main), model.py (COVNet), utils.py (calc_multi_cls_measures), commit 719d51681f439eb8ab2638c093ef8d40fa32e4c1
# Report: https://github.com/bkong999/COVNet/issues/12
# COVNet: every CT scan is a stack of slices that goes through a shared CNN backbone, the
# pooled slice features are max-pooled over slices and classified (NCP / CP / normal);
# batch size 1 (one scan), class-balanced WeightedRandomSampler, Adam, ReduceLROnPlateau,
# a checkpoint per epoch plus best.pth, early stopping on the validation loss.
# The ResNet50 backbone is reduced to a small conv net on 6 slices of 32x32; the scans are
# synthetic; tensorboard is dropped. After training, the per-epoch checkpoint files are
# ranked by the validation accuracy written in their names, as one picks a model from them.
import os
import re
import tempfile
import time

import numpy as np
import torch
import torch.optim as optim
import torch.nn as nn
import torch.nn.functional as F
from sklearn.metrics import accuracy_score, precision_score, recall_score


def calc_multi_cls_measures(probs, label):
    n_classes = probs.shape[1]
    preds = np.argmax(probs, axis=1)
    accuracy = accuracy_score(label, preds)
    precisions = precision_score(label, preds, average=None,
                                 labels=range(n_classes), zero_division=0.)
    recalls = recall_score(label, preds, average=None, labels=range(n_classes),
                           zero_division=0.)

    metric_collects = {'accuracy': accuracy, 'precisions': precisions,
                       'recalls': recalls}
    return metric_collects


class COVNet(nn.Module):
    def __init__(self, n_classes):
        super().__init__()
        layer_list = [nn.Conv2d(1, 16, 3, 1, 1), nn.BatchNorm2d(16), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(16, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
                      nn.Conv2d(32, 64, 3, 1, 1), nn.BatchNorm2d(64), nn.ReLU()]
        self.pretrained_model = nn.Sequential(*layer_list)

        self.pooling_layer = nn.AdaptiveAvgPool2d(1)
        self.classifer = nn.Linear(64, n_classes)
        self.n_classes = n_classes

    def forward(self, x):
        x = torch.squeeze(x, dim=0)
        features = self.pretrained_model(x)
        pooled_features = self.pooling_layer(features)
        pooled_features = pooled_features.view(pooled_features.size(0), -1)
        flattened_features = torch.max(pooled_features, 0, keepdim=True)[0]
        output = self.classifer(flattened_features)
        return output


class NCovDataset(torch.utils.data.Dataset):
    """Synthetic CT scans: 6 slices of 32x32; class 1 (NCP) has peripheral bright
    patches, class 2 (CP) central ones, class 0 none; the training labels carry noise."""
    def __init__(self, n, seed, label_noise):
        rng = np.random.RandomState(seed)
        self.labels = rng.randint(0, 3, size=n)
        self.case_ids = list(range(n))
        yy, xx = np.mgrid[0:32, 0:32]
        self.images = np.zeros((n, 6, 1, 32, 32), np.float32)
        for k in range(n):
            img = rng.normal(0, 1.0, size=(6, 1, 32, 32))
            if self.labels[k] > 0:
                s = rng.randint(0, 6)
                if self.labels[k] == 1:
                    cy, cx = rng.choice([6, 26]), rng.choice([6, 26])
                else:
                    cy, cx = rng.uniform(13, 19, size=2)
                img[s, 0] += 2.0 * (((yy - cy) ** 2 + (xx - cx) ** 2) <= 16)
            self.images[k] = img
        flip = rng.rand(n) < label_noise
        self.labels[flip] = rng.randint(0, 3, size=flip.sum())

    def make_weights_for_balanced_classes(self):
        counts = np.bincount(self.labels, minlength=3)
        return [1.0 / counts[y] for y in self.labels]

    def __len__(self):
        return len(self.case_ids)

    def __getitem__(self, i):
        return torch.from_numpy(self.images[i]), int(self.labels[i]), self.case_ids[i]


def get_lr(optimizer):
    for param_group in optimizer.param_groups:
        return param_group['lr']


def train_model(model, train_loader, epoch, num_epochs, optimizer, current_lr):
    n_classes = model.n_classes
    metric = torch.nn.CrossEntropyLoss()

    y_probs = np.zeros((0, n_classes), np.float64)
    losses, y_trues = [], []
    model.train()

    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.train()
            m.weight.requires_grad = False
            m.bias.requires_grad = False

    for i, (image, label, case_id) in enumerate(train_loader):
        optimizer.zero_grad()

        prediction = model.forward(image.float())
        loss = metric(prediction, label.long())
        loss.backward()
        optimizer.step()

        loss_value = loss.item()
        losses.append(loss_value)
        y_prob = F.softmax(prediction, dim=1)
        y_probs = np.concatenate([y_probs, y_prob.detach().cpu().numpy()])
        y_trues.append(label.item())

    metric_collects = calc_multi_cls_measures(y_probs, y_trues)
    train_loss_epoch = np.round(np.mean(losses), 4)
    return train_loss_epoch, metric_collects


def evaluate_model(model, val_loader, epoch, num_epochs, current_lr):
    n_classes = model.n_classes
    metric = torch.nn.CrossEntropyLoss()

    model.eval()

    y_probs = np.zeros((0, n_classes), np.float64)
    losses, y_trues = [], []

    for i, (image, label, case_id) in enumerate(val_loader):
        prediction = model.forward(image.float())
        loss = metric(prediction, label.long())

        loss_value = loss.item()
        losses.append(loss_value)
        y_prob = F.softmax(prediction, dim=1)
        y_probs = np.concatenate([y_probs, y_prob.detach().cpu().numpy()])
        y_trues.append(label.item())

    metric_collects = calc_multi_cls_measures(y_probs, y_trues)
    val_loss_epoch = np.round(np.mean(losses), 4)
    return val_loss_epoch, metric_collects


def main(args):
    torch.manual_seed(0)
    exp_dir = tempfile.mkdtemp(prefix='covnet_')
    model_dir = os.path.join(exp_dir, 'models')
    os.makedirs(model_dir, exist_ok=True)

    train_dataset = NCovDataset(48, seed=1, label_noise=0.3)
    weights = train_dataset.make_weights_for_balanced_classes()
    weights = torch.DoubleTensor(weights)
    sampler = torch.utils.data.sampler.WeightedRandomSampler(
        weights, len(train_dataset.case_ids))

    train_loader = torch.utils.data.DataLoader(
        train_dataset, batch_size=1, num_workers=0,
        drop_last=False, sampler=sampler)

    val_dataset = NCovDataset(60, seed=2, label_noise=0.0)
    val_loader = torch.utils.data.DataLoader(
        val_dataset, batch_size=1, shuffle=False, num_workers=0,
        drop_last=False)

    cov_net = COVNet(n_classes=3)
    optimizer = optim.Adam(cov_net.parameters(), lr=args['lr'], weight_decay=args['weight_decay'])
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(
        optimizer, patience=3, factor=.3, threshold=1e-4)

    best_val_loss = float('inf')
    best_val_accu = float(0)

    iteration_change_loss = 0
    for epoch in range(args['epochs']):
        current_lr = get_lr(optimizer)
        t_start = time.time()

        train_loss, train_metric = train_model(
            cov_net, train_loader, epoch, args['epochs'], optimizer, current_lr)

        with torch.no_grad():
            val_loss, val_metric = evaluate_model(
                cov_net, val_loader, epoch, args['epochs'], current_lr)

        scheduler.step(val_loss)

        print('Ep {}| Train/Val| Loss: {:.4f}/{:.4f}| Acc: {:.4f}/{:.4f}| lr {:.1e} T(s) {:.2f}'.format(
            epoch, train_loss, val_loss, train_metric['accuracy'], val_metric['accuracy'],
            current_lr, time.time() - t_start))
        iteration_change_loss += 1

        train_acc, val_acc = train_metric['accuracy'], val_metric['accuracy']
        file_name = ('val_acc_{}_train_acc_{}_epoch_{}.pth'.
                     format(train_acc, val_acc, epoch))
        torch.save(cov_net, os.path.join(model_dir, file_name))

        if val_acc > best_val_accu:
            best_val_accu = val_acc
            if bool(args['save_model']):
                torch.save(cov_net, os.path.join(model_dir, 'best.pth'))

        if val_loss < best_val_loss:
            best_val_loss = val_loss
            iteration_change_loss = 0

        if iteration_change_loss == args['patience']:
            print(('Early stopping after {0} iterations without the decrease ' +
                  'of the val loss').format(iteration_change_loss))
            break

    # pick the per-epoch checkpoint with the highest validation accuracy in its name
    named = []
    for f in sorted(os.listdir(model_dir)):
        m = re.search(r'val_acc_([0-9.]+)_', f)
        if m:
            named.append((float(m.group(1)), -int(re.search(r'epoch_(\d+)', f).group(1)), f))
    named.sort(reverse=True)
    chosen_acc, _, chosen = named[0]
    picked = torch.load(os.path.join(model_dir, chosen), weights_only=False)
    with torch.no_grad():
        _, picked_metric = evaluate_model(picked, val_loader, 0, 0, 0)
    print('checkpoint picked by name: {} (val_acc in name {:.4f}) -> measured val acc {:.4f}; '
          'best val acc of the run {:.4f}'.format(chosen, chosen_acc, picked_metric['accuracy'],
                                                   best_val_accu))


if __name__ == '__main__':
    main({'lr': 1e-3, 'weight_decay': 1e-4, 'epochs': 12, 'patience': 9, 'save_model': True})
