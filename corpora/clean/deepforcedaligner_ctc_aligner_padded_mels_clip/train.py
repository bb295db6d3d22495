# Source: as-ideas/DeepForcedAligner, trainer.py (c3ddfbe2825c4afcfddcd099b61f1c8d5e099a66) + dfa/model.py + dfa/dataset.py, commit 4f6491128b21261c9601a602405141d5b7c4921c
# https://github.com/as-ideas/DeepForcedAligner
#
# TTS alignment by CTC: an Aligner (3 BatchNormConv over mel frames, BiLSTM, linear to symbols + blank)
# is trained with CTCLoss on log_softmax over (T, B, C) against the padded token sequence; mel and token
# lengths come from the batch; blank is index 0 and the padding value of the token matrix; the model
# counts its own steps in a registered int buffer (incremented in forward under `if self.train:`, a bound
# method and therefore always true); Adam whose state is loaded from the checkpoint then lr overwritten in
# param_groups; clip_grad_norm_ 1.0; latest checkpoint saved with model + optim state each epoch.
# Adaptation: LJSpeech mels/tokens -> synthetic utterances: 12-symbol token sequences (ids 1..12, length
# 5-12) rendered as 80-dim "mels" where each token lasts 3-8 frames (a per-symbol spectrum + noise),
# padded per batch like dataset.collate_dataset; the initial checkpoint is created in memory (fresh model
# and optimizer) instead of read from disk; tensorboard and the Dijkstra duration plots dropped; model
# dims lstm 512 -> 32, conv 256 -> 32; epochs 10000 -> 8, batch_size 32 -> 16; cpu.
import tempfile
from pathlib import Path

import numpy as np
import torch
import torch.nn as nn
from torch.nn import CTCLoss
from torch.optim import Adam
from torch.utils.data import DataLoader, Dataset


