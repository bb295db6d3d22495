# Source: yuval-reshef/StreamVC, train.py (train_streamvc), streamvc/train/loss.py, streamvc/train/discriminator.py, commit abf2dcffb48e1a03f849991a80a1f569d5b42a38
# Report: https://github.com/yuval-reshef/StreamVC/issues/3
# StreamVC stage-2 training: a generator (frozen content encoder + decoder) reconstructs its
# input waveform and is trained adversarially against a MelGAN-style multi-scale discriminator
# (three NLayerDiscriminators on progressively average-pooled audio) with hinge losses, a
# feature-matching loss over the discriminator's intermediate activations (lambda 100) and a
# multi-scale spectral reconstruction loss; AdamW(betas 0.5, 0.9) for both networks and StepLR.
# LibriTTS is replaced by synthetic harmonic "speech" segments with random padding masks, the
# StreamVC encoder/decoder (f0, energy, speaker encoder) by a small conv encoder-decoder, the
# torchaudio MelSpectrogram by an STFT power spectrogram; accelerate and logging are removed.
import math
from itertools import islice

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.parametrizations import weight_norm

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

SAMPLES_PER_FRAME = 32
SEGMENT = 1024


class Args:
    batch_size = 4
    num_epochs = 1
    limit_num_batches = 120
    lr = 4e-3
    betas = (0.5, 0.9)
    weight_decay = 1e-2
    scheduler_step = 60
    scheduler_gamma = 0.5
    lambda_feature = 100
    lambda_reconstruction = 1
    lambda_adversarial = 1
    lr_discriminator_multiplier = None
    log_interval = 30


def masked_mean_from_ratios(tensor: torch.Tensor, mask_ratio: torch.Tensor):
    assert len(tensor.shape) == 3
    assert len(mask_ratio.shape) == 1
    assert mask_ratio.shape[0] == tensor.shape[0]

    _, _, samples = tensor.shape
    original_lengths = torch.floor(mask_ratio * samples).to(torch.int32)
    num_original_samples = original_lengths.sum()
    mask = (torch.arange(samples, device=tensor.device)
            < original_lengths.unsqueeze(1)).unsqueeze(1)
    return torch.where(mask, tensor, 0).sum() / num_original_samples


class DiscriminatorLoss(nn.Module):
    def forward(self, real, fake, mask_ratio):
        loss = torch.tensor(0., device=real[0][0].device, dtype=real[0][0].dtype)
        for scale in real:
            loss += masked_mean_from_ratios(F.relu(1 - scale[-1]), mask_ratio)
        for scale in fake:
            loss += masked_mean_from_ratios(F.relu(1 + scale[-1]), mask_ratio)
        return loss


class GeneratorLoss(nn.Module):
    def forward(self, fake, mask_ratio):
        loss = torch.tensor(0., device=fake[0][0].device, dtype=fake[0][0].dtype)
        for scale in fake:
            loss += -masked_mean_from_ratios(scale[-1], mask_ratio)
        return loss


class FeatureLoss(nn.Module):
    def __init__(self, n_blocks=3, n_features=16, n_layers=4):
        super().__init__()
        self.n_blocks = n_blocks
        self.n_features = n_features
        self.n_layers = n_layers

    def forward(self, real, fake, mask_ratio):
        loss = torch.tensor(0., device=real[0][0].device, dtype=real[0][0].dtype)
        feature_weights = 4.0 / (self.n_layers + 1)
        discriminator_weights = 1.0 / self.n_blocks
        wt = discriminator_weights * feature_weights
        for i in range(self.n_blocks):
            for j in range(len(fake[i]) - 1):
                loss += wt * \
                    masked_mean_from_ratios(
                        torch.abs(fake[i][j]-real[i][j]).detach(), mask_ratio)
        return loss


class ReconstructionLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.epsilon = 1e-6

    def _calculate_for_scale(self, original, generated, s_exp, mask_ratio):
        s = 2 ** s_exp
        window = torch.hann_window(s)

        def spec(x):
            return torch.stft(x, n_fft=512, hop_length=s // 4, win_length=s, window=window,
                              return_complex=True).abs().pow(2)[:, :64]
        orig_audio_spec = spec(original)
        generated_audio_spec = spec(generated)

        alpha_s = torch.sqrt(torch.tensor(s) / 2)
        l1_loss = torch.abs(orig_audio_spec - generated_audio_spec)
        l1_loss = masked_mean_from_ratios(l1_loss, mask_ratio)
        l2_log_loss = torch.pow(
            torch.log(orig_audio_spec + self.epsilon) - torch.log(generated_audio_spec + self.epsilon), exponent=2)
        l2_log_loss = l2_log_loss.mean(dim=1, keepdim=True)
        l2_log_loss = torch.sqrt(l2_log_loss)
        l2_log_loss = masked_mean_from_ratios(l2_log_loss, mask_ratio)
        return l1_loss + alpha_s * l2_log_loss

    def forward(self, original, generated, mask_ratio):
        assert original.shape == generated.shape
        loss = torch.tensor(0., device=original.device, dtype=original.dtype)
        for s_exp in range(6, 10):
            loss += self._calculate_for_scale(original, generated, s_exp, mask_ratio)
        return loss


