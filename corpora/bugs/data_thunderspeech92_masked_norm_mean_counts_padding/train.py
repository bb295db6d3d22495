# Source: scart97/thunder-speech, src/thunder/blocks.py (normalize_tensor, lengths_to_mask, MultiSequential, Masked), src/thunder/quartznet/transform.py (FeatureBatchNormalizer, DitherAudio, PreEmphasisFilter, PowerSpectrum, MelScale, FilterbankFeatures), commit 29e4ef1bdcde9297096d456454ecd839a3d2f06c
# Report: https://github.com/scart97/thunder-speech/pull/92
# Speech command recognition on top of thunder-speech's Quartznet feature pipeline: dither,
# pre-emphasis, STFT power spectrum, log-mel filterbank and per-utterance feature normalisation
# over the valid (unpadded) frames of each padded batch. The Quartznet encoder + CTC decoder are
# replaced by a small 1-D conv encoder with masked mean pooling and a linear classifier;
# speech commands by synthetic 8 kHz tone sequences of variable length; torchaudio's
# melscale_fbanks by the same slaney filterbank written in numpy.
import math
import time
from typing import Optional, Tuple

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


# ---------------------------------------------------------------- thunder/blocks.py
class MultiSequential(nn.Sequential):
    """nn.Sequential equivalent with 2 inputs/outputs"""

    def forward(self, audio: torch.Tensor, audio_lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        for module in self.children():
            audio, audio_lengths = module(audio, audio_lengths)
        return audio, audio_lengths


class Masked(nn.Module):
    """Wrapper to mix normal modules with others that take 2 inputs"""

    def __init__(self, *layers):
        super().__init__()
        self.layer = nn.Sequential(*layers)

    def forward(self, audio: torch.Tensor, audio_lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        return self.layer(audio), audio_lengths


def normalize_tensor(
    input_values: torch.Tensor,
    mask: Optional[torch.Tensor] = None,
    div_guard: float = 1e-7,
    dim: int = -1,
) -> torch.Tensor:
    # Vectorized implementation of (x - x.mean()) / x.std() considering only the valid mask
    if mask is not None:
        # Number of valid elements
        num_elements = mask.sum(dim=dim, keepdim=True).detach()
        # Mean is sum over number of elements
        x_mean = input_values.sum(dim=dim, keepdim=True).detach() / num_elements
        # std numerator: sum of squared differences to the mean
        numerator = (input_values - x_mean).pow(2).sum(dim=dim, keepdim=True).detach()
        x_std = (numerator / num_elements).sqrt()
        # using the div_guard to prevent division by zero
        normalized = (input_values - x_mean) / (x_std + div_guard)
        # Cleaning elements outside of valid mask
        return torch.masked_fill(normalized, ~mask.type(torch.bool), 0.0)

    mean = input_values.mean(dim=dim, keepdim=True).detach()
    std = (input_values.var(dim=dim, keepdim=True).detach() + div_guard).sqrt()
    return (input_values - mean) / std


def lengths_to_mask(lengths: torch.Tensor, max_length: int) -> torch.Tensor:
    lengths = lengths.type(torch.long)
    mask = torch.arange(max_length, device=lengths.device).expand(
        lengths.shape[0], max_length
    ) < lengths.unsqueeze(1)
    return mask


# ---------------------------------------------------------------- thunder/quartznet/transform.py
class FeatureBatchNormalizer(nn.Module):
    def __init__(self):
        """Normalize batch at the feature dimension."""
        super().__init__()
        self.div_guard = 1e-5

    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        with torch.no_grad():
            mask = lengths_to_mask(lengths, x.shape[-1])
            return (
                normalize_tensor(x, mask.unsqueeze(1), div_guard=self.div_guard),
                lengths,
            )


class DitherAudio(nn.Module):
    def __init__(self, dither: float = 1e-5):
        super().__init__()
        self.dither = dither

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            return x + (self.dither * torch.randn_like(x))
        else:
            return x


class PreEmphasisFilter(nn.Module):
    def __init__(self, preemph: float = 0.97):
        super().__init__()
        self.preemph = preemph

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cat(
            (x[:, 0].unsqueeze(1), x[:, 1:] - self.preemph * x[:, :-1]), dim=1
        )


class PowerSpectrum(nn.Module):
    def __init__(self, n_window_size: int = 320, n_window_stride: int = 160, n_fft: Optional[int] = None):
        super().__init__()
        self.win_length = n_window_size
        self.hop_length = n_window_stride
        self.n_fft = n_fft or 2 ** math.ceil(math.log2(self.win_length))
        window_tensor = torch.hann_window(self.win_length, periodic=False)
        self.register_buffer("window", window_tensor)
        self.stft_func = torch.stft

    def get_sequence_length(self, lengths: torch.Tensor) -> torch.Tensor:
        seq_len = torch.floor(lengths / self.hop_length) + 1
        return seq_len.to(dtype=torch.long)

    @torch.no_grad()
    def forward(self, x: torch.Tensor, lengths: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        x = self.stft_func(
            x,
            n_fft=self.n_fft,
            hop_length=self.hop_length,
            win_length=self.win_length,
            center=True,
            window=self.window.to(dtype=torch.float),
            return_complex=True,
        )
        x = torch.view_as_real(x)
        # torch returns real, imag; so convert to magnitude
        x = torch.sqrt(x.pow(2).sum(-1))
        # get power spectrum
        x = x.pow(2.0)
        return x, self.get_sequence_length(lengths)


def melscale_fbanks(n_freqs, n_mels, sample_rate, f_min, f_max):
    """torchaudio.functional.melscale_fbanks(norm='slaney', mel_scale='slaney')"""
    def hz_to_mel(f):
        f = np.asarray(f, dtype=np.float64)
        mels = f / (200.0 / 3)
        logstep = math.log(6.4) / 27.0
        return np.where(f >= 1000.0, 15.0 + np.log(np.maximum(f, 1e-10) / 1000.0) / logstep, mels)

    def mel_to_hz(m):
        logstep = math.log(6.4) / 27.0
        return np.where(m >= 15.0, 1000.0 * np.exp(logstep * (m - 15.0)), (200.0 / 3) * m)

    all_freqs = np.linspace(0, sample_rate // 2, n_freqs)
    m_pts = np.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2)
    f_pts = mel_to_hz(m_pts)
    f_diff = f_pts[1:] - f_pts[:-1]
    slopes = f_pts[None, :] - all_freqs[:, None]
    down = -slopes[:, :-2] / f_diff[:-1]
    up = slopes[:, 2:] / f_diff[1:]
    fb = np.maximum(0.0, np.minimum(down, up))
    enorm = 2.0 / (f_pts[2:n_mels + 2] - f_pts[:n_mels])
    fb *= enorm[None, :]
    return torch.tensor(fb, dtype=torch.float32)


class MelScale(nn.Module):
    def __init__(self, sample_rate: int, n_fft: int, nfilt: int, log_scale: bool = True):
        super().__init__()
        filterbanks = (
            melscale_fbanks(int(1 + n_fft // 2), n_mels=nfilt, sample_rate=sample_rate, f_min=0,
                            f_max=sample_rate / 2)
            .transpose(0, 1)
            .unsqueeze(0)
        )
        self.register_buffer("fb", filterbanks)
        self.log_scale = log_scale

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.matmul(self.fb.to(x.dtype), x)
        if self.log_scale:
            x = torch.log(x + 2**-24)
        return x


def FilterbankFeatures(sample_rate: int = 16000, n_window_size: int = 320, n_window_stride: int = 160,
                       n_fft: int = 512, preemph: float = 0.97, nfilt: int = 64, dither: float = 1e-5) -> nn.Module:
    return MultiSequential(
        Masked(DitherAudio(dither=dither), PreEmphasisFilter(preemph=preemph)),
        PowerSpectrum(n_window_size=n_window_size, n_window_stride=n_window_stride, n_fft=n_fft),
        Masked(MelScale(sample_rate=sample_rate, n_fft=n_fft, nfilt=nfilt)),
        FeatureBatchNormalizer(),
    )


# ---------------------------------------------------------------- model and data
class CommandClassifier(nn.Module):
    def __init__(self, nfilt=32, hidden=48, num_classes=6):
        super().__init__()
        self.audio_transform = FilterbankFeatures(sample_rate=8000, n_window_size=200, n_window_stride=80,
                                                  n_fft=256, nfilt=nfilt)
        self.encoder = nn.Sequential(
            nn.Conv1d(nfilt, hidden, 5, padding=2), nn.ReLU(),
            nn.Conv1d(hidden, hidden, 5, padding=2), nn.ReLU())
        self.decoder = nn.Linear(hidden, num_classes)

    def forward(self, audio, audio_lengths):
        features, feature_lengths = self.audio_transform(audio, audio_lengths)
        h = self.encoder(features)
        mask = lengths_to_mask(feature_lengths, h.shape[-1]).unsqueeze(1).float()
        pooled = (h * mask).sum(-1) / mask.sum(-1)
        return self.decoder(pooled)


def synth_commands(n, seed, sr=8000, num_classes=6):
    """Each command is a sequence of 3 tones (its 'phonemes') at a random loudness, 0.25-1.0 s long."""
    vocab_rng = np.random.RandomState(1234)
    words = [vocab_rng.choice([300, 450, 600, 800, 1000, 1300, 1700, 2200], size=3, replace=False)
             for _ in range(num_classes)]
    rng = np.random.RandomState(seed)
    audios, labels = [], []
    for _ in range(n):
        c = rng.randint(num_classes)
        length = int(sr * rng.uniform(0.25, 1.0))
        t = np.arange(length) / sr
        seg = np.minimum((t / t[-1] * 3).astype(int), 2)
        freqs = np.asarray(words[c])[seg] * rng.uniform(0.97, 1.03)
        gain = 10 ** rng.uniform(-1.5, 0)
        x = gain * np.sin(2 * np.pi * np.cumsum(freqs) / sr) + 0.02 * gain * rng.randn(length)
        audios.append(torch.tensor(x, dtype=torch.float32))
        labels.append(c)
    return audios, torch.tensor(labels)


def pad_batch(audios):
    lengths = torch.tensor([len(a) for a in audios])
    out = torch.zeros(len(audios), int(lengths.max()))
    for i, a in enumerate(audios):
        out[i, :len(a)] = a
    return out, lengths


def evaluate(model, audios, labels, batch_size):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(audios), batch_size):
            x, lengths = pad_batch(audios[i:i + batch_size])
            correct += (model(x, lengths).argmax(1) == labels[i:i + batch_size]).sum().item()
    model.train()
    return correct / len(audios)


if __name__ == "__main__":
    t0 = time.time()
    train_audio, train_labels = synth_commands(480, seed=0)
    test_audio, test_labels = synth_commands(240, seed=1)
    model = CommandClassifier()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=1e-3)
    batch_size = 16
    for epoch in range(6):
        perm = torch.randperm(len(train_audio)).tolist()
        total = 0.0
        for i in range(0, len(perm), batch_size):
            idx = perm[i:i + batch_size]
            x, lengths = pad_batch([train_audio[j] for j in idx])
            loss = F.cross_entropy(model(x, lengths), train_labels[idx])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(idx)
        print("epoch %d train_loss %.4f test_acc(batch 16) %.3f test_acc(one utterance at a time) %.3f" % (
            epoch, total / len(perm), evaluate(model, test_audio, test_labels, 16),
            evaluate(model, test_audio, test_labels, 1)))
    print("done in %.1fs" % (time.time() - t0))
