# Source: EricGuo5513/HumanML3D, cal_mean_variance.py (Mean.npy / Std.npy used to normalise motions for training), commit 3de7f5ca03e34cd936c3e0e17d6165bb3c1d6670
# Report: https://github.com/EricGuo5513/HumanML3D/issues/28
import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

JOINTS_NUM = 4
DIM = 8 + (JOINTS_NUM - 1) * 9 + JOINTS_NUM * 3


def make_corpus(seed=0):
    rng = np.random.default_rng(seed)
    files, splits = {}, {'train': [], 'val': [], 'test': []}
    basis = rng.normal(0, 1, (6, DIM))
    for i in range(400):
        name = '%06d' % i
        split = 'train' if i < 280 else ('val' if i < 320 else 'test')
        style = 1.0 if split == 'train' else 1.8
        T = int(rng.integers(40, 80))
        phase = np.linspace(0, rng.uniform(2, 6) * np.pi, T)[:, None]
        lat = np.concatenate([np.sin(phase * k) for k in (1, 2, 3)] + [np.cos(phase * k) for k in (1, 2, 3)], 1)
        files[name + '.npy'] = (style * lat @ basis + 0.5 * (style - 1) + 0.05 * rng.normal(0, 1, (T, DIM))).astype(np.float32)
        splits[split].append(name)
    return files, splits


FILES, SPLITS = make_corpus()


def listdir(data_dir):
    return sorted(FILES)


def mean_variance(data_dir, save_dir, joints_num):
    file_list = listdir(data_dir)
    data_list = []

    for file in file_list:
        data = FILES[file]
        if np.isnan(data).any():
            print(file)
            continue
        data_list.append(data)

    data = np.concatenate(data_list, axis=0)
    print('frames used for Mean/Std', data.shape[0], 'from', len(data_list), 'clips;',
          'test clips among them', sum(f[:-4] in SPLITS['test'] for f in file_list))
    Mean = data.mean(axis=0)
    Std = data.std(axis=0)
    Std[0:1] = Std[0:1].mean() / 1.0
    Std[1:3] = Std[1:3].mean() / 1.0
    Std[3:4] = Std[3:4].mean() / 1.0
    Std[4: 4+(joints_num - 1) * 3] = Std[4: 4+(joints_num - 1) * 3].mean() / 1.0
    Std[4+(joints_num - 1) * 3: 4+(joints_num - 1) * 9] = Std[4+(joints_num - 1) * 3: 4+(joints_num - 1) * 9].mean() / 1.0
    Std[4+(joints_num - 1) * 9: 4+(joints_num - 1) * 9 + joints_num*3] = Std[4+(joints_num - 1) * 9: 4+(joints_num - 1) * 9 + joints_num*3].mean() / 1.0
    Std[4 + (joints_num - 1) * 9 + joints_num * 3: ] = Std[4 + (joints_num - 1) * 9 + joints_num * 3: ].mean() / 1.0

    assert 8 + (joints_num - 1) * 9 + joints_num * 3 == Std.shape[-1]
    return Mean, Std


class MotionDataset(Dataset):
    def __init__(self, mean, std, split, window_size=32):
        self.mean, self.std, self.window_size = mean, std, window_size
        self.data = [FILES[name + '.npy'] for name in SPLITS[split]]

    def __len__(self):
        return len(self.data)

    def __getitem__(self, item):
        motion = self.data[item]
        idx = (item * 7) % (len(motion) - self.window_size)
        motion = motion[idx:idx + self.window_size]
        return (motion - self.mean) / self.std


class MovementConvEncoder(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.main = nn.Sequential(
            nn.Conv1d(input_size, hidden_size, 4, 2, 1), nn.Dropout(0.2), nn.LeakyReLU(0.2, inplace=True),
            nn.Conv1d(hidden_size, output_size, 4, 2, 1), nn.Dropout(0.2), nn.LeakyReLU(0.2, inplace=True))

    def forward(self, inputs):
        return self.main(inputs.permute(0, 2, 1)).permute(0, 2, 1)


class MovementConvDecoder(nn.Module):
    def __init__(self, input_size, hidden_size, output_size):
        super().__init__()
        self.main = nn.Sequential(
            nn.ConvTranspose1d(input_size, hidden_size, 4, 2, 1), nn.LeakyReLU(0.2, inplace=True),
            nn.ConvTranspose1d(hidden_size, output_size, 4, 2, 1), nn.LeakyReLU(0.2, inplace=True))
        self.out_net = nn.Linear(output_size, output_size)

    def forward(self, inputs):
        outputs = self.main(inputs.permute(0, 2, 1)).permute(0, 2, 1)
        return self.out_net(outputs)


def main():
    torch.manual_seed(0)
    mean, std = mean_variance('./HumanML3D/new_joint_vecs/', './HumanML3D/', JOINTS_NUM)
    train_loader = DataLoader(MotionDataset(mean, std, 'train'), batch_size=32, shuffle=True, drop_last=True)
    test_loader = DataLoader(MotionDataset(mean, std, 'test'), batch_size=40, shuffle=False)
    print('normalised test motion: mean %.3f std %.3f' % (np.concatenate([(FILES[n + '.npy'] - mean) / std for n in SPLITS['test']]).mean(),
                                                          np.concatenate([(FILES[n + '.npy'] - mean) / std for n in SPLITS['test']]).std()))

    movement_enc = MovementConvEncoder(DIM, 64, 32)
    movement_dec = MovementConvDecoder(32, 64, DIM)
    opt = torch.optim.Adam(list(movement_enc.parameters()) + list(movement_dec.parameters()), lr=1e-3)
    l1_criterion = nn.SmoothL1Loss()
    for epoch in range(30):
        movement_enc.train()
        movement_dec.train()
        for motions in train_loader:
            motions = motions.float()
            latents = movement_enc(motions)
            recon = movement_dec(latents)
            loss = l1_criterion(recon, motions)
            opt.zero_grad()
            loss.backward()
            opt.step()
        if epoch % 10 == 9:
            movement_enc.eval()
            movement_dec.eval()
            with torch.no_grad():
                test = torch.cat([m.float() for m in test_loader])
                test_loss = l1_criterion(movement_dec(movement_enc(test)), test).item()
            print('epoch', epoch, 'train rec', round(loss.item(), 4), 'test rec', round(test_loss, 4))


if __name__ == '__main__':
    main()
