# Source: snakers4/silero-vad, tuning/utils.py + tuning/tune.py + tuning/config.yml, commit 827e86e6850023e3a23faa30c1484fa23acd093a
# Report: https://github.com/snakers4/silero-vad/pull/699
#
# Fine-tuning the Silero VAD decoder head: the pretrained jit model is loaded with torch.set_grad_enabled(False)
# (init_jit_model), its STFT and encoder stay frozen and are run inside torch.enable_grad() in train(); a copy of
# the decoder (VADDecoderRNNJIT: LSTMCell + 1x1 conv + sigmoid) is trained chunk by chunk (512 samples + 64 samples
# of context) with BCELoss(reduction='none') weighted by masks (noise_loss 0.5 on non-speech frames); the best
# decoder by validation ROC-AUC is written back into the jit model.
# Adaptation: the pretrained jit model, torch.hub and the feather datasets are unavailable: a stand-in jit model
# with a fixed STFT (conv1d with a Fourier basis, magnitude) and a frozen random conv encoder (128 features per
# chunk) is built, and its "pretrained" decoder is the randomly initialised VADDecoderRNNJIT; 0.512 s synthetic
# 16 kHz clips (harmonic voiced bursts in noise, speech_ts annotations) replace the audio files; audiomentations
# and torchaudio resampling are not used (aug_prob 0, tune_8k False); batch 128 -> 8, 96 train / 48 val clips,
# num_epochs 20 -> 12, num_workers 0, device cpu; no tqdm, no jit save.
import gc
import random

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import warnings
from sklearn.metrics import roc_auc_score
from torch.utils.data import Dataset

warnings.filterwarnings('ignore')


class Config:
    tune_8k = False
    noise_loss = 0.5
    max_train_length_sec = 8
    aug_prob = 0.0
    learning_rate = 5e-4
    batch_size = 8
    num_workers = 0
    num_epochs = 12
    device = 'cpu'


def make_dataframe(n, seed, sr=16000, length=8192):
    """Stand-in for the feather dataset: one row per clip with its waveform and speech_ts annotations."""
    rng = np.random.RandomState(seed)
    rows = []
    t = np.arange(length) / sr
    for _ in range(n):
        wav = 0.05 * rng.randn(length)
        speech_ts = []
        start = rng.uniform(0.0, 0.15)
        while start < 0.45:
            end = min(start + rng.uniform(0.08, 0.18), 0.5)
            f0 = rng.uniform(110, 240)
            seg = (t >= start) & (t < end)
            voiced = sum(np.sin(2 * np.pi * f0 * k * t) / k for k in range(1, 5))
            wav[seg] += 0.3 * voiced[seg] * (1 + 0.5 * np.sin(2 * np.pi * 4 * t[seg]))
            speech_ts.append({'start': float(start), 'end': float(end)})
            start = end + rng.uniform(0.05, 0.15)
        rows.append({'audio': wav.astype(np.float32), 'speech_ts': speech_ts})
    return pd.DataFrame(rows)


class SileroVadDataset(Dataset):
    def __init__(self,
                 config,
                 dataframe,
                 mode='train'):

        self.num_samples = 512  # constant, do not change
        self.sr = 16000  # constant, do not change

        self.resample_to_8k = config.tune_8k
        self.noise_loss = config.noise_loss
        self.max_train_length_sec = config.max_train_length_sec
        self.max_train_length_samples = config.max_train_length_sec * self.sr

        assert self.max_train_length_samples % self.num_samples == 0
        assert mode in ['train', 'val']

        self.dataframe = dataframe.reset_index(drop=True)
        self.index_dict = self.dataframe.to_dict('index')
        self.mode = mode
        print(f'DATASET SIZE : {len(self.dataframe)}')

    def __getitem__(self, idx):
        idx = None if self.mode == 'train' else idx
        wav, gt, mask = self.load_speech_sample(idx)

        if self.mode == 'train':
            if len(wav) > self.max_train_length_samples:
                wav = wav[:self.max_train_length_samples]
                gt = gt[:int(self.max_train_length_samples / self.num_samples)]
                mask = mask[:int(self.max_train_length_samples / self.num_samples)]

        wav = torch.FloatTensor(wav)
        return wav, torch.FloatTensor(gt), torch.from_numpy(mask)

    def __len__(self):
        return len(self.index_dict)

    def load_speech_sample(self, idx=None):
        if idx is None:
            idx = random.randint(0, len(self.index_dict) - 1)
        wav = self.index_dict[idx]['audio']

        if len(wav) % self.num_samples != 0:
            pad_num = self.num_samples - (len(wav) % (self.num_samples))
            wav = np.pad(wav, (0, pad_num), 'constant', constant_values=0)

        gt, mask = self.get_ground_truth_annotated(self.index_dict[idx]['speech_ts'], len(wav))

        assert len(gt) == len(wav) / self.num_samples

        return wav, gt, mask

    def get_ground_truth_annotated(self, annotation, audio_length_samples):
        gt = np.zeros(audio_length_samples)

        for i in annotation:
            gt[int(i['start'] * self.sr): int(i['end'] * self.sr)] = 1

        squeezed_predicts = np.average(gt.reshape(-1, self.num_samples), axis=1)
        squeezed_predicts = (squeezed_predicts > 0.5).astype(int)
        mask = np.ones(len(squeezed_predicts))
        mask[squeezed_predicts == 0] = self.noise_loss
        return squeezed_predicts, mask


