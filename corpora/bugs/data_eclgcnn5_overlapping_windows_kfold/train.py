# Source: zzx-JLU/ECLGCNN, deap.py (data_calibrate, data_divide, set_label, feature_extract), train.py (cross_validation, train, validate), model.py, commit d00749274b434ed448c6a16551b94f651a2b4d13
# Report: https://github.com/zzx-JLU/ECLGCNN/issues/5
import numpy as np
import torch
from scipy.signal import stft
from sklearn.model_selection import KFold
from torch import nn

fs = 128
params = {'T': 6, 'batch_size': 32, 'k_fold': 5, 'num_cells': 30, 'lr': 0.003, 'alpha': 0.0008, 'epochs': 12}


def data_calibrate(data):
    baseline_time = 3
    baseline_data, normal_data = np.split(data, [baseline_time * fs], axis=-1)
    baseline_data = np.concatenate([baseline_data] * 20, axis=-1)
    return normal_data - baseline_data


def data_divide(data, label):
    window_size = 6  # 窗口大小
    step = 3  # 窗口滑动的步长
    num = (60 - window_size) // step + 1
    divided_data = []
    for i in range(0, num * step, step):
        segment = data[:, :, i * fs: (i + window_size) * fs]
        divided_data.append(segment)
    divided_data = np.vstack(divided_data)
    divided_label = np.vstack([label] * num)
    return divided_data, divided_label


def set_label(labels):
    return torch.tensor(np.where(labels < 5, 0, 1), dtype=torch.long)


def feature_extract(data_array):
    f, t, zxx = stft(data_array, fs=128, window='hann', nperseg=128, noverlap=0, nfft=256, scaling='psd')
    power = np.power(np.abs(zxx), 2)
    fStart = [1, 4, 8, 14, 31]
    fEnd = [3, 7, 13, 30, 50]
    de_time = []
    for i in range(1, 7):
        bands = []
        for j in range(len(fStart)):
            index1 = np.where(f == fStart[j])[0][0]
            index2 = np.where(f == fEnd[j])[0][0]
            psd = np.sum(power[:, :, index1:index2, i], axis=2) / (fEnd[j] - fStart[j] + 1)
            bands.append(np.log2(psd))
        de_time.append(np.stack(bands, axis=-1))
    return np.stack(de_time, axis=1)


def data_processing(data, labels):
    data = data_calibrate(data[:, :32])
    data, labels = data_divide(data, labels)
    labels = set_label(labels)
    data = feature_extract(data)
    return torch.tensor(data, dtype=torch.float32), labels


def make_subject(n_trials=20, seed=0):
    # one DEAP-like subject: 40 channels x 63 s; every trial (video) has its own spectral signature,
    # valence above 5 adds a weak alpha-band increase
    rng = np.random.RandomState(seed)
    t = np.arange(63 * fs) / fs
    valence = rng.uniform(1, 9, size=(n_trials, 1))
    data = rng.normal(0, 1.0, size=(n_trials, 40, 63 * fs))
    for k in range(n_trials):
        for ch in range(32):
            for f0 in (2.0, 5.5, 10.0, 20.0, 40.0):
                amp = rng.uniform(0.2, 1.5) + (0.25 if (f0 == 10.0 and valence[k, 0] >= 5) else 0.0)
                data[k, ch] += amp * np.sin(2 * np.pi * (f0 + rng.uniform(-0.5, 0.5)) * t + rng.uniform(0, 6.3))
    return data, valence


class ECLGCNN(nn.Module):
    def __init__(self, T, num_cells):
        super(ECLGCNN, self).__init__()
        self.T = T
        self.adj = nn.Parameter(torch.eye(32) + 0.01 * torch.randn(32, 32))
        self.gcn = nn.Linear(5, 5)
        self.lstm = nn.LSTM(32 * 5, num_cells, batch_first=True)
        self.fc = nn.Linear(num_cells, 2)

    def forward(self, x):
        # x: (batch, T, 32 channels, 5 bands)
        x = torch.relu(self.gcn(torch.softmax(self.adj, dim=1) @ x))
        out, _ = self.lstm(x.flatten(2))
        return self.fc(out[:, -1])


def train(model, train_data, train_labels, loss_fn, optimizer):
    model.train()
    g = torch.Generator().manual_seed(0)
    for epoch in range(params['epochs']):
        perm = torch.randperm(len(train_labels), generator=g)
        for start in range(0, len(perm), params['batch_size']):
            idx = perm[start:start + params['batch_size']]
            output = model(train_data[idx])
            loss = loss_fn(output, train_labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    return model


def validate(model, val_data, val_labels):
    model.eval()
    with torch.no_grad():
        pred = model(val_data).argmax(1)
    return (pred == val_labels).float().mean().item()


def cross_validation(data, labels, seed):
    splits = KFold(n_splits=params['k_fold'], shuffle=True, random_state=seed)
    loss_fn = nn.CrossEntropyLoss()
    acc_list = []
    n_trials = 20
    for fold, (train_idx, val_idx) in enumerate(splits.split(np.arange(len(data)))):
        shared = len(set(train_idx % n_trials) & set(val_idx % n_trials))
        train_data, train_labels = data[train_idx], labels[train_idx]
        val_data, val_labels = data[val_idx], labels[val_idx]
        torch.manual_seed(seed)
        model = ECLGCNN(T=params['T'], num_cells=params['num_cells'])
        optimizer = torch.optim.Adam(model.parameters(), lr=params['lr'], weight_decay=params['alpha'])
        trained_model = train(model, train_data, train_labels, loss_fn, optimizer)
        acc = validate(trained_model, val_data, val_labels)
        acc_list.append(acc)
        print(f'fold {fold + 1}: {len(train_idx)} train / {len(val_idx)} val windows, trials in both: {shared}, '
              f'val acc {acc:.3f}')
    return np.array(acc_list).mean()


def main():
    raw, valence = make_subject()
    data, labels = data_processing(raw, valence)
    labels = labels[:, 0]
    print(f'{len(labels)} windows of 6 s with a 3 s step from 20 trials; features {tuple(data.shape[1:])}')
    avg_acc = cross_validation(data, labels, seed=0)
    print(f'average valence accuracy {avg_acc:.3f}')


if __name__ == '__main__':
    main()
