# Source: bentrevett/pytorch-image-classification, 4_vgg.ipynb, commit 33c9cfdb9097bc65b5800c1996f199f0ba520888
# https://github.com/bentrevett/pytorch-image-classification/blob/master/4_vgg.ipynb
#
# VGG fine-tuning with a learning-rate range test first: LRFinder saves the model's state_dict, trains 100 batches
# with Adam while an ExponentialLR scheduler (a custom _LRScheduler) raises the lr from 1e-7 to 10, stops when the
# smoothed loss exceeds 5x its best ("the loss has diverged"), and reloads the saved weights (parameters and
# BatchNorm buffers); the optimizer used for the sweep is then discarded and a new Adam is built with discriminative
# learning rates (features at FOUND_LR / 10, classifier at FOUND_LR); the model returns (logits, flattened features);
# AdaptiveAvgPool2d(7) is applied to a feature map smaller than 7x7, so it replicates values; the best-validation
# checkpoint is written each epoch and reloaded before the test; the validation split is a deep copy of a
# random_split of the training set; IteratorWrapper restarts the loader when it runs out during the sweep.
# Adaptation: CIFAR-10 with the ImageNet-pretrained vgg11_bn replaced by 2000 + 500 synthetic 3x16x16 images of 10
# classes (class colour-texture pattern + noise) and a randomly initialised VGG with config [16, 'M', 32, 'M', 64,
# 64, 'M'] (no weights can be downloaded) and a 256-unit classifier; torchvision transforms left out (the data are
# already normalised tensors); checkpoints go to a temporary folder; BATCH_SIZE 128 kept, EPOCHS 5 kept; plots,
# tqdm and the analysis cells left out; FOUND_LR 5e-4 kept (the notebook reads it off the plot); cpu; seeds fixed.
import copy
import os
import random
import tempfile
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as data
from torch.optim.lr_scheduler import _LRScheduler

SEED = 1234

random.seed(SEED)
np.random.seed(SEED)
torch.manual_seed(SEED)
torch.backends.cudnn.deterministic = True


class VGG(nn.Module):
    def __init__(self, features, output_dim):
        super().__init__()

        self.features = features

        self.avgpool = nn.AdaptiveAvgPool2d(7)

        self.classifier = nn.Sequential(
            nn.Linear(64 * 7 * 7, 256),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(256, 256),
            nn.ReLU(inplace=True),
            nn.Dropout(0.5),
            nn.Linear(256, output_dim),
        )

    def forward(self, x):
        x = self.features(x)
        x = self.avgpool(x)
        h = x.view(x.shape[0], -1)
        x = self.classifier(h)
        return x, h


small_config = [16, 'M', 32, 'M', 64, 64, 'M']


def get_vgg_layers(config, batch_norm):

    layers = []
    in_channels = 3

    for c in config:
        assert c == 'M' or isinstance(c, int)
        if c == 'M':
            layers += [nn.MaxPool2d(kernel_size=2)]
        else:
            conv2d = nn.Conv2d(in_channels, c, kernel_size=3, padding=1)
            if batch_norm:
                layers += [conv2d, nn.BatchNorm2d(c), nn.ReLU(inplace=True)]
            else:
                layers += [conv2d, nn.ReLU(inplace=True)]
            in_channels = c

    return nn.Sequential(*layers)


class LRFinder:
    def __init__(self, model, optimizer, criterion, device):

        self.optimizer = optimizer
        self.model = model
        self.criterion = criterion
        self.device = device

        torch.save(model.state_dict(), os.path.join(WORKDIR, 'init_params.pt'))

    def range_test(self, iterator, end_lr=10, num_iter=100,
                   smooth_f=0.05, diverge_th=5):

        lrs = []
        losses = []
        best_loss = float('inf')

        lr_scheduler = ExponentialLR(self.optimizer, end_lr, num_iter)

        iterator = IteratorWrapper(iterator)

        for iteration in range(num_iter):

            loss = self._train_batch(iterator)

            lrs.append(lr_scheduler.get_last_lr()[0])

            # update lr
            lr_scheduler.step()

            if iteration > 0:
                loss = smooth_f * loss + (1 - smooth_f) * losses[-1]

            if loss < best_loss:
                best_loss = loss

            losses.append(loss)

            if loss > diverge_th * best_loss:
                print("Stopping early, the loss has diverged")
                break

        # reset model to initial parameters
        model.load_state_dict(torch.load(os.path.join(WORKDIR, 'init_params.pt')))

        return lrs, losses

    def _train_batch(self, iterator):

        self.model.train()

        self.optimizer.zero_grad()

        x, y = iterator.get_batch()

        x = x.to(self.device)
        y = y.to(self.device)

        y_pred, _ = self.model(x)

        loss = self.criterion(y_pred, y)

        loss.backward()

        self.optimizer.step()

        return loss.item()


class ExponentialLR(_LRScheduler):
    def __init__(self, optimizer, end_lr, num_iter, last_epoch=-1):
        self.end_lr = end_lr
        self.num_iter = num_iter
        super(ExponentialLR, self).__init__(optimizer, last_epoch)

    def get_lr(self):
        curr_iter = self.last_epoch
        r = curr_iter / self.num_iter
        return [base_lr * (self.end_lr / base_lr) ** r for base_lr in
                self.base_lrs]


class IteratorWrapper:
    def __init__(self, iterator):
        self.iterator = iterator
        self._iterator = iter(iterator)

    def __next__(self):
        try:
            inputs, labels = next(self._iterator)
        except StopIteration:
            self._iterator = iter(self.iterator)
            inputs, labels, *_ = next(self._iterator)

        return inputs, labels

    def get_batch(self):
        return next(self)


