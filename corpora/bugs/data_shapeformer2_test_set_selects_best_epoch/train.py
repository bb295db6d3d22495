# Source: xuanmay2701/shapeformer, main.py, Training.py (SupervisedTrainer, train_runner), Models/utils.py (SaveBestACCModel, load_model), Dataset/load_UEA_data.py (split_dataset), commit 9608822f42f55ed496000bb95e83981b6d0aabaf
# Report: https://github.com/xuanmay2701/shapeformer/issues/2
import os
import tempfile

import numpy as np
import torch
import torch.nn as nn
from sklearn import model_selection
from torch.utils.data import DataLoader, Dataset


def split_dataset(data, label, validation_ratio):
    splitter = model_selection.StratifiedShuffleSplit(n_splits=1, test_size=validation_ratio, random_state=1234)
    train_indices, val_indices = zip(*splitter.split(X=np.zeros(len(label)), y=label))
    train_data = data[train_indices]
    train_label = label[train_indices]
    val_data = data[val_indices]
    val_label = label[val_indices]
    return train_data, train_label, val_data, val_label


def Data_Loader(config):
    # synthetic multivariate series: 4 classes, each a noisy bump at a class-specific position and channel
    rng = np.random.RandomState(0)

    def make(n):
        y = rng.randint(0, 4, size=n)
        t = np.arange(32)
        x = rng.normal(0, 1.0, size=(n, 3, 32))
        for i, c in enumerate(y):
            centre = 6 + 6 * c + rng.randint(-2, 3)
            x[i, c % 3] += 1.6 * np.exp(-0.5 * ((t - centre) / 2.5) ** 2)
        return x.astype(np.float32), y
    X_train, y_train = make(120)
    X_test, y_test = make(60)
    Data = {'max_len': 32, 'All_train_data': X_train, 'All_train_label': y_train,
            'test_data': X_test, 'test_label': y_test}
    train_data, train_label, val_data, val_label = split_dataset(X_train, y_train, config['val_ratio'])
    Data['train_data'], Data['train_label'] = train_data, train_label
    Data['val_data'], Data['val_label'] = val_data, val_label
    return Data


class dataset_class(Dataset):
    def __init__(self, data, label):
        super(dataset_class, self).__init__()
        self.feature = data
        self.labels = label.astype(np.int64)

    def __getitem__(self, ind):
        return torch.tensor(self.feature[ind]), torch.tensor(self.labels[ind]), ind

    def __len__(self):
        return len(self.labels)


class ConvTran(nn.Module):
    def __init__(self, config):
        super().__init__()
        channel_size, seq_len = config['Data_shape'][1], config['Data_shape'][2]
        emb = config['emb_size']
        self.embed_layer = nn.Sequential(nn.Conv1d(channel_size, emb, kernel_size=5, padding=2),
                                         nn.BatchNorm1d(emb), nn.GELU())
        self.pos = nn.Parameter(torch.zeros(1, seq_len, emb))
        self.encoder = nn.TransformerEncoderLayer(emb, config['num_heads'], config['dim_ff'], config['dropout'],
                                                  batch_first=True)
        self.out = nn.Linear(emb, config['num_labels'])

    def forward(self, x):
        x = self.embed_layer(x).permute(0, 2, 1) + self.pos
        x = self.encoder(x)
        return self.out(x.mean(1))


class SupervisedTrainer:
    def __init__(self, model, dataloader, loss_module, optimizer=None):
        self.model = model
        self.dataloader = dataloader
        self.loss_module = loss_module
        self.optimizer = optimizer

    def train_epoch(self, epoch_num=None):
        self.model = self.model.train()
        epoch_loss, total_samples = 0, 0
        for X, targets, IDs in self.dataloader:
            predictions = self.model(X)
            loss = self.loss_module(predictions, targets)
            batch_loss = torch.sum(loss)
            mean_loss = batch_loss / len(loss)
            self.optimizer.zero_grad()
            mean_loss.backward()
            self.optimizer.step()
            with torch.no_grad():
                total_samples += len(loss)
                epoch_loss += batch_loss.item()
        return {'epoch': epoch_num, 'loss': epoch_loss / total_samples}

    def evaluate(self, epoch_num=None):
        self.model = self.model.eval()
        epoch_loss, total_samples, correct = 0, 0, 0
        with torch.no_grad():
            for X, targets, IDs in self.dataloader:
                predictions = self.model(X)
                loss = self.loss_module(predictions, targets)
                epoch_loss += torch.sum(loss).item()
                total_samples += len(loss)
                correct += (predictions.argmax(1) == targets).sum().item()
        return {'epoch': epoch_num, 'loss': epoch_loss / total_samples, 'accuracy': correct / total_samples}


