# Source: zhangj111/astnn, train.py, commit 819bc01801cbe0a9aae8c465f16071777861db1c
# Report: https://github.com/zhangj111/astnn/issues/8
# ASTNN program classification training loop (Adamax, CrossEntropyLoss, batches cut from a
# DataFrame, model selection on the validation accuracy, test on best_model). The tree-based
# BatchProgramClassifier is reduced to an embedding + bidirectional GRU + max-pool classifier
# over statement-token sequences; the OJ dataset to synthetic programs with noisy labels.
import pandas as pd
import random
import torch
import time
import numpy as np
import torch.nn as nn
from torch.autograd import Variable
import os
import sys


class BatchProgramClassifier(nn.Module):
    def __init__(self, embedding_dim, hidden_dim, vocab_size, encode_dim, label_size, batch_size, use_gpu=False,
                 pretrained_weight=None):
        super(BatchProgramClassifier, self).__init__()
        self.hidden_dim = hidden_dim
        self.batch_size = batch_size
        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        self.embedding.weight.data.copy_(torch.from_numpy(pretrained_weight))
        self.encoder = nn.Linear(embedding_dim, encode_dim)
        self.bigru = nn.GRU(encode_dim, hidden_dim, num_layers=1, bidirectional=True, batch_first=True)
        self.hidden2label = nn.Linear(hidden_dim * 2, label_size)
        self.hidden = self.init_hidden()

    def init_hidden(self):
        return torch.zeros(2, self.batch_size, self.hidden_dim)

    def forward(self, x):
        x = torch.LongTensor(np.array(x))
        encodes = torch.relu(self.encoder(self.embedding(x)))
        gru_out, hidden = self.bigru(encodes, self.hidden)
        gru_out = torch.transpose(gru_out, 1, 2)
        gru_out = nn.functional.max_pool1d(gru_out, gru_out.size(2)).squeeze(2)
        return self.hidden2label(gru_out)


def make_split(n, seed, noise):
    rng = np.random.RandomState(seed)
    rows = []
    for i in range(n):
        label = rng.randint(1, 11)
        code = rng.randint(0, 300, size=12)
        code[rng.choice(12, 2, replace=False)] = label * 7
        if rng.rand() < noise:
            label = rng.randint(1, 11)
        rows.append((i, code, label))
    return pd.DataFrame(rows, columns=["id", "code", "label"])


def get_batch(dataset, idx, bs):
    tmp = dataset.iloc[idx: idx+bs]
    data, labels = [], []
    for _, item in tmp.iterrows():
        data.append(item.iloc[1])
        labels.append(item.iloc[2]-1)
    return data, torch.LongTensor(labels)


if __name__ == '__main__':
    torch.manual_seed(0)
    train_data = make_split(400, 1, noise=0.5)
    val_data = make_split(200, 2, noise=0.0)
    test_data = make_split(200, 3, noise=0.0)
    embeddings = np.random.RandomState(0).randn(301, 32).astype("float32") * 0.1

    HIDDEN_DIM = 32
    ENCODE_DIM = 32
    LABELS = 10
    EPOCHS = 15
    BATCH_SIZE = 64
    USE_GPU = False
    MAX_TOKENS = 300
    EMBEDDING_DIM = 32

    model = BatchProgramClassifier(EMBEDDING_DIM,HIDDEN_DIM,MAX_TOKENS+1,ENCODE_DIM,LABELS,BATCH_SIZE,
                                   USE_GPU, embeddings)

    parameters = model.parameters()
    optimizer = torch.optim.Adamax(parameters, lr=0.01)
    loss_function = torch.nn.CrossEntropyLoss()

    train_loss_ = []
    val_loss_ = []
    train_acc_ = []
    val_acc_ = []
    best_acc = 0.0
    print('Start training...')
    # training procedure
    best_model = model
    for epoch in range(EPOCHS):
        start_time = time.time()

        total_acc = 0.0
        total_loss = 0.0
        total = 0.0
        i = 0
        while i < len(train_data):
            batch = get_batch(train_data, i, BATCH_SIZE)
            i += BATCH_SIZE
            train_inputs, train_labels = batch

            model.zero_grad()
            model.batch_size = len(train_labels)
            model.hidden = model.init_hidden()
            output = model(train_inputs)

            loss = loss_function(output, Variable(train_labels))
            loss.backward()
            optimizer.step()

            # calc training acc
            _, predicted = torch.max(output.data, 1)
            total_acc += (predicted == train_labels).sum()
            total += len(train_labels)
            total_loss += loss.item()*len(train_inputs)

        train_loss_.append(total_loss / total)
        train_acc_.append(total_acc.item() / total)
        # validation epoch
        total_acc = 0.0
        total_loss = 0.0
        total = 0.0
        i = 0
        while i < len(val_data):
            batch = get_batch(val_data, i, BATCH_SIZE)
            i += BATCH_SIZE
            val_inputs, val_labels = batch

            model.batch_size = len(val_labels)
            model.hidden = model.init_hidden()
            output = model(val_inputs)

            loss = loss_function(output, Variable(val_labels))

            # calc valing acc
            _, predicted = torch.max(output.data, 1)
            total_acc += (predicted == val_labels).sum()
            total += len(val_labels)
            total_loss += loss.item()*len(val_inputs)
        val_loss_.append(total_loss / total)
        val_acc_.append(total_acc.item() / total)
        end_time = time.time()
        if total_acc/total > best_acc:
            best_model = model
        print('[Epoch: %3d/%3d] Training Loss: %.4f, Validation Loss: %.4f,'
              ' Training Acc: %.3f, Validation Acc: %.3f, Time Cost: %.3f s'
              % (epoch + 1, EPOCHS, train_loss_[epoch], val_loss_[epoch],
                 train_acc_[epoch], val_acc_[epoch], end_time - start_time))

    total_acc = 0.0
    total_loss = 0.0
    total = 0.0
    i = 0
    model = best_model
    while i < len(test_data):
        batch = get_batch(test_data, i, BATCH_SIZE)
        i += BATCH_SIZE
        test_inputs, test_labels = batch

        model.batch_size = len(test_labels)
        model.hidden = model.init_hidden()
        output = model(test_inputs)

        loss = loss_function(output, Variable(test_labels))

        _, predicted = torch.max(output.data, 1)
        total_acc += (predicted == test_labels).sum()
        total += len(test_labels)
        total_loss += loss.item() * len(test_inputs)
    print("Best validation acc: %.3f (epoch %d)" % (max(val_acc_), int(np.argmax(val_acc_)) + 1))
    print("Testing results(Acc):", total_acc.item() / total)
