# Source: JackieHanLab/TOSICA, TOSICA/train.py (splitDataSet, train_one_epoch, evaluate, fit_model), before PR #11
# Report: https://github.com/JackieHanLab/TOSICA/pull/11
import random

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.optim as optim
from sklearn.preprocessing import LabelEncoder
from torch.utils.data import Dataset


def set_seed(seed):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class MyDataSet(Dataset):
    def __init__(self, exp, label):
        self.exp = exp
        self.label = label
        self.len = len(label)

    def __getitem__(self, index):
        return self.exp[index], self.label[index]

    def __len__(self):
        return self.len


def make_adata(n_cells=800, n_genes=60, seed=0):
    rng = np.random.default_rng(seed)
    types = np.array(['B', 'T', 'NK', 'Mono'])
    ct = rng.integers(0, 4, n_cells)
    markers = rng.normal(0, 1, (4, n_genes))
    X = rng.poisson(np.exp(0.4 * markers[ct])).astype(np.float32)
    noisy = rng.random(n_cells) < 0.35
    ct[noisy] = rng.integers(0, 4, noisy.sum())
    return pd.DataFrame(np.log1p(X), index=[f'cell{i}' for i in range(n_cells)],
                        columns=[f'g{j}' for j in range(n_genes)]), types[ct]


def splitDataSet(adata, celltype, label_name='Celltype', tr_ratio=0.7):
    label_encoder = LabelEncoder()
    el_data = adata.copy()
    el_data[label_name] = celltype
    genes = el_data.columns.values[:-1]
    el_data = np.array(el_data)
    el_data[:, -1] = label_encoder.fit_transform(el_data[:, -1])
    inverse = label_encoder.inverse_transform(range(0, np.max(el_data[:, -1]) + 1))
    el_data = el_data.astype(np.float32)
    n_genes = len(el_data[1]) - 1
    train_size = int(len(el_data) * tr_ratio)
    train_dataset, valid_dataset = torch.utils.data.random_split(el_data, [train_size, len(el_data) - train_size])
    exp_train = torch.from_numpy(train_dataset.dataset[:, :n_genes].astype(np.float32))
    label_train = torch.from_numpy(train_dataset.dataset[:, -1].astype(np.int64))
    exp_valid = torch.from_numpy(valid_dataset.dataset[:, :n_genes].astype(np.float32))
    label_valid = torch.from_numpy(valid_dataset.dataset[:, -1].astype(np.int64))
    return exp_train, label_train, exp_valid, label_valid, inverse, genes


def train_one_epoch(model, optimizer, data_loader, epoch):
    model.train()
    loss_function = torch.nn.CrossEntropyLoss()
    accu_loss, accu_num, sample_num = 0.0, 0, 0
    optimizer.zero_grad()
    for step, data in enumerate(data_loader):
        exp, label = data
        sample_num += exp.shape[0]
        pred = model(exp)
        pred_classes = torch.max(pred, dim=1)[1]
        accu_num += torch.eq(pred_classes, label).sum().item()
        loss = loss_function(pred, label)
        loss.backward()
        accu_loss += loss.item()
        optimizer.step()
        optimizer.zero_grad()
    return accu_loss / (step + 1), accu_num / sample_num


@torch.no_grad()
def evaluate(model, data_loader, epoch):
    model.eval()
    loss_function = torch.nn.CrossEntropyLoss()
    accu_loss, accu_num, sample_num = 0.0, 0, 0
    for step, data in enumerate(data_loader):
        exp, labels = data
        sample_num += exp.shape[0]
        pred = model(exp)
        accu_num += torch.eq(torch.max(pred, dim=1)[1], labels).sum().item()
        accu_loss += loss_function(pred, labels).item()
    return accu_loss / (step + 1), accu_num / sample_num


def fit_model(adata, celltype, batch_size=8, lr=0.01, epochs=12):
    set_seed(1)
    exp_train, label_train, exp_valid, label_valid, inverse, genes = splitDataSet(adata, celltype)
    print(f'train cells {len(label_train)} valid cells {len(label_valid)}')
    num_classes = np.int64(torch.max(label_train) + 1)
    train_dataset = MyDataSet(exp_train, label_train)
    valid_dataset = MyDataSet(exp_valid, label_valid)
    train_loader = torch.utils.data.DataLoader(train_dataset, batch_size=batch_size, shuffle=True, drop_last=True)
    valid_loader = torch.utils.data.DataLoader(valid_dataset, batch_size=batch_size, shuffle=False, drop_last=True)
    model = nn.Sequential(nn.Linear(len(genes), 256), nn.ReLU(), nn.Linear(256, num_classes))
    optimizer = optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5E-5)
    for epoch in range(epochs):
        train_loss, train_acc = train_one_epoch(model, optimizer, train_loader, epoch)
        val_loss, val_acc = evaluate(model, valid_loader, epoch)
        if epoch % 3 == 2:
            print(f'[epoch {epoch}] train_loss {train_loss:.3f} train_acc {train_acc:.3f} val_loss {val_loss:.3f} val_acc {val_acc:.3f}')
    print('Training finished!')


def main():
    adata, celltype = make_adata()
    fit_model(adata, celltype)


if __name__ == "__main__":
    main()