def save_model(path, epoch, model, optimizer=None):
    torch.save({'epoch': epoch, 'state_dict': model.state_dict()}, path)


def load_model(model, model_path, optimizer=None):
    checkpoint = torch.load(model_path, map_location=lambda storage, loc: storage)
    model.load_state_dict(checkpoint['state_dict'])
    return model, optimizer, checkpoint['epoch']


class SaveBestACCModel:
    def __init__(self, best_valid_acc=float('0')):
        self.best_valid_acc = best_valid_acc

    def __call__(self, current_valid_acc, epoch, model, optimizer, criterion, path):
        if current_valid_acc > self.best_valid_acc:
            self.best_valid_acc = current_valid_acc
            save_model(path, epoch, model, optimizer)


def train_runner(config, model, trainer, val_evaluator, path):
    epochs = config['epochs']
    optimizer = config['optimizer']
    loss_module = config['loss_module']
    save_best_acc_model = SaveBestACCModel()
    for epoch in range(0, epochs):
        aggr_metrics_train = trainer.train_epoch(epoch)
        aggr_metrics_val = val_evaluator.evaluate(epoch)
        save_best_acc_model(aggr_metrics_val['accuracy'], epoch, model, optimizer, loss_module, path)
        print('Ep{}: train loss {:.4f} | val loss {:.4f} | val accuracy {:.4f}'.format(
            epoch, aggr_metrics_train['loss'], aggr_metrics_val['loss'], aggr_metrics_val['accuracy']))
    return save_best_acc_model.best_valid_acc


def main():
    config = {'val_ratio': 0.2, 'batch_size': 8, 'epochs': 15, 'lr': 5e-3, 'weight_decay': 5e-4, 'emb_size': 16,
              'dim_ff': 32, 'num_heads': 4, 'dropout': 0.1}
    torch.manual_seed(1)
    Data = Data_Loader(config)
    train_dataset = dataset_class(Data['All_train_data'], Data['All_train_label'])
    val_dataset = dataset_class(Data['val_data'], Data['val_label'])
    test_dataset = dataset_class(Data['test_data'], Data['test_label'])

    train_loader = DataLoader(dataset=train_dataset, batch_size=config['batch_size'], shuffle=True)
    val_loader = DataLoader(dataset=test_dataset, batch_size=config['batch_size'], shuffle=True)
    test_loader = DataLoader(dataset=test_dataset, batch_size=config['batch_size'], shuffle=True)
    print(f'{len(train_dataset)} training, {len(val_loader.dataset)} validation, {len(test_dataset)} test samples')

    config['Data_shape'] = Data['train_data'].shape
    config['num_labels'] = int(max(Data['train_label'])) + 1
    model = ConvTran(config)
    config['optimizer'] = torch.optim.RAdam(model.parameters(), lr=config['lr'], weight_decay=config['weight_decay'])
    config['loss_module'] = nn.CrossEntropyLoss(reduction='none')
    save_path = os.path.join(tempfile.mkdtemp(), 'model_last.pth')
    trainer = SupervisedTrainer(model, train_loader, config['loss_module'], config['optimizer'])
    val_evaluator = SupervisedTrainer(model, val_loader, config['loss_module'])
    best_val = train_runner(config, model, trainer, val_evaluator, save_path)

    best_model, optimizer, best_epoch = load_model(model, save_path, config['optimizer'])
    best_test_evaluator = SupervisedTrainer(best_model, test_loader, config['loss_module'])
    best_aggr_metrics_test = best_test_evaluator.evaluate()
    print('best epoch {} (val accuracy {:.4f}); Best Model Test Summary: loss {:.4f} | accuracy {:.4f}'.format(
        best_epoch, best_val, best_aggr_metrics_test['loss'], best_aggr_metrics_test['accuracy']))


if __name__ == '__main__':
    main()
