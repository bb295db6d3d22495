# Source: NVIDIA-NeMo/Speech, nemo/collections/tts/models/audio_codec.py (AudioCodecModel.training_step, configure_optimizers), nemo/collections/tts/losses/audio_codec_loss.py (TimeDomainLoss, MultiResolutionMelLoss, GeneratorHingedLoss, DiscriminatorHingedLoss, FeatureMatchingLoss)
# Report: https://github.com/NVIDIA-NeMo/Speech/pull/7266
# NeMo audio codec training step (Lightning manual optimisation written out as a loop): the
# encoder/decoder reconstruct the waveform; the discriminator is trained with a hinged loss on
# real vs detached generated audio, then the generator is trained with time-domain L1 +
# multi-resolution mel L1 + hinged adversarial + feature-matching losses through the
# discriminator. The SEANet encoder/decoder, FSQ quantiser and multi-period / multi-resolution
# discriminators are reduced to small 1-D conv nets; audio is synthetic 0.25 s clips at 8 kHz
# (sums of decaying harmonics + noise); AdamW lr 2e-4 betas (0.8, 0.99) for both optimizers.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class AudioEncoder(nn.Module):
    def __init__(self, ch=16, dim=16):
        super().__init__()
        self.net = nn.Sequential(nn.Conv1d(1, ch, 7, padding=3), nn.ELU(), nn.Conv1d(ch, ch, 4, stride=2, padding=1),
                                 nn.ELU(), nn.Conv1d(ch, dim, 4, stride=2, padding=1))

    def forward(self, audio):
        return self.net(audio.unsqueeze(1))


class AudioDecoder(nn.Module):
    def __init__(self, ch=16, dim=16):
        super().__init__()
        self.net = nn.Sequential(nn.ConvTranspose1d(dim, ch, 4, stride=2, padding=1), nn.ELU(),
                                 nn.ConvTranspose1d(ch, ch, 4, stride=2, padding=1), nn.ELU(),
                                 nn.Conv1d(ch, 1, 7, padding=3), nn.Tanh())

    def forward(self, encoded):
        return self.net(encoded).squeeze(1)


class Discriminator(nn.Module):
    def __init__(self, ch=16):
        super().__init__()
        self.layers = nn.ModuleList([nn.Conv1d(1, ch, 15, stride=1, padding=7),
                                     nn.Conv1d(ch, ch, 41, stride=4, padding=20, groups=4),
                                     nn.Conv1d(ch, ch, 41, stride=4, padding=20, groups=4)])
        self.out = nn.Conv1d(ch, 1, 3, padding=1)

    def score(self, x):
        fmap = []
        x = x.unsqueeze(1)
        for layer in self.layers:
            x = F.leaky_relu(layer(x), 0.1)
            fmap.append(x)
        return self.out(x), fmap

    def forward(self, audio_real, audio_gen):
        s_real, f_real = self.score(audio_real)
        s_gen, f_gen = self.score(audio_gen)
        return [s_real], [s_gen], [f_real], [f_gen]