def weights_init(m):
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        m.weight.data.normal_(0.0, 0.02)


def WNConv1d(*args, **kwargs):
    return weight_norm(nn.Conv1d(*args, **kwargs))


class NLayerDiscriminator(nn.Module):
    def __init__(self, ndf, n_layers, downsampling_factor):
        super().__init__()
        model = nn.ModuleDict()
        model["layer_0"] = nn.Sequential(
            nn.ReflectionPad1d(7),
            WNConv1d(1, ndf, kernel_size=15),
            nn.LeakyReLU(0.2, True),
        )
        nf = ndf
        stride = downsampling_factor
        for n in range(1, n_layers + 1):
            nf_prev = nf
            nf = min(nf * stride, 256)
            model["layer_%d" % n] = nn.Sequential(
                WNConv1d(nf_prev, nf, kernel_size=stride * 10 + 1, stride=stride,
                         padding=stride * 5, groups=nf_prev // 4),
                nn.LeakyReLU(0.2, True),
            )
        nf = min(nf * 2, 256)
        model["layer_%d" % (n_layers + 1)] = nn.Sequential(
            WNConv1d(nf_prev, nf, kernel_size=5, stride=1, padding=2),
            nn.LeakyReLU(0.2, True),
        )
        model["layer_%d" % (n_layers + 2)] = WNConv1d(nf, 1, kernel_size=3, stride=1, padding=1)
        self.model = model

    def forward(self, x):
        results = []
        for key, layer in self.model.items():
            x = layer(x)
            results.append(x)
        return results


class Discriminator(nn.Module):
    def __init__(self, n_blocks=3, n_features=16, n_layers=3, downsampling_factor=4):
        super().__init__()
        self.model = nn.ModuleList()
        for i in range(n_blocks):
            self.model.append(NLayerDiscriminator(n_features, n_layers, downsampling_factor))
        self.downsample = nn.AvgPool1d(4, stride=2, padding=1, count_include_pad=False)
        self.apply(weights_init)

    def forward(self, x):
        results = []
        x = x.unsqueeze(-2)
        for D in self.model:
            results.append(D(x))
            x = self.downsample(x)
        return results


class StreamVC(nn.Module):
    """Stand-in generator: a frozen causal content encoder and a trainable decoder that
    upsamples content frames back to audio (output frame t is matched with input frame t-2)."""

    def __init__(self, channels=48):
        super().__init__()
        self.content_encoder = nn.Sequential(
            nn.Conv1d(1, channels, SAMPLES_PER_FRAME, stride=SAMPLES_PER_FRAME), nn.Tanh())
        self.speaker_encoder = nn.Sequential(nn.Conv1d(1, 16, 64, stride=32), nn.ReLU(), nn.AdaptiveAvgPool1d(1))
        self.decoder = nn.Sequential(
            nn.Conv1d(channels + 16, 96, 3, padding=1), nn.LeakyReLU(0.2),
            nn.Conv1d(96, 96, 3, padding=1), nn.LeakyReLU(0.2),
            nn.ConvTranspose1d(96, 32, 8, stride=8), nn.LeakyReLU(0.2),
            nn.ConvTranspose1d(32, 1, SAMPLES_PER_FRAME // 8, stride=SAMPLES_PER_FRAME // 8), nn.Tanh())

    def forward(self, source, target):
        content = self.content_encoder(source.unsqueeze(1))
        speaker = self.speaker_encoder(target.unsqueeze(1)).expand(-1, -1, content.size(-1))
        content = F.pad(content, (2, 0))
        speaker = F.pad(speaker, (2, 0))
        return self.decoder(torch.cat([content, speaker], 1)).squeeze(1)


def synthetic_speech_batches(batch_size, seed):
    gen = torch.Generator().manual_seed(seed)
    t = torch.arange(SEGMENT) / 16000.0
    while True:
        f0 = 100 + 150 * torch.rand(batch_size, 1, generator=gen)
        amps = torch.rand(batch_size, 4, generator=gen) / torch.arange(1, 5)
        env = 0.5 + 0.5 * torch.sin(2 * math.pi * (2 + 4 * torch.rand(batch_size, 1, generator=gen)) * t)
        audio = sum(amps[:, k:k + 1] * torch.sin(2 * math.pi * (k + 1) * f0 * t) for k in range(4)) * env
        audio = 0.6 * audio + 0.02 * torch.randn(batch_size, SEGMENT, generator=gen)
        lengths = torch.randint(SEGMENT * 3 // 4, SEGMENT + 1, (batch_size,), generator=gen)
        mask = (torch.arange(SEGMENT) < lengths.unsqueeze(1)).float()
        yield audio * mask, mask


def train_streamvc(streamvc_model, args):
    generator = streamvc_model
    discriminator = Discriminator()

    for param in generator.content_encoder.parameters():
        param.requires_grad = False

    optimizer_generator = torch.optim.AdamW(
        params=[param for param in generator.parameters() if param.requires_grad],
        lr=args.lr, betas=args.betas, weight_decay=args.weight_decay)

    lr_discriminator = args.lr
    if args.lr_discriminator_multiplier is not None:
        lr_discriminator = args.lr_discriminator_multiplier * lr_discriminator
    optimizer_discriminator = torch.optim.AdamW(
        params=discriminator.parameters(), lr=lr_discriminator, betas=args.betas, weight_decay=args.weight_decay)

    scheduler_generator = torch.optim.lr_scheduler.StepLR(optimizer_generator, args.scheduler_step, args.scheduler_gamma)
    scheduler_discriminator = torch.optim.lr_scheduler.StepLR(optimizer_discriminator, args.scheduler_step, args.scheduler_gamma)

    dataloader = synthetic_speech_batches(args.batch_size, seed=1)

    generator_loss_fn = GeneratorLoss()
    discriminator_loss_fn = DiscriminatorLoss()
    feature_loss_fn = FeatureLoss(n_layers=3)
    reconstruction_loss_fn = ReconstructionLoss()

    costs = []
    global_step = 0
    for epoch in range(0, args.num_epochs):
        for step, (batch, mask) in enumerate(islice(dataloader, args.limit_num_batches)):
            x_pred_t = generator(batch, batch)
            x_pred_t = x_pred_t[..., SAMPLES_PER_FRAME * 2:]
            batch = batch[..., :x_pred_t.shape[-1]]

            mask_ratio = mask.sum(dim=-1) / mask.shape[-1]

            # Train Discriminator
            discriminator.zero_grad()
            discriminator_fake_detached = discriminator(x_pred_t.detach())
            discriminator_real = discriminator(batch)
            discriminator_loss = discriminator_loss_fn(discriminator_real, discriminator_fake_detached, mask_ratio)
            discriminator_loss.backward()
            optimizer_discriminator.step()
            scheduler_discriminator.step()

            # Train Generator
            generator.zero_grad()
            discriminator_fake = discriminator(x_pred_t)
            adversarial_loss = generator_loss_fn(discriminator_fake, mask_ratio)
            feature_loss = feature_loss_fn(discriminator_real, discriminator_fake, mask_ratio)
            reconstruction_loss = reconstruction_loss_fn(batch, x_pred_t, mask_ratio)

            losses = (
                args.lambda_adversarial * adversarial_loss +
                args.lambda_feature * feature_loss +
                args.lambda_reconstruction * reconstruction_loss)
            losses.backward()
            optimizer_generator.step()
            scheduler_generator.step()

            costs.append([discriminator_loss.item(), adversarial_loss.item(),
                          feature_loss.item(), reconstruction_loss.item()])
            if (global_step + 1) % args.log_interval == 0:
                c = torch.tensor(costs).mean(0)
                print(f"[{epoch}, {step:5}] loss: disc {c[0]:.4f} adv {c[1]:.4f} "
                      f"feature_matching {c[2]:.4f} reconstruction {c[3]:.4f}")
                costs = []
            global_step += 1

    # held-out reconstruction quality of the trained generator
    generator.eval()
    with torch.no_grad():
        batch, mask = next(synthetic_speech_batches(64, seed=123))
        pred = generator(batch, batch)[..., SAMPLES_PER_FRAME * 2:]
        batch = batch[..., :pred.shape[-1]]
        ratio = mask.sum(-1) / mask.shape[-1]
        val_rec = reconstruction_loss_fn(batch, pred, ratio).item()
        val_l1 = masked_mean_from_ratios((batch - pred).abs().unsqueeze(1), ratio).item()
    print(f"held-out: reconstruction loss {val_rec:.4f}, waveform L1 {val_l1:.5f}")


if __name__ == "__main__":
    train_streamvc(StreamVC(), Args())
