# Source: rixwew/pytorch-fm, examples/main.py + torchfm/model/dfm.py + torchfm/layer.py, commit f74ad19771eda104e99874d19dc892e988ec53fa
# https://github.com/rixwew/pytorch-fm
#
# DeepFM click-through-rate model: one FeaturesEmbedding table shared by the FM term and the deep MLP,
# a FeaturesLinear first-order term stored as an Embedding of width 1, per-field offsets added to the
# raw ids, sigmoid inside the model + BCELoss, model.zero_grad() instead of optimizer.zero_grad(),
# random_split into train/valid/test, early stopping on validation AUC that torch.save()s the model.
# Adaptation: the lmdb-cached Criteo dataset is replaced by a synthetic dataset of the same form
# (39 categorical fields, 13 of them log2-discretised integers; small vocabularies; label from a
# hidden logistic model with pairwise field interactions), 12000 rows; np.long -> np.int64
# (removed from numpy); epochs 100 -> 6; batch_size 2048 -> 256; num_workers 8 -> 0; device cpu;
# tqdm progress bars disabled; the checkpoint goes to a temporary directory.
import os
import tempfile

import numpy as np
import torch
import tqdm
from sklearn.metrics import roc_auc_score
from torch.utils.data import DataLoader


# ---------------- torchfm/layer.py ----------------
class FeaturesLinear(torch.nn.Module):

    def __init__(self, field_dims, output_dim=1):
        super().__init__()
        self.fc = torch.nn.Embedding(sum(field_dims), output_dim)
        self.bias = torch.nn.Parameter(torch.zeros((output_dim,)))
        self.offsets = np.array((0, *np.cumsum(field_dims)[:-1]), dtype=np.int64)

    def forward(self, x):
        """
        :param x: Long tensor of size ``(batch_size, num_fields)``
        """
        x = x + x.new_tensor(self.offsets).unsqueeze(0)
        return torch.sum(self.fc(x), dim=1) + self.bias


class FeaturesEmbedding(torch.nn.Module):

    def __init__(self, field_dims, embed_dim):
        super().__init__()
        self.embedding = torch.nn.Embedding(sum(field_dims), embed_dim)
        self.offsets = np.array((0, *np.cumsum(field_dims)[:-1]), dtype=np.int64)
        torch.nn.init.xavier_uniform_(self.embedding.weight.data)

    def forward(self, x):
        """
        :param x: Long tensor of size ``(batch_size, num_fields)``
        """
        x = x + x.new_tensor(self.offsets).unsqueeze(0)
        return self.embedding(x)


class FactorizationMachine(torch.nn.Module):

    def __init__(self, reduce_sum=True):
        super().__init__()
        self.reduce_sum = reduce_sum

    def forward(self, x):
        """
        :param x: Float tensor of size ``(batch_size, num_fields, embed_dim)``
        """
        square_of_sum = torch.sum(x, dim=1) ** 2
        sum_of_square = torch.sum(x ** 2, dim=1)
        ix = square_of_sum - sum_of_square
        if self.reduce_sum:
            ix = torch.sum(ix, dim=1, keepdim=True)
        return 0.5 * ix


class MultiLayerPerceptron(torch.nn.Module):

    def __init__(self, input_dim, embed_dims, dropout, output_layer=True):
        super().__init__()
        layers = list()
        for embed_dim in embed_dims:
            layers.append(torch.nn.Linear(input_dim, embed_dim))
            layers.append(torch.nn.BatchNorm1d(embed_dim))
            layers.append(torch.nn.ReLU())
            layers.append(torch.nn.Dropout(p=dropout))
            input_dim = embed_dim
        if output_layer:
            layers.append(torch.nn.Linear(input_dim, 1))
        self.mlp = torch.nn.Sequential(*layers)

    def forward(self, x):
        """
        :param x: Float tensor of size ``(batch_size, embed_dim)``
        """
        return self.mlp(x)


# ---------------- torchfm/model/dfm.py ----------------
class DeepFactorizationMachineModel(torch.nn.Module):
    """
    A pytorch implementation of DeepFM.

    Reference:
        H Guo, et al. DeepFM: A Factorization-Machine based Neural Network for CTR Prediction, 2017.
    """

    def __init__(self, field_dims, embed_dim, mlp_dims, dropout):
        super().__init__()
        self.linear = FeaturesLinear(field_dims)
        self.fm = FactorizationMachine(reduce_sum=True)
        self.embedding = FeaturesEmbedding(field_dims, embed_dim)
        self.embed_output_dim = len(field_dims) * embed_dim
        self.mlp = MultiLayerPerceptron(self.embed_output_dim, mlp_dims, dropout)

    def forward(self, x):
        """
        :param x: Long tensor of size ``(batch_size, num_fields)``
        """
        embed_x = self.embedding(x)
        x = self.linear(x) + self.fm(embed_x) + self.mlp(embed_x.view(-1, self.embed_output_dim))
        return torch.sigmoid(x.squeeze(1))


