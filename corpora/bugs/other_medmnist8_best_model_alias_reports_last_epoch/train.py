# Source: MedMNIST/experiments, MedMNIST3D/train_and_eval_pytorch.py (main, train, test), commit 12e9f40ad214f6f076b1672cf29fab9d2e7216cc
# Report: https://github.com/MedMNIST/experiments/issues/8
# MedMNIST3D baseline: a 3D ResNet trained with Adam (lr 1e-3) and MultiStepLR at 50% / 75% of
# the epochs; after every epoch train / val / test AUC and ACC are computed, the model with the
# best validation AUC is kept as best_model, and after training best_model is evaluated on the
# three splits and the result is written to the log. The medmnist datasets and Evaluator are
# replaced by synthetic 1x14x14x14 volumes of 4 "organ" classes (noisy training labels) and a
# numpy re-implementation of the Evaluator's AUC (mean one-vs-rest) and ACC; ACSConv conversion,
# tensorboard and file output are removed.
import time
from collections import OrderedDict

import numpy as np
import torch
import torch.nn as nn
import torch.utils.data as data

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride=1):
        super().__init__()
        self.conv1 = nn.Conv3d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm3d(cout)
        self.conv2 = nn.Conv3d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm3d(cout)
        self.shortcut = nn.Sequential()
        if stride != 1 or cin != cout:
            self.shortcut = nn.Sequential(nn.Conv3d(cin, cout, 1, stride, bias=False), nn.BatchNorm3d(cout))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + self.shortcut(x))


class ResNet18(nn.Module):
    """A narrow 3D ResNet (one BasicBlock per stage) standing in for ResNet18 + Conv3dConverter."""

    def __init__(self, in_channels, num_classes, width=8):
        super().__init__()
        self.conv1 = nn.Conv3d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm3d(width)
        self.layer1 = BasicBlock(width, width)
        self.layer2 = BasicBlock(width, 2 * width, 2)
        self.layer3 = BasicBlock(2 * width, 4 * width, 2)
        self.linear = nn.Linear(4 * width, num_classes)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.layer3(self.layer2(self.layer1(out)))
        out = out.mean(dim=(2, 3, 4))
        return self.linear(out)


def make_split(protos, n, gen, label_noise):
    labels = torch.randint(0, protos.size(0), (n,), generator=gen)
    vols = protos[labels] + 1.0 * torch.randn(n, 1, 14, 14, 14, generator=gen)
    if label_noise > 0:
        flip = torch.rand(n, generator=gen) < label_noise
        labels = torch.where(flip, torch.randint(0, protos.size(0), (n,), generator=gen), labels)
    return data.TensorDataset(vols, labels.unsqueeze(1))