def mel_loss_fn(audio_real, audio_gen):
    loss = 0.0
    for n_fft in (64, 128, 256):
        win = torch.hann_window(n_fft)
        S_r = torch.stft(audio_real, n_fft, n_fft // 4, window=win, return_complex=True).abs()
        S_g = torch.stft(audio_gen, n_fft, n_fft // 4, window=win, return_complex=True).abs()
        loss = loss + (torch.log(S_r + 1e-5) - torch.log(S_g + 1e-5)).abs().mean()
    return loss / 3


def disc_loss_fn(disc_scores_real, disc_scores_gen):
    loss = 0.0
    for s_r, s_g in zip(disc_scores_real, disc_scores_gen):
        loss = loss + F.relu(1 - s_r).mean() + F.relu(1 + s_g).mean()
    return loss / len(disc_scores_real)


def gen_loss_fn(disc_scores_gen):
    return sum(F.relu(1 - s).mean() for s in disc_scores_gen) / len(disc_scores_gen)


def feature_loss_fn(fmaps_real, fmaps_gen):
    loss = 0.0
    for fr, fg in zip(fmaps_real, fmaps_gen):
        for a, b in zip(fr, fg):
            loss = loss + (a.detach() - b).abs().mean() / (a.detach().abs().mean() + 1e-5)
    return loss / len(fmaps_real)


class AudioCodecModel:
    def __init__(self):
        self.audio_encoder = AudioEncoder()
        self.audio_decoder = AudioDecoder()
        self.discriminator = Discriminator()
        self.time_domain_loss_scale, self.mel_loss_scale = 0.1, 1.0
        self.gen_loss_scale, self.feature_loss_scale = 1.0, 1.0
        self.optim_gen, self.optim_disc = self.configure_optimizers()

    def configure_optimizers(self):
        gen_params = list(self.audio_encoder.parameters()) + list(self.audio_decoder.parameters())
        optim_g = torch.optim.AdamW(gen_params, lr=2e-4, betas=(0.8, 0.99))
        optim_d = torch.optim.AdamW(self.discriminator.parameters(), lr=2e-4, betas=(0.8, 0.99))
        return optim_g, optim_d

    def _process_batch(self, audio):
        encoded = self.audio_encoder(audio)
        audio_gen = self.audio_decoder(encoded)
        return audio, audio_gen

    def training_step(self, batch):
        optim_gen, optim_disc = self.optim_gen, self.optim_disc

        audio, audio_gen = self._process_batch(batch)

        # Train discriminator
        disc_scores_real, disc_scores_gen, _, _ = self.discriminator(audio_real=audio, audio_gen=audio_gen.detach())
        loss_disc = disc_loss_fn(disc_scores_real=disc_scores_real, disc_scores_gen=disc_scores_gen)
        train_disc_loss = loss_disc
        train_disc_loss.backward()
        optim_disc.step()
        optim_disc.zero_grad()

        loss_time_domain = F.l1_loss(audio_gen, audio)
        train_loss_time_domain = self.time_domain_loss_scale * loss_time_domain
        loss_mel = mel_loss_fn(audio_real=audio, audio_gen=audio_gen)
        train_loss_mel = self.mel_loss_scale * loss_mel
        _, disc_scores_gen, fmaps_real, fmaps_gen = self.discriminator(audio_real=audio, audio_gen=audio_gen)
        loss_gen = gen_loss_fn(disc_scores_gen=disc_scores_gen)
        train_loss_gen = self.gen_loss_scale * loss_gen
        loss_feature = feature_loss_fn(fmaps_real=fmaps_real, fmaps_gen=fmaps_gen)
        train_loss_feature = self.feature_loss_scale * loss_feature
        loss_gen_all = train_loss_time_domain + train_loss_mel + train_loss_gen + train_loss_feature

        loss_gen_all.backward()
        optim_gen.step()
        optim_gen.zero_grad()
        return {"d_loss": loss_disc.item(), "g_loss_gen": loss_gen.item(), "g_loss_feature": loss_feature.item(),
                "g_loss_mel": loss_mel.item()}


def make_audio(n, rng, sr=8000, length=2048):
    t = np.arange(length) / sr
    clips = np.zeros((n, length), np.float32)
    for i in range(n):
        f0 = rng.uniform(100, 400)
        for k in range(1, 5):
            clips[i] += rng.uniform(0.1, 0.3) / k * np.sin(2 * np.pi * f0 * k * t + rng.uniform(0, 6.28))
        clips[i] *= np.exp(-t * rng.uniform(1, 6))
        clips[i] += rng.normal(0, 0.01, length)
    return torch.from_numpy(clips)


if __name__ == "__main__":
    torch.set_num_threads(1)
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    data = make_audio(64, rng)
    model = AudioCodecModel()
    step = 0
    for epoch in range(12):
        order = torch.from_numpy(rng.permutation(len(data)))
        logs = []
        for s in range(0, len(data), 8):
            logs.append(model.training_step(data[order[s:s + 8]]))
            step += 1
        m = {k: np.mean([l[k] for l in logs]) for k in logs[0]}
        print(f"epoch {epoch:2d} step {step:3d} d_loss {m['d_loss']:.4f} g_loss_gen {m['g_loss_gen']:.4f} "
              f"g_loss_feature {m['g_loss_feature']:.4f} g_loss_mel {m['g_loss_mel']:.4f}")
