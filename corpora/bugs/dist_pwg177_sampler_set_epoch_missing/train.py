# Source: kan-bayashi/ParallelWaveGAN, parallel_wavegan/bin/train.py, commit 01e97a4dd04c220fa7c99dd9b3a65bc4bd89f5dc
# Report: https://github.com/kan-bayashi/ParallelWaveGAN/issues/177
# Run: torchrun --nproc-per-node 2 train.py
# Parallel WaveGAN vocoder training loop (Trainer.run / _train_epoch / _train_step) in distributed mode
# with a DistributedSampler. Synthetic "utterances": random mel-like features and the waveform a
# fixed upsampling filter produces from them; a small conv generator with STFT loss. The discriminator
# starts after discriminator_train_start_steps, beyond this short run, as in the default config.
from collections import defaultdict

import numpy as np
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


class STFTLoss(torch.nn.Module):
    def __init__(self, fft_size=64, shift_size=16, win_length=48):
        super().__init__()
        self.fft_size, self.shift_size, self.win_length = fft_size, shift_size, win_length
        self.register_buffer("window", torch.hann_window(win_length))

    def forward(self, x, y):
        def mag(s):
            return torch.stft(s, self.fft_size, self.shift_size, self.win_length, self.window,
                              return_complex=True).abs().clamp(min=1e-7)
        x_mag, y_mag = mag(x), mag(y)
        sc_loss = torch.norm(y_mag - x_mag, p="fro") / torch.norm(y_mag, p="fro")
        mag_loss = torch.nn.functional.l1_loss(torch.log(y_mag), torch.log(x_mag))
        return sc_loss, mag_loss


class Generator(torch.nn.Module):
    def __init__(self, aux_channels=8, hop_size=16, channels=32):
        super().__init__()
        self.upsample = torch.nn.ConvTranspose1d(aux_channels, channels, hop_size * 2, stride=hop_size, padding=hop_size // 2)
        self.conv = torch.nn.Sequential(torch.nn.Conv1d(channels + 1, channels, 5, padding=2), torch.nn.Tanh(),
                                        torch.nn.Conv1d(channels, 1, 5, padding=2))

    def forward(self, z, c):
        return self.conv(torch.cat([z, self.upsample(c)], 1))


class AudioMelDataset(torch.utils.data.Dataset):
    def __init__(self, num_utts=96, frames=16, hop_size=16, aux_channels=8):
        g = torch.Generator().manual_seed(0)
        self.feats = torch.randn(num_utts, aux_channels, frames, generator=g)
        kernel = torch.randn(aux_channels, 1, hop_size, generator=g) / 4
        self.audios = torch.nn.functional.conv_transpose1d(self.feats, kernel.repeat(1, 1, 1), stride=hop_size,
                                                           groups=1).sum(1, keepdim=True).tanh()

    def __getitem__(self, idx):
        return self.audios[idx], self.feats[idx], idx

    def __len__(self):
        return len(self.feats)


def collate(batch):
    y = torch.stack([b[0] for b in batch])
    c = torch.stack([b[1] for b in batch])
    z = torch.randn(y.shape)
    return z, c, y, torch.tensor([b[2] for b in batch])


class Trainer(object):
    """Customized trainer module for Parallel WaveGAN training."""

    def __init__(self, steps, epochs, data_loader, model, criterion, optimizer, scheduler, config,
                 device=torch.device("cpu")):
        self.steps = steps
        self.epochs = epochs
        self.data_loader = data_loader
        self.model = model
        self.criterion = criterion
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.config = config
        self.device = device
        self.finish_train = False
        self.total_train_loss = defaultdict(float)
        self.seen_orders = []

    def run(self):
        """Run training."""
        while True:
            # train one epoch
            self._train_epoch()

            # check whether training is finished
            if self.finish_train:
                break

    def _train_step(self, batch):
        """Train model one step."""
        # parse batch
        z, c, y, utt_ids = batch
        self.seen_orders[-1].extend(utt_ids.tolist())

        # calculate loss for generator
        y_ = self.model["generator"](z, c)
        y, y_ = y.squeeze(1), y_.squeeze(1)
        sc_loss, mag_loss = self.criterion["stft"](y_, y)
        gen_loss = sc_loss + mag_loss
        self.total_train_loss["train/generator_loss"] += gen_loss.item()

        # update generator
        self.optimizer["generator"].zero_grad()
        gen_loss.backward()
        if self.config["generator_grad_norm"] > 0:
            torch.nn.utils.clip_grad_norm_(
                self.model["generator"].parameters(),
                self.config["generator_grad_norm"])
        self.optimizer["generator"].step()
        self.scheduler["generator"].step()

        # update counts
        self.steps += 1

    def _train_epoch(self):
        """Train model one epoch."""
        self.seen_orders.append([])
        for train_steps_per_epoch, batch in enumerate(self.data_loader["train"], 1):
            # train one step
            self._train_step(batch)

            # check interval
            self._check_train_finish()

            # check whether training is finished
            if self.finish_train:
                return

        # update
        self.epochs += 1
        self.train_steps_per_epoch = train_steps_per_epoch
        if self.config['rank'] == 0:
            same = sum(a == b for a, b in zip(self.seen_orders[-1], self.seen_orders[0]))
            print(f"(steps: {self.steps}) finished {self.epochs} epoch training, generator loss "
                  f"{self.total_train_loss['train/generator_loss'] / train_steps_per_epoch:.4f}, "
                  f"first utterances {self.seen_orders[-1][:6]}, "
                  f"{same}/{len(self.seen_orders[-1])} positions same as epoch 1")
        self.total_train_loss = defaultdict(float)

    def _check_train_finish(self):
        if self.steps >= self.config["train_max_steps"]:
            self.finish_train = True


def main():
    dist.init_process_group("gloo")
    config = {"rank": dist.get_rank(), "batch_size": 6, "generator_grad_norm": 10, "train_max_steps": 10000,
              "num_epochs": 6}
    torch.manual_seed(1)
    dataset = {"train": AudioMelDataset()}
    sampler = {"train": DistributedSampler(
        dataset=dataset["train"], num_replicas=dist.get_world_size(), rank=config["rank"], shuffle=True)}
    data_loader = {"train": DataLoader(
        dataset=dataset["train"], shuffle=False, collate_fn=collate,
        batch_size=config["batch_size"], num_workers=0, sampler=sampler["train"])}
    model = {"generator": Generator()}
    model["generator"] = DistributedDataParallel(model["generator"])
    optimizer = {"generator": torch.optim.Adam(model["generator"].parameters(), lr=2e-3)}
    scheduler = {"generator": torch.optim.lr_scheduler.StepLR(optimizer["generator"], step_size=200, gamma=0.5)}
    trainer = Trainer(steps=0, epochs=0, data_loader=data_loader, model=model,
                      criterion={"stft": STFTLoss()}, optimizer=optimizer, scheduler=scheduler, config=config)
    config["train_max_steps"] = config["num_epochs"] * len(data_loader["train"])
    trainer.run()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
