# Source: deep-voice/soundbay, soundbay/train.py (modeling), soundbay/data.py (BaseDataset, ClassifierDataset), soundbay/trainers.py (Trainer), commit f6596173058e4cc24e64e88237e962ac867b7a9b
# Report: https://github.com/deep-voice/soundbay/pull/49
# soundbay training: a call / background classifier on spectrogram segments cut from annotated
# recordings, class-equalised with a WeightedRandomSampler (equalize_data), Trainer with
# train_epoch / eval_epoch. The wav files and hydra configs are replaced by synthetic 0.25 s
# segments (background noise, or noise plus a rising tonal call) described by a metadata
# DataFrame; the ResNet is reduced to a small CNN; wandb logging to printed metrics.
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset, WeightedRandomSampler


class BaseDataset(Dataset):
    '''
    class for storing and loading data.
    '''
    def __init__(self, metadata, seq_length=0.25, len_buffer=0.0, sample_rate=16000, mode="train", seed=0):
        self.metadata = metadata
        self.mode = mode
        self.seq_length = seq_length
        self.sample_rate = sample_rate
        self.rng = np.random.RandomState(seed)
        self._preprocess_metadata(len_buffer)
        self.items_per_classes = np.unique(self.metadata['label'], return_counts=True)[1]

    def _preprocess_metadata(self, len_buffer, slice_flag=False):
        self.metadata = self.metadata[self.metadata['call_length'] >= (self.seq_length + len_buffer)]
        self.metadata = self.metadata.reset_index(drop=True)

    def _grab_fields(self, idx):
        begin_time = self.metadata['begin_time'][idx]
        end_time = self.metadata['end_time'][idx]
        label = self.metadata['label'][idx]
        seed = self.metadata['seed'][idx]
        return seed, begin_time, end_time, label

    def _get_audio(self, seed, begin_time, end_time, label):
        n = int(self.seq_length * self.sample_rate)
        r = np.random.RandomState(seed)
        audio = 0.5 * r.randn(n)
        if label == 1:
            t = np.arange(n) / self.sample_rate
            f0 = r.uniform(1500, 2500)
            audio += 0.6 * np.sin(2 * np.pi * (f0 * t + 4000 * t ** 2))
        return torch.tensor(audio, dtype=torch.float32)

    def __getitem__(self, idx):
        seed, begin_time, end_time, label = self._grab_fields(idx)
        raw_wav = self._get_audio(seed, begin_time, end_time, label)
        spec = torch.stft(raw_wav, n_fft=256, hop_length=128, window=torch.hann_window(256), return_complex=True)
        audio = torch.log1p(spec.abs()).unsqueeze(0)
        return audio, int(label), raw_wav, idx

    def __len__(self):
        return self.metadata.shape[0]


class ClassifierDataset(BaseDataset):
    pass


def make_metadata(n_background, n_calls, seed):
    rng = np.random.RandomState(seed)
    rows = []
    t = 0.0
    labels = np.array([0] * n_background + [1] * n_calls)
    rng.shuffle(labels)
    for k, label in enumerate(labels):
        length = rng.uniform(0.3, 1.2)
        rows.append(dict(filename=f"rec_{k // 50:03d}", begin_time=t, end_time=t + length,
                         call_length=length, label=int(label), seed=int(seed * 100000 + k)))
        t += length + rng.uniform(0.1, 2.0)
    return pd.DataFrame(rows)


class SmallCNN(nn.Module):
    def __init__(self, num_classes=2):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(), nn.AdaptiveMaxPool2d((4, 4)))
        self.fc = nn.Linear(16 * 16, num_classes)

    def forward(self, x):
        return self.fc(self.features(x).flatten(1))


class Trainer:
    def __init__(self, model, train_dataloader, val_dataloader, optimizer, criterion, epochs, scheduler=None):
        self.model = model
        self.epochs = epochs
        self.criterion = criterion
        self.epochs_trained = 0
        self.optimizer = optimizer
        self.scheduler = scheduler
        self.train_dataloader = train_dataloader
        self.val_dataloader = val_dataloader

    def train(self):
        for epoch in range(self.epochs_trained, self.epochs):
            self.train_epoch(epoch)
            self.epochs_trained += 1
            self.eval_epoch(epoch)

    def train_epoch(self, epoch):
        self.model.train()
        losses, preds, labels = [], [], []
        for it, batch in enumerate(self.train_dataloader):
            self.model.zero_grad()
            audio, label, raw_wav, idx = batch

            # estimate and calc losses
            estimated_label = self.model(audio)
            loss = self.criterion(estimated_label, label)
            loss.backward()
            self.optimizer.step()

            losses.append(loss.item())
            preds.append(estimated_label.argmax(1))
            labels.append(label)
        preds, labels = torch.cat(preds), torch.cat(labels)
        print(f"epoch {epoch} train loss {np.mean(losses):.4f} acc {(preds == labels).float().mean():.3f} "
              f"call fraction {labels.float().mean():.3f}")
        if self.scheduler is not None:
            self.scheduler.step()

    def eval_epoch(self, epoch: int):
        with torch.no_grad():
            self.model.eval()
            losses, preds, labels = [], [], []
            for it, batch in enumerate(self.val_dataloader):
                audio, label, raw_wav, idx = batch
                estimated_label = self.model(audio)
                loss = self.criterion(estimated_label, label)
                losses.append(loss.item())
                preds.append(estimated_label.argmax(1))
                labels.append(label)
            preds, labels = torch.cat(preds), torch.cat(labels)
            recall = [((preds == c) & (labels == c)).sum().item() / max(1, (labels == c).sum().item()) for c in (0, 1)]
            print(f"epoch {epoch} val loss {np.mean(losses):.4f} acc {(preds == labels).float().mean():.3f} "
                  f"recall background {recall[0]:.3f} call {recall[1]:.3f}")


def modeling(trainer, batch_size, num_workers, optimizer_args, equalize_data, epochs):
    # Set paths and create dataset
    train_dataset = ClassifierDataset(make_metadata(480, 120, seed=1), mode="train")
    val_dataset = ClassifierDataset(make_metadata(160, 40, seed=2), mode="val")

    # Define model and device for training
    model = SmallCNN(num_classes=2)

    assert 2 == len(train_dataset.items_per_classes) == len(val_dataset.items_per_classes), \
    "Num of classes in model and the datasets must be equal, check your configs and your dataset labels!!"

    # Define dataloader for training and validation datasets as well as optimizers arguments
    if equalize_data:
        sampler = WeightedRandomSampler(1/train_dataset.items_per_classes, len(train_dataset) )
    else:
        sampler = None
    train_dataloader = DataLoader(
            dataset=train_dataset,
            sampler=sampler,
            shuffle=sampler is None,
            batch_size=batch_size,
            num_workers=num_workers,
        )
    val_dataloader = DataLoader(
            dataset=val_dataset,
            batch_size=batch_size,
            shuffle=False,
            num_workers=num_workers,
        )

    optimizer = torch.optim.Adam(model.parameters(), **optimizer_args)
    scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma=0.995)

    _trainer = trainer(model=model, train_dataloader=train_dataloader, val_dataloader=val_dataloader,
                       optimizer=optimizer, criterion=nn.CrossEntropyLoss(), epochs=epochs, scheduler=scheduler)
    _trainer.train()


def main():
    torch.manual_seed(0)
    modeling(Trainer, batch_size=32, num_workers=0, optimizer_args={"lr": 0.003}, equalize_data=True, epochs=4)


if __name__ == "__main__":
    main()
