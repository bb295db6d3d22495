# Source: bshall/UniversalVocoding, train.py, univoc/model.py, univoc/dataset.py, preprocess.py, univoc/config/config.yaml, commit 3036e3eb11cadc44e9c3256aab08f2d58978f616
# https://github.com/bshall/UniversalVocoding
#
# WaveRNN-style "universal" vocoder: a 2-layer bidirectional GRU over log-mel frames whose output is upsampled
# to the sample rate by F.interpolate(scale_factor=hop_length) (nearest), concatenated with the embedding of the
# previous mu-law sample, an autoregressive GRU and two linear layers predicting 2**bits classes; teacher forcing
# with inputs audio[:, :-1] and targets audio[:, 1:] (the clip has sample_frames*hop_length + 1 samples);
# cross_entropy on logits transposed to (B, C, T); autocast + GradScaler; StepLR stepped per batch; the running
# average loss is reset each epoch; random crops of sample_frames frames per item.
# Adaptation: no CUDA/hydra/librosa/tensorboard: a synthetic corpus of 64 "utterances" (harmonic tones with a
# pitch and loudness changing every frame, plus noise) replaces the preprocessed speech; mel features are a
# log of a fixed random non-negative filterbank over torch.stft magnitudes (center=True, like the reflect
# padding of preprocess.py) and librosa.mu_compress is written out in numpy; autocast and GradScaler are kept but
# disabled, as torch.cuda.amp.autocast/GradScaler disable themselves on a machine without CUDA; VocoderDataset
# reads in-memory arrays instead of .npy files; sr 16000 -> 4000, hop 200 -> 40, n_fft 2048 -> 128, n_mels 80 -> 20,
# bits 10 -> 8, conditioning 128 -> 32, embedding 256 -> 32, rnn 896 -> 96, fc 1024 -> 128, batch 32 -> 16,
# sample_frames 24 -> 8, n_steps 150000 -> 120, lr 4e-4 -> 1e-3, StepLR step 25000 -> 50 (gamma 0.5), n_workers 8 -> 0,
# checkpoints dropped.
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset


# ---------------------------------------------------------------- univoc/model.py
class Vocoder(nn.Module):
    def __init__(
        self,
        n_mels,
        conditioning_size,
        embedding_dim,
        rnn_size,
        fc_size,
        bits,
        hop_length,
        sr,
    ):
        super().__init__()
        self.rnn_size = rnn_size
        self.bits = bits
        self.hop_length = hop_length
        self.sr = sr

        self.rnn1 = nn.GRU(
            n_mels,
            conditioning_size,
            num_layers=2,
            batch_first=True,
            bidirectional=True,
        )
        self.embedding = nn.Embedding(2 ** self.bits, embedding_dim)
        self.rnn2 = nn.GRU(
            embedding_dim + 2 * conditioning_size, rnn_size, batch_first=True
        )
        self.fc1 = nn.Linear(rnn_size, fc_size)
        self.fc2 = nn.Linear(fc_size, 2 ** self.bits)

    def forward(self, x, mels):
        mels, _ = self.rnn1(mels)

        mels = F.interpolate(mels.transpose(1, 2), scale_factor=self.hop_length)
        mels = mels.transpose(1, 2)

        x = self.embedding(x)

        x, _ = self.rnn2(torch.cat((x, mels), dim=2))

        x = F.relu(self.fc1(x))
        x = self.fc2(x)
        return x


# ---------------------------------------------------------------- univoc/dataset.py (in-memory items)
class VocoderDataset(Dataset):
    def __init__(self, items, sample_frames=24, hop_length=200):
        self.items = items
        self.sample_frames = sample_frames
        self.hop_length = hop_length

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        audio, mel = self.items[index]

        pos = random.randint(0, mel.shape[-1] - self.sample_frames - 1)
        mel = mel[:, pos : pos + self.sample_frames]

        p, q = pos, pos + self.sample_frames
        audio = audio[p * self.hop_length : q * self.hop_length + 1]

        return torch.LongTensor(audio), torch.FloatTensor(mel.T)