class Evaluator:
    """medmnist.Evaluator for a multi-class task: AUC = mean one-vs-rest ROC AUC, ACC = top-1."""

    def __init__(self, dataset):
        self.labels = dataset.tensors[1].squeeze(1).numpy()

    @staticmethod
    def _auc(y_true, score):
        order = np.argsort(score)
        ranks = np.empty(len(score))
        ranks[order] = np.arange(1, len(score) + 1)
        n_pos = y_true.sum()
        n_neg = len(y_true) - n_pos
        return (ranks[y_true == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg)

    def evaluate(self, y_score, save_folder=None, run=None):
        auc = np.mean([self._auc((self.labels == i).astype(int), y_score[:, i]) for i in range(y_score.shape[1])])
        acc = np.mean(np.argmax(y_score, axis=1) == self.labels)
        return auc, acc


def main(num_epochs=16, batch_size=32, run="model1"):
    lr = 0.001
    gamma = 0.1
    milestones = [0.5 * num_epochs, 0.75 * num_epochs]
    n_channels = 1
    n_classes = 4
    device = torch.device('cpu')

    gen = torch.Generator().manual_seed(0)
    protos = 0.35 * torch.randn(n_classes, 1, 14, 14, 14, generator=gen)
    train_dataset = make_split(protos, 240, gen, label_noise=0.4)
    val_dataset = make_split(protos, 400, gen, label_noise=0.0)
    test_dataset = make_split(protos, 400, gen, label_noise=0.0)

    train_loader = data.DataLoader(dataset=train_dataset, batch_size=batch_size, shuffle=True)
    train_loader_at_eval = data.DataLoader(dataset=train_dataset, batch_size=batch_size, shuffle=False)
    val_loader = data.DataLoader(dataset=val_dataset, batch_size=batch_size, shuffle=False)
    test_loader = data.DataLoader(dataset=test_dataset, batch_size=batch_size, shuffle=False)

    print('==> Building and training model...')
    model = ResNet18(in_channels=n_channels, num_classes=n_classes)
    model = model.to(device)

    train_evaluator = Evaluator(train_dataset)
    val_evaluator = Evaluator(val_dataset)
    test_evaluator = Evaluator(test_dataset)

    criterion = nn.CrossEntropyLoss()

    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.MultiStepLR(optimizer, milestones=milestones, gamma=gamma)

    logs = ['loss', 'auc', 'acc']
    train_logs = ['train_' + log for log in logs]
    val_logs = ['val_' + log for log in logs]
    test_logs = ['test_' + log for log in logs]
    log_dict = OrderedDict.fromkeys(train_logs + val_logs + test_logs, 0)

    best_auc = 0
    best_epoch = 0
    best_model = model

    for epoch in range(num_epochs):
        train_loss = train(model, train_loader, criterion, optimizer, device)

        train_metrics = test(model, train_evaluator, train_loader_at_eval, criterion, device, run)
        val_metrics = test(model, val_evaluator, val_loader, criterion, device, run)
        test_metrics = test(model, test_evaluator, test_loader, criterion, device, run)

        scheduler.step()

        for i, key in enumerate(train_logs):
            log_dict[key] = train_metrics[i]
        for i, key in enumerate(val_logs):
            log_dict[key] = val_metrics[i]
        for i, key in enumerate(test_logs):
            log_dict[key] = test_metrics[i]
        print('epoch %2d  train loss %.4f  train auc %.4f  val auc %.4f  test auc %.4f' % (
            epoch, train_loss, log_dict['train_auc'], log_dict['val_auc'], log_dict['test_auc']))

        cur_auc = val_metrics[1]
        if cur_auc > best_auc:
            best_epoch = epoch
            best_auc = cur_auc
            best_model = model

            print('cur_best_auc:', best_auc)
            print('cur_best_epoch', best_epoch)

    state = {
        'net': model.state_dict(),
    }

    train_metrics = test(best_model, train_evaluator, train_loader_at_eval, criterion, device, run)
    val_metrics = test(best_model, val_evaluator, val_loader, criterion, device, run)
    test_metrics = test(best_model, test_evaluator, test_loader, criterion, device, run)

    train_log = 'train  auc: %.5f  acc: %.5f\n' % (train_metrics[1], train_metrics[2])
    val_log = 'val  auc: %.5f  acc: %.5f\n' % (val_metrics[1], val_metrics[2])
    test_log = 'test  auc: %.5f  acc: %.5f\n' % (test_metrics[1], test_metrics[2])

    log = '%s\n' % ('organmnist3d (synthetic), best epoch %d' % best_epoch) + train_log + val_log + test_log + '\n'
    print(log)


def train(model, train_loader, criterion, optimizer, device):
    total_loss = []

    model.train()
    for batch_idx, (inputs, targets) in enumerate(train_loader):
        optimizer.zero_grad()
        outputs = model(inputs.to(device))

        targets = torch.squeeze(targets, 1).long().to(device)
        loss = criterion(outputs, targets)

        total_loss.append(loss.item())

        loss.backward()
        optimizer.step()

    epoch_loss = sum(total_loss) / len(total_loss)
    return epoch_loss


def test(model, evaluator, data_loader, criterion, device, run, save_folder=None):
    model.eval()

    total_loss = []
    y_score = torch.tensor([]).to(device)

    with torch.no_grad():
        for batch_idx, (inputs, targets) in enumerate(data_loader):
            outputs = model(inputs.to(device))

            targets = torch.squeeze(targets, 1).long().to(device)
            loss = criterion(outputs, targets)
            m = nn.Softmax(dim=1)
            outputs = m(outputs).to(device)

            total_loss.append(loss.item())

            y_score = torch.cat((y_score, outputs), 0)

        y_score = y_score.detach().cpu().numpy()
        auc, acc = evaluator.evaluate(y_score, save_folder, run)

        test_loss = sum(total_loss) / len(total_loss)

        return [test_loss, auc, acc]


if __name__ == '__main__':
    start = time.time()
    main()
