"""Channels-last data turned into channels-first with reshape / view instead of permute
(`silent.channels_last_reshaped`): written as users write it (an image classifier, a function
trainer over uint8 frames, a Conv1d over sensor series), with the exact finding; the correct
layouts and their look-alikes (permute, channels-first data, merged leading axes, noise, the
channels_last memory format) stay quiet."""

from __future__ import annotations

import pathlib

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchtriage
from torchtriage import Severity

HERE = pathlib.Path(__file__).read_text().splitlines()


def line(marker: str) -> int:
    [n] = [i + 1 for i, text in enumerate(HERE) if text.rstrip().endswith(f"# <- {marker}")]
    return n


def smooth_images_hwc(n: int, size: int = 16, channels: int = 3, seed: int = 0) -> torch.Tensor:
    """Pictures with smooth colour regions, stored (N, H, W, C) as a decoder gives them."""
    g = torch.Generator().manual_seed(seed)
    low = torch.rand(n, channels, 4, 4, generator=g)
    img = F.interpolate(low, size=(size, size), mode="bilinear", align_corners=False)
    img = img + 0.02 * torch.randn(img.shape, generator=g)
    return img.permute(0, 2, 3, 1).contiguous()


def labels(x: torch.Tensor) -> torch.Tensor:
    return (x[..., 0].mean(dim=(1, 2)) > x[..., 1].mean(dim=(1, 2))).long()


def found(report: torchtriage.Report) -> list[torchtriage.Finding]:
    return report.filter(code="silent.channels_last_reshaped")