# ---------------------------------------------------------------- stand-in for preprocess.py on a synthetic corpus
def mu_compress(wav, bits=8):
    mu = 2 ** bits - 1
    y = np.sign(wav) * np.log1p(mu * np.abs(wav)) / np.log1p(mu)
    q = np.clip(np.floor((y + 1) / 2 * mu + 0.5), 0, mu).astype(np.int64) - 2 ** (bits - 1)  # librosa quantize
    return 2 ** (bits - 1) + q  # preprocess.py: 2 ** (bits - 1) + librosa.mu_compress(wav, mu=2 ** bits - 1)


def make_corpus(n_utt=64, n_frames=40, sr=4000, hop=40, n_fft=128, n_mels=20, bits=8, seed=0):
    rng = np.random.RandomState(seed)
    fb = torch.from_numpy(np.abs(rng.randn(n_mels, n_fft // 2 + 1)).astype(np.float32) ** 2)
    items = []
    for _ in range(n_utt):
        f0 = np.repeat(rng.choice([110.0, 150.0, 220.0, 300.0, 400.0], n_frames), hop)
        amp = np.repeat(rng.uniform(0.1, 0.8, n_frames), hop)
        phase = 2 * np.pi * np.cumsum(f0) / sr
        wav = amp * (np.sin(phase) + 0.4 * np.sin(2 * phase) + 0.2 * np.sin(3 * phase)) / 1.6
        wav = np.clip(wav + 0.01 * rng.randn(len(wav)), -1, 1).astype(np.float32)
        spec = torch.stft(torch.from_numpy(wav), n_fft, hop_length=hop, window=torch.hann_window(n_fft),
                          center=True, return_complex=True).abs()[:, :n_frames]
        mel = torch.log10(torch.clamp(fb @ spec, min=1e-5)).numpy()
        audio = mu_compress(np.concatenate([wav, wav[-1:]]), bits=bits)
        items.append((audio, mel))
    return items


class Cfg:
    preprocess = dict(sr=4000, hop_length=40, n_mels=20, bits=8)
    model = dict(n_mels=20, conditioning_size=32, embedding_dim=32, rnn_size=96, fc_size=128, bits=8, hop_length=40, sr=4000)
    train = dict(batch_size=16, n_steps=120, sample_frames=8, lr=1e-3, step_size=50, gamma=0.5, n_workers=0)


# ---------------------------------------------------------------- train.py
def train_model(cfg):
    vocoder = Vocoder(**cfg.model)
    optimizer = optim.Adam(vocoder.parameters(), lr=cfg.train["lr"])
    scheduler = optim.lr_scheduler.StepLR(
        optimizer,
        cfg.train["step_size"],
        cfg.train["gamma"],
    )
    scaler = torch.amp.GradScaler("cuda", enabled=torch.cuda.is_available())

    global_step = 0

    dataset = VocoderDataset(
        make_corpus(),
        sample_frames=cfg.train["sample_frames"],
        hop_length=cfg.preprocess["hop_length"],
    )

    dataloader = DataLoader(
        dataset,
        batch_size=cfg.train["batch_size"],
        shuffle=True,
        num_workers=cfg.train["n_workers"],
        pin_memory=False,
        drop_last=True,
    )

    n_epochs = cfg.train["n_steps"] // len(dataloader) + 1
    start_epoch = global_step // len(dataloader) + 1

    epoch_losses = []
    for epoch in range(start_epoch, n_epochs + 1):
        average_loss = 0

        for i, (audio, mels) in enumerate(dataloader, 1):
            optimizer.zero_grad()

            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
                wav = vocoder(audio[:, :-1], mels)
                loss = F.cross_entropy(wav.transpose(1, 2), audio[:, 1:])

            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            scheduler.step()

            global_step += 1

            average_loss += (loss.item() - average_loss) / i

        epoch_losses.append(average_loss)
        if epoch % 5 == 1 or epoch == n_epochs:
            print(f"epoch:{epoch}, loss:{average_loss:.3f}, {scheduler.get_last_lr()}")
    return epoch_losses


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    losses = train_model(Cfg())
    print(f"[summary] epoch_loss first={losses[0]:.3f} last={losses[-1]:.3f} chance={np.log(256):.3f} decreased={losses[-1] < losses[0]}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