def calculate_accuracy(y_pred, y):
    top_pred = y_pred.argmax(1, keepdim=True)
    correct = top_pred.eq(y.view_as(top_pred)).sum()
    acc = correct.float() / y.shape[0]
    return acc


def train(model, iterator, optimizer, criterion, device):

    epoch_loss = 0
    epoch_acc = 0

    model.train()

    for (x, y) in iterator:

        x = x.to(device)
        y = y.to(device)

        optimizer.zero_grad()

        y_pred, _ = model(x)

        loss = criterion(y_pred, y)

        acc = calculate_accuracy(y_pred, y)

        loss.backward()

        optimizer.step()

        epoch_loss += loss.item()
        epoch_acc += acc.item()

    return epoch_loss / len(iterator), epoch_acc / len(iterator)


def evaluate(model, iterator, criterion, device):

    epoch_loss = 0
    epoch_acc = 0

    model.eval()

    with torch.no_grad():

        for (x, y) in iterator:

            x = x.to(device)
            y = y.to(device)

            y_pred, _ = model(x)

            loss = criterion(y_pred, y)

            acc = calculate_accuracy(y_pred, y)

            epoch_loss += loss.item()
            epoch_acc += acc.item()

    return epoch_loss / len(iterator), epoch_acc / len(iterator)


def synthetic_cifar(n, seed):
    """stand-in for datasets.CIFAR10 + ToTensor + Normalize: 10 classes of colour-texture patterns"""
    protos = np.random.RandomState(99).randn(10, 3, 4, 4).astype(np.float32)
    rng = np.random.RandomState(seed)
    labels = rng.randint(0, 10, n)
    images = np.repeat(np.repeat(protos[labels], 4, axis=2), 4, axis=3) + 1.0 * rng.randn(n, 3, 16, 16).astype(np.float32)
    return data.TensorDataset(torch.from_numpy(images), torch.from_numpy(labels).long())


if __name__ == '__main__':
    torch.set_num_threads(1)
    WORKDIR = tempfile.mkdtemp()

    OUTPUT_DIM = 10
    model = VGG(get_vgg_layers(small_config, batch_norm=True), OUTPUT_DIM)

    train_data = synthetic_cifar(2000, seed=1)
    test_data = synthetic_cifar(500, seed=2)

    VALID_RATIO = 0.9

    n_train_examples = int(len(train_data) * VALID_RATIO)
    n_valid_examples = len(train_data) - n_train_examples

    train_data, valid_data = data.random_split(train_data,
                                               [n_train_examples, n_valid_examples])
    valid_data = copy.deepcopy(valid_data)

    BATCH_SIZE = 128

    train_iterator = data.DataLoader(train_data,
                                     shuffle=True,
                                     batch_size=BATCH_SIZE)

    valid_iterator = data.DataLoader(valid_data,
                                     batch_size=BATCH_SIZE)

    test_iterator = data.DataLoader(test_data,
                                    batch_size=BATCH_SIZE)

    START_LR = 1e-7

    optimizer = optim.Adam(model.parameters(), lr=START_LR)

    device = torch.device('cpu')

    criterion = nn.CrossEntropyLoss()

    model = model.to(device)
    criterion = criterion.to(device)

    first_test_loss, first_test_acc = evaluate(model, test_iterator, criterion, device)
    print(f'Before training: Test Loss: {first_test_loss:.3f} | Test Acc: {first_test_acc*100:.2f}%')

    END_LR = 10
    NUM_ITER = 100

    lr_finder = LRFinder(model, optimizer, criterion, device)
    lrs, losses = lr_finder.range_test(train_iterator, END_LR, NUM_ITER)
    print(f'range test: {len(lrs)} batches, lr {lrs[0]:.1e} -> {lrs[-1]:.1e}, smoothed loss {losses[0]:.3f} -> '
          f'min {min(losses):.3f} at lr {lrs[int(np.argmin(losses))]:.1e} -> {losses[-1]:.3f}')

    FOUND_LR = 5e-4

    params = [
              {'params': model.features.parameters(), 'lr': FOUND_LR / 10},
              {'params': model.classifier.parameters()}
             ]

    optimizer = optim.Adam(params, lr=FOUND_LR)

    EPOCHS = 5

    best_valid_loss = float('inf')

    for epoch in range(EPOCHS):

        start_time = time.monotonic()

        train_loss, train_acc = train(model, train_iterator, optimizer, criterion, device)
        valid_loss, valid_acc = evaluate(model, valid_iterator, criterion, device)

        if valid_loss < best_valid_loss:
            best_valid_loss = valid_loss
            torch.save(model.state_dict(), os.path.join(WORKDIR, 'tut4-model.pt'))

        print(f'Epoch: {epoch+1:02}')
        print(f'\tTrain Loss: {train_loss:.3f} | Train Acc: {train_acc*100:.2f}%')
        print(f'\t Val. Loss: {valid_loss:.3f} |  Val. Acc: {valid_acc*100:.2f}%')

    model.load_state_dict(torch.load(os.path.join(WORKDIR, 'tut4-model.pt')))

    test_loss, test_acc = evaluate(model, test_iterator, criterion, device)

    print(f'Test Loss: {test_loss:.3f} | Test Acc: {test_acc*100:.2f}%')
    print(f'[summary] test accuracy first={first_test_acc:.3f} last={test_acc:.3f} increased={test_acc > first_test_acc}')