def SileroVadPadder(batch):
    wavs = [batch[i][0] for i in range(len(batch))]
    labels = [batch[i][1] for i in range(len(batch))]
    masks = [batch[i][2] for i in range(len(batch))]

    wavs = torch.nn.utils.rnn.pad_sequence(
        wavs, batch_first=True, padding_value=0)

    labels = torch.nn.utils.rnn.pad_sequence(
        labels, batch_first=True, padding_value=0)

    masks = torch.nn.utils.rnn.pad_sequence(
        masks, batch_first=True, padding_value=0)

    return wavs, labels, masks


class VADDecoderRNNJIT(nn.Module):

    def __init__(self):
        super(VADDecoderRNNJIT, self).__init__()

        self.rnn = nn.LSTMCell(128, 128)
        self.decoder = nn.Sequential(nn.Dropout(0.1),
                                     nn.ReLU(),
                                     nn.Conv1d(128, 1, kernel_size=1),
                                     nn.Sigmoid())

    def forward(self, x, state=torch.zeros(0)):
        x = x.squeeze(-1)
        if len(state):
            h, c = self.rnn(x, (state[0], state[1]))
        else:
            h, c = self.rnn(x)

        x = h.unsqueeze(-1).float()
        state = torch.stack([h, c])
        x = self.decoder(x)
        return x, state