class Classifier(nn.Module):
    def __init__(self, layout: str, channels: int = 3) -> None:
        super().__init__()
        self.layout = layout
        self.features = nn.Sequential(nn.Conv2d(channels, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(8, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, h, w, c = x.shape
        x = x.view(n, c, h, w) if self.layout == "view" else x.permute(0, 3, 1, 2)  # <- view bug
        return self.head(self.features(x).flatten(1))


def fit_classifier(model: nn.Module, x: torch.Tensor, steps: int = 6) -> torchtriage.Report:
    y = labels(x)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(steps):
            xb, yb = x[i * 8:(i + 1) * 8], y[i * 8:(i + 1) * 8]
            loss = F.cross_entropy(model(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
    return s.report


# ---------------------------------------------------------------- bugs
def test_view_of_hwc_images_in_a_classifier_forward():
    torch.manual_seed(0)
    report = fit_classifier(Classifier("view"), smooth_images_hwc(48))
    [f] = found(report)
    assert (f.severity, f.module, f.op) == (Severity.WARNING, "features.0", "reshape")
    ev = f.evidence
    assert ev["input_shape"] == [8, 3, 16, 16] and ev["channels"] == 3 and ev["samples_measured"] == 8
    assert ev["roughness_as_given"] > 0.5 and ev["ratio"] < 0.3
    assert f.message.startswith("the input of features.0 [8, 3, 16, 16] is channels-last data reshaped into "
                                "3 channels: read back as [8, 16, 16, 3] it is far smoother")
    assert "permute(0, 3, 1, 2)" in f.next_check
    assert f.line == line("view bug") and f.file.endswith("test_silent_channels_layout.py")


def test_uint8_frames_reshaped_in_a_function_trainer_rgba():
    def preprocess(frames: torch.Tensor) -> torch.Tensor:
        b, h, w, c = frames.shape
        return frames.float().div(255.0).reshape(b, c, h, w)  # <- reshape bug

    def train(model: nn.Module, frames: torch.Tensor, target: torch.Tensor) -> torchtriage.Report:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
        with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
            for k in range(0, 32, 8):
                pred = model(preprocess(frames[k:k + 8]))
                loss = F.mse_loss(pred, target[k:k + 8])
                opt.zero_grad()
                loss.backward()
                opt.step()
        return s.report

    torch.manual_seed(1)
    frames = (smooth_images_hwc(32, size=20, channels=4, seed=3) * 255).clamp(0, 255).to(torch.uint8)
    model = nn.Sequential(nn.Conv2d(4, 6, 5, stride=2), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 8 * 8, 1))
    [f] = found(train(model, frames, torch.randn(32, 1)))
    assert f.module == "0" and f.evidence["channels"] == 4 and f.evidence["input_shape"] == [8, 4, 20, 20]
    assert f.evidence["ratio"] < 0.3


def test_sensor_series_reshaped_for_a_conv1d_in_a_trainer_class():
    class SeriesTrainer:
        def __init__(self) -> None:
            torch.manual_seed(2)
            self.net = nn.Sequential(nn.Conv1d(3, 8, 5, padding=2), nn.ReLU(), nn.AdaptiveAvgPool1d(1),
                                     nn.Flatten(), nn.Linear(8, 1))
            self.opt = torch.optim.RMSprop(self.net.parameters(), lr=1e-3)

        def step(self, series: torch.Tensor, y: torch.Tensor) -> None:  # series: (batch, time, sensors)
            n, t, c = series.shape
            out = self.net(series.reshape(n, c, t))  # <- series bug
            loss = F.smooth_l1_loss(out.squeeze(-1), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()

    g = torch.Generator().manual_seed(5)
    walk = torch.randn(40, 64, 3, generator=g).cumsum(dim=1) * 0.1  # smooth random walks per sensor
    trainer = SeriesTrainer()
    with torchtriage.watch(trainer.net, trainer.opt, on_anomaly="record", report=False) as s:
        for i in range(5):
            trainer.step(walk[i * 8:(i + 1) * 8], walk[i * 8:(i + 1) * 8, -1, 0])
    [f] = found(s.report)
    assert f.module == "0" and f.evidence["input_shape"] == [8, 3, 64]
    assert "permute(0, 2, 1)" in f.next_check


# ---------------------------------------------------------------- look-alikes: quiet
def test_permute_is_quiet():
    assert found(fit_classifier(Classifier("permute"), smooth_images_hwc(48))) == []


def test_channels_first_data_and_merged_leading_axes_are_quiet():
    # (batch, views, C, H, W) merged into (batch * views, C, H, W): a correct reshape
    torch.manual_seed(3)
    views = smooth_images_hwc(48, seed=4).permute(0, 3, 1, 2).reshape(24, 2, 3, 16, 16)
    conv = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 1))
    opt = torch.optim.SGD(conv.parameters(), lr=0.01)
    with torchtriage.watch(conv, opt, on_anomaly="record", report=False) as s:
        for i in range(3):
            xb = views[i * 8:(i + 1) * 8]
            out = conv(xb.reshape(-1, 3, 16, 16))
            loss = out.pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert found(s.report) == []


def test_noise_inputs_and_channels_last_memory_format_are_quiet():
    torch.manual_seed(4)
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.AdaptiveAvgPool2d(2), nn.Flatten(), nn.Linear(16, 1)).to(
        memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    smooth = smooth_images_hwc(16, seed=6).permute(0, 3, 1, 2).contiguous(memory_format=torch.channels_last)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for xb in (torch.randn(8, 3, 12, 12), smooth[:8], smooth[8:]):
            loss = model(xb).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert found(s.report) == []


def test_grayscale_and_wide_convolutions_are_not_measured():
    torch.manual_seed(5)
    gray = smooth_images_hwc(8, channels=1)
    model = nn.Sequential(nn.Conv2d(1, 8, 3), nn.ReLU(), nn.Conv2d(8, 4, 3), nn.Flatten(), nn.Linear(4 * 12 * 12, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        loss = model(gray.reshape(8, 1, 16, 16)).pow(2).mean()
        loss.backward()
        opt.step()
    assert found(s.report) == []


# ---------------------------------------------------------------- session 15: provenance and offsets
def test_adversarial_inputs_reshaped_with_grad_are_still_found():
    # the data itself requires grad (an FGSM step): its graph holds a view, no learned layer
    torch.manual_seed(7)
    x = smooth_images_hwc(16, seed=8)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    y = labels(x)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        for i in range(2):
            xb = x[i * 8:(i + 1) * 8].clone().requires_grad_(True)
            n, h, w, c = xb.shape
            adv = xb.view(n, c, h, w) * 1.0  # <- adversarial bug
            loss = F.cross_entropy(model(adv), y[i * 8:(i + 1) * 8])
            opt.zero_grad()
            loss.backward()
            opt.step()
    [f] = found(s.report)
    assert f.module == "0" and f.evidence["input_shape"] == [8, 3, 16, 16] and f.evidence["ratio"] < 0.3


def _fit_gan(gen: nn.Module, disc: nn.Module, real: torch.Tensor, z_dim: int, steps: int = 3) -> torchtriage.Report:
    opt_g = torch.optim.Adam(gen.parameters(), lr=2e-4, betas=(0.5, 0.999))
    opt_d = torch.optim.Adam(disc.parameters(), lr=2e-4, betas=(0.5, 0.999))
    with torchtriage.watch([gen, disc], [opt_g, opt_d], on_anomaly="record", report=False) as s:
        for i in range(steps):
            xb = real[i * 8:(i + 1) * 8]
            fake = gen(torch.randn(8, z_dim))
            d_loss = F.softplus(-disc(xb)).mean() + F.softplus(disc(fake.detach())).mean()
            opt_d.zero_grad()
            d_loss.backward()
            opt_d.step()
            g_loss = F.softplus(-disc(fake)).mean()
            opt_g.zero_grad()
            g_loss.backward()
            opt_g.step()
    return s.report


class UpsamplingGenerator(nn.Module):
    """A DCGAN-style generator: a linear map viewed as maps, stride-2 transposed convolutions
    (their checkerboard), 3 output channels with their own offsets at initialisation."""

    def __init__(self, z_dim: int = 16) -> None:
        super().__init__()
        self.fc = nn.Linear(z_dim, 32 * 4 * 4)
        self.up = nn.Sequential(nn.ConvTranspose2d(32, 16, 4, 2, 1), nn.ReLU(), nn.ConvTranspose2d(16, 3, 4, 2, 1))
        with torch.no_grad():
            self.up[2].bias.copy_(torch.tensor([1.5, -2.0, 0.5]))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.up(self.fc(z).view(-1, 32, 4, 4))


def test_a_generator_output_fed_to_a_discriminator_is_quiet():
    # the discriminator's first convolution sees the real images, then the generator's output
    # detached (no graph to tell where it came from), then with its graph
    torch.manual_seed(9)
    real = smooth_images_hwc(24).permute(0, 3, 1, 2).contiguous()
    disc = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1), nn.LeakyReLU(0.2), nn.Conv2d(8, 4, 3, 2, 1), nn.LeakyReLU(0.2),
                         nn.Conv2d(4, 1, 4))
    assert found(_fit_gan(UpsamplingGenerator(), disc, real, 16)) == []


class FourPhaseUpsampler(nn.Module):
    """A 1-D decoder (a vocoder's shape): a stride-4 transposed convolution leaves a period-4
    pattern in its 4 channels, which the next convolutions read (read back with C = 4 it is smooth)."""

    def __init__(self) -> None:
        super().__init__()
        self.pre = nn.Conv1d(8, 16, 3, padding=1)
        self.up = nn.ConvTranspose1d(16, 4, 8, 4, 2)
        self.post = nn.Sequential(nn.Conv1d(4, 4, 3, padding=1), nn.LeakyReLU(0.1), nn.Conv1d(4, 1, 7, padding=3))

    def forward(self, mel: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.post(F.leaky_relu(self.up(F.leaky_relu(self.pre(mel), 0.1)), 0.1)))


def test_hidden_maps_of_a_strided_upsampler_are_not_judged():
    torch.manual_seed(10)
    model = FourPhaseUpsampler()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    mel = torch.randn(16, 8, 32).cumsum(-1) * 0.1
    wave = torch.sin(torch.linspace(0, 60, 128)).expand(16, 1, 128)
    with torchtriage.watch(model, opt, on_anomaly="record", report=False) as s:
        with torch.no_grad():
            model(mel[:4])  # an evaluation first: no graph, not judged, not counted
        for i in range(2):
            loss = F.l1_loss(model(mel[i * 8:(i + 1) * 8]), wave[i * 8:(i + 1) * 8])
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert found(s.report) == []


class PeriodDiscriminator(nn.Module):
    """Stereo audio (batch, 2, T) folded into its periods (batch, 2, T / p, p): each column one
    phase, each row one period, a legitimate reshape of a channels-first signal."""

    def __init__(self, period: int) -> None:
        super().__init__()
        self.period = period
        self.convs = nn.Sequential(nn.Conv2d(2, 8, (5, 1), (3, 1), (2, 0)), nn.LeakyReLU(0.1),
                                   nn.Conv2d(8, 1, (3, 1), 1, (1, 0)))

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        b, c, t = audio.shape
        if t % self.period:
            audio = F.pad(audio, (0, self.period - t % self.period), "reflect")
        return self.convs(audio.view(b, c, -1, self.period)).flatten(1)


def test_a_multichannel_signal_folded_into_periods_is_quiet():
    torch.manual_seed(11)
    t = torch.arange(1024) / 8000.0
    f0 = 150 + 100 * torch.rand(32, 1, 1)
    stereo = torch.cat([torch.sin(2 * torch.pi * f0 * t), 0.6 * torch.sin(2 * torch.pi * f0 * t + 0.5)], 1)
    stereo = stereo + 0.01 * torch.randn_like(stereo)
    discs = nn.ModuleList([PeriodDiscriminator(p) for p in (5, 7, 11)])
    opt = torch.optim.Adam(discs.parameters(), lr=1e-3)
    with torchtriage.watch(discs, opt, on_anomaly="record", report=False) as s:
        for i in range(3):
            xb = stereo[i * 8:(i + 1) * 8]
            loss = sum((1 - d(xb)).pow(2).mean() + d(xb.flip(-1)).pow(2).mean() for d in discs)
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert found(s.report) == []


def test_a_patchify_reshape_that_keeps_the_channel_axis_is_quiet():
    # (N, C, H, W) cut into p x p patches, each patch an image of its own for a small conv encoder
    torch.manual_seed(12)
    images = smooth_images_hwc(16, size=32).permute(0, 3, 1, 2).contiguous()
    patch = 8
    encoder = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    head = nn.Linear(8, 1)
    opt = torch.optim.Adam([*encoder.parameters(), *head.parameters()], lr=1e-3)
    with torchtriage.watch([encoder, head], opt, on_anomaly="record", report=False) as s:
        for i in range(2):
            x = images[i * 8:(i + 1) * 8]
            n, c, h, w = x.shape
            patches = x.view(n, c, h // patch, patch, w // patch, patch).permute(0, 2, 4, 1, 3, 5)
            tokens = encoder(patches.reshape(-1, c, patch, patch)).view(n, -1, 8)
            loss = head(tokens.mean(1)).pow(2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
    assert found(s.report) == []