# ---------------- synthetic stand-in for torchfm/dataset/criteo.py ----------------
class CriteoDataset(torch.utils.data.Dataset):
    """39 fields (13 discretised integer features + 26 categorical), ids already mapped to 0..field_dim-1."""

    def __init__(self, n=12000, seed=0):
        self.NUM_FEATS = 39
        self.NUM_INT_FEATS = 13
        rng = np.random.RandomState(seed)
        self.field_dims = np.array([12] * self.NUM_INT_FEATS + list(rng.randint(8, 40, size=26)), dtype=np.uint32)
        cols = [rng.zipf(1.6, size=n) % int(d) for d in self.field_dims]
        x = np.stack(cols, axis=1).astype(np.int64)
        w1 = [rng.randn(int(d)) * 0.6 for d in self.field_dims]
        v = [rng.randn(int(d), 4) * 0.5 for d in self.field_dims]
        logit = sum(w1[f][x[:, f]] for f in range(0, 39, 3))
        for a, b in [(0, 14), (3, 20), (14, 30), (7, 25), (20, 33)]:
            logit = logit + (v[a][x[:, a]] * v[b][x[:, b]]).sum(1) * 2.0
        logit = logit - np.median(logit)
        y = (rng.rand(n) < 1 / (1 + np.exp(-logit))).astype(np.int64)
        self.data = np.concatenate([y[:, None], x], axis=1)
        self.length = n

    def __getitem__(self, index):
        np_array = self.data[index]
        return np_array[1:], np_array[0]

    def __len__(self):
        return self.length


# ---------------- examples/main.py ----------------
def get_dataset(name, path):
    if name == 'criteo':
        return CriteoDataset()
    else:
        raise ValueError('unknown dataset name: ' + name)


def get_model(name, dataset):
    """
    Hyperparameters are empirically determined, not opitmized.
    """
    field_dims = dataset.field_dims
    if name == 'dfm':
        return DeepFactorizationMachineModel(field_dims, embed_dim=16, mlp_dims=(16, 16), dropout=0.2)
    else:
        raise ValueError('unknown model name: ' + name)


class EarlyStopper(object):

    def __init__(self, num_trials, save_path):
        self.num_trials = num_trials
        self.trial_counter = 0
        self.best_accuracy = 0
        self.save_path = save_path

    def is_continuable(self, model, accuracy):
        if accuracy > self.best_accuracy:
            self.best_accuracy = accuracy
            self.trial_counter = 0
            torch.save(model, self.save_path)
            return True
        elif self.trial_counter + 1 < self.num_trials:
            self.trial_counter += 1
            return True
        else:
            return False


def train(model, optimizer, data_loader, criterion, device, log_interval=10):
    model.train()
    total_loss = 0
    tk0 = tqdm.tqdm(data_loader, smoothing=0, mininterval=1.0, disable=True)
    for i, (fields, target) in enumerate(tk0):
        fields, target = fields.to(device), target.to(device)
        y = model(fields)
        loss = criterion(y, target.float())
        model.zero_grad()
        loss.backward()
        optimizer.step()
        total_loss += loss.item()
        if (i + 1) % log_interval == 0:
            print(f'  step {i + 1} loss={total_loss / log_interval:.4f}')
            total_loss = 0


def test(model, data_loader, device):
    model.eval()
    targets, predicts = list(), list()
    with torch.no_grad():
        for fields, target in tqdm.tqdm(data_loader, smoothing=0, mininterval=1.0, disable=True):
            fields, target = fields.to(device), target.to(device)
            y = model(fields)
            targets.extend(target.tolist())
            predicts.extend(y.tolist())
    return roc_auc_score(targets, predicts)


def main(dataset_name='criteo',
         dataset_path=None,
         model_name='dfm',
         epoch=6,
         learning_rate=0.001,
         batch_size=256,
         weight_decay=1e-6,
         device='cpu',
         save_dir=None):
    torch.manual_seed(0)
    save_dir = save_dir or tempfile.mkdtemp()
    device = torch.device(device)
    dataset = get_dataset(dataset_name, dataset_path)
    train_length = int(len(dataset) * 0.8)
    valid_length = int(len(dataset) * 0.1)
    test_length = len(dataset) - train_length - valid_length
    train_dataset, valid_dataset, test_dataset = torch.utils.data.random_split(
        dataset, (train_length, valid_length, test_length))
    train_data_loader = DataLoader(train_dataset, batch_size=batch_size, num_workers=0)
    valid_data_loader = DataLoader(valid_dataset, batch_size=batch_size, num_workers=0)
    test_data_loader = DataLoader(test_dataset, batch_size=batch_size, num_workers=0)
    model = get_model(model_name, dataset).to(device)
    criterion = torch.nn.BCELoss()
    optimizer = torch.optim.Adam(params=model.parameters(), lr=learning_rate, weight_decay=weight_decay)
    early_stopper = EarlyStopper(num_trials=2, save_path=os.path.join(save_dir, f'{model_name}.pt'))
    for epoch_i in range(epoch):
        train(model, optimizer, train_data_loader, criterion, device)
        auc = test(model, valid_data_loader, device)
        print('epoch:', epoch_i, 'validation: auc:', auc)
        if not early_stopper.is_continuable(model, auc):
            print(f'validation: best auc: {early_stopper.best_accuracy}')
            break
    auc = test(model, test_data_loader, device)
    print(f'test auc: {auc}')


if __name__ == '__main__':
    main()