class BatchNormConv(nn.Module):

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv = nn.Conv1d(
            in_channels, out_channels, kernel_size,
            stride=1, padding=kernel_size // 2, bias=False)
        self.bnorm = nn.BatchNorm1d(out_channels)
        self.relu = nn.ReLU()

    def forward(self, x):
        x = x.transpose(1, 2)
        x = self.conv(x)
        x = self.relu(x)
        x = self.bnorm(x)
        x = x.transpose(1, 2)
        return x


class Aligner(torch.nn.Module):

    def __init__(self,
                 n_mels: int,
                 num_symbols: int,
                 lstm_dim: int,
                 conv_dim: int) -> None:
        super().__init__()
        self.register_buffer('step', torch.tensor(1, dtype=torch.int))
        self.convs = nn.ModuleList([
            BatchNormConv(n_mels, conv_dim, 5),
            BatchNormConv(conv_dim, conv_dim, 5),
            BatchNormConv(conv_dim, conv_dim, 5),
        ])
        self.rnn = torch.nn.LSTM(conv_dim, lstm_dim, batch_first=True, bidirectional=True)
        self.lin = torch.nn.Linear(2 * lstm_dim, num_symbols)

    def forward(self, x):
        if self.train:
            self.step += 1
        for conv in self.convs:
            x = conv(x)
        x, _ = self.rnn(x)
        x = self.lin(x)
        return x

    def get_step(self):
        return self.step.data.item()

    @classmethod
    def from_checkpoint(cls, checkpoint: dict) -> 'Aligner':
        config = checkpoint['config']
        symbols = checkpoint['symbols']
        model = Aligner(n_mels=config['audio']['n_mels'],
                        num_symbols=len(symbols) + 1,
                        **config['model'])
        model.load_state_dict(checkpoint['model'])
        return model


class AlignerDataset(Dataset):

    def __init__(self, items):
        self.items = items

    def __getitem__(self, index):
        tokens, mel = self.items[index]
        return {'tokens': torch.tensor(tokens).long(), 'mel': torch.tensor(mel).float(),
                'tokens_len': len(tokens), 'mel_len': mel.shape[0]}

    def __len__(self):
        return len(self.items)


def collate_dataset(batch):
    tokens = [b['tokens'] for b in batch]
    tokens = torch.nn.utils.rnn.pad_sequence(tokens, batch_first=True, padding_value=0)
    mels = [b['mel'] for b in batch]
    mels = torch.nn.utils.rnn.pad_sequence(mels, batch_first=True, padding_value=0)
    tokens_len = torch.tensor([b['tokens_len'] for b in batch]).long()
    mel_len = torch.tensor([b['mel_len'] for b in batch]).long()
    return tokens, mels, tokens_len, mel_len


def new_dataloader(items, batch_size):
    return DataLoader(AlignerDataset(items), collate_fn=collate_dataset, batch_size=batch_size,
                      shuffle=True, drop_last=False, num_workers=0)


def to_device(batch, device):
    return tuple(t.to(device) for t in batch)


def make_items(n, n_mels=80, n_symbols=12, seed=0):
    rng = np.random.RandomState(seed)
    spectra = rng.randn(n_symbols + 1, n_mels).astype(np.float32)
    items = []
    for _ in range(n):
        tokens = rng.randint(1, n_symbols + 1, size=rng.randint(5, 13))
        frames = []
        for t in tokens:
            frames += [spectra[t]] * rng.randint(3, 9)
        mel = np.stack(frames) + 0.8 * rng.randn(len(frames), n_mels).astype(np.float32)
        items.append((tokens, mel))
    return items


class Trainer:

    def __init__(self, checkpoint_dir) -> None:
        self.checkpoint_dir = checkpoint_dir
        self.ctc_loss = CTCLoss()

    def train(self, checkpoint: dict, train_params: dict, items) -> None:
        lr = train_params['learning_rate']
        epochs = train_params['epochs']
        batch_size = train_params['batch_size']
        ckpt_steps = train_params['checkpoint_steps']

        config = checkpoint['config']
        symbols = checkpoint['symbols']
        device = torch.device('cpu')

        model = Aligner.from_checkpoint(checkpoint).to(device)
        optim = Adam(model.parameters())
        optim.load_state_dict(checkpoint['optim'])

        for g in optim.param_groups:
            g['lr'] = lr

        dataloader = new_dataloader(items, batch_size=batch_size)

        loss_sum = 0.
        start_epoch = model.get_step() // len(dataloader)

        for epoch in range(start_epoch + 1, epochs):
            for i, batch in enumerate(dataloader, 1):
                tokens, mel, tokens_len, mel_len = to_device(batch, device)

                pred = model(mel)
                pred = pred.transpose(0, 1).log_softmax(2)

                loss = self.ctc_loss(pred, tokens, mel_len, tokens_len)

                optim.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                optim.step()

                loss_sum += loss.item()

                if model.get_step() % ckpt_steps == 0:
                    torch.save({'model': model.state_dict(), 'optim': optim.state_dict(),
                                'config': config, 'symbols': symbols},
                               self.checkpoint_dir / f'model_step_{model.get_step() // 1000}k.pt')

            print(f'Epoch: {epoch} | Step {model.get_step()} | Loss: {loss_sum / i:#.4}')
            loss_sum = 0
            latest_checkpoint = self.checkpoint_dir / 'latest_model.pt'
            torch.save({'model': model.state_dict(), 'optim': optim.state_dict(),
                        'config': config, 'symbols': symbols},
                       latest_checkpoint)


def main():
    torch.manual_seed(0)
    symbols = list('abcdefghijkl')
    config = {'audio': {'n_mels': 80}, 'model': {'lstm_dim': 32, 'conv_dim': 32}}
    # cli.py: a fresh model and optimizer are written into the first checkpoint
    model = Aligner(n_mels=80, num_symbols=len(symbols) + 1, **config['model'])
    optim = Adam(model.parameters())
    checkpoint = {'model': model.state_dict(), 'optim': optim.state_dict(), 'config': config, 'symbols': symbols}
    train_params = {'learning_rate': 1e-3, 'epochs': 9, 'batch_size': 16, 'checkpoint_steps': 100000}
    trainer = Trainer(Path(tempfile.mkdtemp()))
    trainer.train(checkpoint, train_params, make_items(160))


if __name__ == '__main__':
    main()