class STFT(nn.Module):
    """Stand-in for the jit model's STFT: conv1d with a fixed Fourier basis, magnitude of 129 bins."""

    def __init__(self, filter_length=256, hop_length=128):
        super().__init__()
        n = torch.arange(filter_length).float()
        k = torch.arange(filter_length // 2 + 1).float()
        window = torch.hann_window(filter_length)
        real = torch.cos(2 * torch.pi * k[:, None] * n[None] / filter_length) * window
        imag = -torch.sin(2 * torch.pi * k[:, None] * n[None] / filter_length) * window
        self.register_buffer('forward_basis_buffer', torch.cat([real, imag])[:, None, :])
        self.hop_length = hop_length

    def forward(self, x):
        x = nn.functional.pad(x, (0, 64), mode='reflect').unsqueeze(1)
        out = nn.functional.conv1d(x, self.forward_basis_buffer, stride=self.hop_length)
        cutoff = out.shape[1] // 2
        return torch.sqrt(out[:, :cutoff] ** 2 + out[:, cutoff:] ** 2)


class Encoder(nn.Module):
    """Stand-in for the jit model's (frozen) conv encoder: 129 bins x 4 frames -> 128 features x 1 step."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Sequential(nn.Conv1d(129, 128, 3), nn.ReLU(), nn.Conv1d(128, 128, 1), nn.ReLU(),
                                  nn.AdaptiveAvgPool1d(1))

    def forward(self, x):
        return self.conv(torch.log1p(x))


class _VADModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.stft = STFT()
        self.encoder = Encoder()
        self.decoder = VADDecoderRNNJIT()


class SileroJIT(nn.Module):
    def __init__(self):
        super().__init__()
        self._model = _VADModel()


class AverageMeter(object):
    """Computes and stores the average and current value"""

    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


def train(config,
          loader,
          jit_model,
          decoder,
          criterion,
          optimizer,
          device):

    losses = AverageMeter()
    decoder.train()

    context_size = 32 if config.tune_8k else 64
    num_samples = 256 if config.tune_8k else 512
    stft_layer = jit_model._model_8k.stft if config.tune_8k else jit_model._model.stft
    encoder_layer = jit_model._model_8k.encoder if config.tune_8k else jit_model._model.encoder

    with torch.enable_grad():
        for _, (x, targets, masks) in enumerate(loader):
            targets = targets.to(device)
            x = x.to(device)
            masks = masks.to(device)
            x = torch.nn.functional.pad(x, (context_size, 0))

            outs = []
            state = torch.zeros(0)
            for i in range(context_size, x.shape[1], num_samples):
                input_ = x[:, i-context_size:i+num_samples]
                out = stft_layer(input_)
                out = encoder_layer(out)
                out, state = decoder(out, state)
                outs.append(out)
            stacked = torch.cat(outs, dim=2).squeeze(1)

            loss = criterion(stacked, targets)
            loss = (loss * masks).mean()
            loss.backward()
            optimizer.step()
            losses.update(loss.item(), masks.numel())

    gc.collect()

    return losses.avg


def validate(config,
             loader,
             jit_model,
             decoder,
             criterion,
             device):

    losses = AverageMeter()
    decoder.eval()

    predicts = []
    gts = []

    context_size = 32 if config.tune_8k else 64
    num_samples = 256 if config.tune_8k else 512
    stft_layer = jit_model._model_8k.stft if config.tune_8k else jit_model._model.stft
    encoder_layer = jit_model._model_8k.encoder if config.tune_8k else jit_model._model.encoder

    with torch.no_grad():
        for _, (x, targets, masks) in enumerate(loader):
            targets = targets.to(device)
            x = x.to(device)
            masks = masks.to(device)
            x = torch.nn.functional.pad(x, (context_size, 0))

            outs = []
            state = torch.zeros(0)
            for i in range(context_size, x.shape[1], num_samples):
                input_ = x[:, i-context_size:i+num_samples]
                out = stft_layer(input_)
                out = encoder_layer(out)
                out, state = decoder(out, state)
                outs.append(out)
            stacked = torch.cat(outs, dim=2).squeeze(1)

            predicts.extend(stacked[masks != 0].tolist())
            gts.extend(targets[masks != 0].tolist())

            loss = criterion(stacked, targets)
            loss = (loss * masks).mean()
            losses.update(loss.item(), masks.numel())
    score = roc_auc_score(gts, predicts)

    gc.collect()

    return losses.avg, round(score, 3)


def init_jit_model(model_path: str,
                   device=torch.device('cpu')):
    torch.set_grad_enabled(False)
    model = SileroJIT()  # torch.jit.load(model_path, map_location=device) in the repo
    model.eval()
    return model


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    config = Config()

    train_dataset = SileroVadDataset(config, make_dataframe(96, seed=0), mode='train')
    train_loader = torch.utils.data.DataLoader(train_dataset,
                                               batch_size=config.batch_size,
                                               collate_fn=SileroVadPadder,
                                               num_workers=config.num_workers)

    val_dataset = SileroVadDataset(config, make_dataframe(48, seed=1), mode='val')
    val_loader = torch.utils.data.DataLoader(val_dataset,
                                             batch_size=config.batch_size,
                                             collate_fn=SileroVadPadder,
                                             num_workers=config.num_workers)

    model = init_jit_model('silero_vad.jit', device=config.device)
    print('Model loaded')
    model.to(config.device)
    decoder = VADDecoderRNNJIT().to(config.device)
    decoder.load_state_dict(model._model_8k.decoder.state_dict() if config.tune_8k else model._model.decoder.state_dict())
    decoder.train()
    params = decoder.parameters()
    optimizer = torch.optim.Adam(filter(lambda p: p.requires_grad, params),
                                 lr=config.learning_rate)
    criterion = nn.BCELoss(reduction='none')

    val_loss0, val_roc0 = validate(config, val_loader, model, decoder, criterion, config.device)
    print(f'Before tuning: Validation loss: {round(val_loss0, 3)} Validation ROC-AUC: {val_roc0}')
    best_val_roc = 0
    for i in range(config.num_epochs):
        print(f'Starting epoch {i + 1}')
        train_loss = train(config, train_loader, model, decoder, criterion, optimizer, config.device)
        val_loss, val_roc = validate(config, val_loader, model, decoder, criterion, config.device)
        print(f'Metrics after epoch {i + 1}:\n'
              f'\tTrain loss: {round(train_loss, 3)}\n',
              f'\tValidation loss: {round(val_loss, 3)}\n'
              f'\tValidation ROC-AUC: {round(val_roc, 3)}')

        if val_roc > best_val_roc:
            print('New best ROC-AUC, saving model')
            best_val_roc = val_roc
            model._model.decoder.load_state_dict(decoder.state_dict())
    print('Done')


if __name__ == '__main__':
    main()
