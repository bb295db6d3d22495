# Source: nttcslab/byol-a, byol_a/models.py (NetworkCommonMixIn.load_weight / set_trainable, AudioNTT2020Task6, AudioNTT2020), commit 446c89d55204de11bce16df21d57d8fec5f73dd2
# Report: https://github.com/nttcslab/byol-a/issues/7
# Downstream fine-tuning of a BYOL-A audio encoder, the way the README suggests using it:
# load the pretrained AudioNTT2020 weights with load_weight(), freeze the encoder with
# set_trainable(False) while a new classification head warms up, then unfreeze it with
# set_trainable(True) and fine-tune everything. The BYOL-A pretraining on AudioSet is stood in
# for by a short supervised pretext task on synthetic log-mel patches (which band is active);
# the downstream task (amplitude-modulation rate) needs the encoder to adapt. 16 mel bins, d=64.
import logging
import os
import re
import tempfile
from pathlib import Path

import torch
from torch import nn
import torch.nn.functional as F


class NetworkCommonMixIn():
    """Common mixin for network definition."""

    def load_weight(self, weight_file, device):
        """Utility to load a weight file to a device."""

        state_dict = torch.load(weight_file, map_location=device)
        if 'state_dict' in state_dict:
            state_dict = state_dict['state_dict']
        # Remove unneeded prefixes from the keys of parameters.
        weights = {}
        for k in state_dict:
            m = re.search(r'(^fc\.|\.fc\.|^features\.|\.features\.)', k)
            if m is None: continue
            new_k = k[m.start():]
            new_k = new_k[1:] if new_k[0] == '.' else new_k
            weights[new_k] = state_dict[k]
        # Load weights and set model to eval().
        self.load_state_dict(weights)
        self.eval()
        logging.info(f'Using audio embbeding network pretrained weight: {Path(weight_file).name}')
        return self

    def set_trainable(self, trainable=False):
        for p in self.parameters():
            if p.requires_grad:
                p.requires_grad = trainable


class AudioNTT2020Task6(nn.Module, NetworkCommonMixIn):
    """DCASE2020 Task6 NTT Solution Audio Embedding Network."""

    def __init__(self, n_mels, d):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 64, 3, stride=1, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(2, stride=2),

            nn.Conv2d(64, 64, 3, stride=1, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(2, stride=2),

            nn.Conv2d(64, 64, 3, stride=1, padding=1),
            nn.BatchNorm2d(64),
            nn.ReLU(),
            nn.MaxPool2d(2, stride=2),

        )
        self.fc = nn.Sequential(
            nn.Linear(64 * (n_mels // (2**3)), d),
            nn.ReLU(),
            nn.Dropout(p=0.3),
            nn.Linear(d, d),
            nn.ReLU(),
        )
        self.d = d

    def forward(self, x):
        x = self.features(x)       # (batch, ch, mel, time)
        x = x.permute(0, 3, 2, 1) # (batch, time, mel, ch)
        B, T, D, C = x.shape
        x = x.reshape((B, T, C*D)) # (batch, time, mel*ch)
        x = self.fc(x)
        return x


class AudioNTT2020(AudioNTT2020Task6):
    """BYOL-A General Purpose Representation Network."""

    def __init__(self, n_mels=64, d=512):
        super().__init__(n_mels=n_mels, d=d)

    def forward(self, x):
        x = super().forward(x)
        (x1, _) = torch.max(x, dim=1)
        x2 = torch.mean(x, dim=1)
        x = x1 + x2
        assert x.shape[1] == self.d and x.ndim == 2
        return x


N_MELS, T = 16, 32


def make_clips(n, task, g):
    """Synthetic normalised log-mel patches (1, 16, 32). pretext: which of 4 bands holds the
    tone; downstream: amplitude-modulation period of a tone in a random band."""
    y = torch.randint(0, 4, (n,), generator=g)
    t = torch.arange(T).float()
    x = 0.3 * torch.randn(n, 1, N_MELS, T, generator=g)
    for i in range(n):
        if task == "pretext":
            band, env = int(y[i]) * 4 + int(torch.randint(0, 3, (1,), generator=g)), torch.ones(T)
        else:
            band = int(torch.randint(0, N_MELS - 1, (1,), generator=g))
            period = [4, 6, 10, 16][int(y[i])]
            env = 0.5 + 0.5 * torch.cos(2 * torch.pi * t / period + float(torch.rand(1, generator=g)) * 6.28)
        x[i, 0, band:band + 2] += 2.0 * env
    return x, y


def pretrain(weight_file):
    g = torch.Generator().manual_seed(1)
    x, y = make_clips(512, "pretext", g)
    model = AudioNTT2020(n_mels=N_MELS, d=64)
    head = nn.Linear(64, 4)
    opt = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=1e-3)
    for epoch in range(3):
        for i in range(0, 512, 64):
            loss = F.cross_entropy(head(model(x[i:i + 64])), y[i:i + 64])
            opt.zero_grad()
            loss.backward()
            opt.step()
    torch.save({'state_dict': {'module.' + k: v for k, v in model.state_dict().items()}}, weight_file)


def evaluate(model, head, x, y):
    model.eval()
    with torch.no_grad():
        acc = (head(model(x)).argmax(1) == y).float().mean().item()
    model.train()
    return acc


def main():
    torch.manual_seed(0)
    device = torch.device('cpu')
    weight_file = os.path.join(tempfile.mkdtemp(), 'AudioNTT2020-BYOLA-16x32d64.pth')
    pretrain(weight_file)

    model = AudioNTT2020(n_mels=N_MELS, d=64)
    model.load_weight(weight_file, device)
    head = nn.Linear(64, 4)
    g = torch.Generator().manual_seed(2)
    x_tr, y_tr = make_clips(1024, "downstream", g)
    x_va, y_va = make_clips(256, "downstream", g)
    optimizer = torch.optim.Adam(list(model.parameters()) + list(head.parameters()), lr=1e-3)

    model.train()
    for epoch in range(7):
        if epoch == 0:
            model.set_trainable(False)   # warm up the new head on frozen features
        if epoch == 3:
            model.set_trainable(True)    # then fine-tune the whole network
        n_trainable = sum(p.numel() for p in list(model.parameters()) + list(head.parameters()) if p.requires_grad)
        perm = torch.randperm(1024)
        total = 0.0
        for i in range(0, 1024, 64):
            idx = perm[i:i + 64]
            loss = F.cross_entropy(head(model(x_tr[idx])), y_tr[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        print(f"epoch {epoch}: trainable params {n_trainable} train loss {total / 1024:.4f} "
              f"val acc {evaluate(model, head, x_va, y_va):.3f}")


if __name__ == '__main__':
    main()
