# Source: SeanNaren/deepspeech.pytorch, deepspeech_pytorch/model.py + deepspeech_pytorch/loader/data_loader.py +
# deepspeech_pytorch/configs/train_config.py, commit b88a631ef6b96553e16bbaa5bd6a621435bed278
# https://github.com/SeanNaren/deepspeech.pytorch/blob/master/deepspeech_pytorch/model.py
#
# DeepSpeech2 as a LightningModule: CTCLoss(blank='_', reduction='sum', zero_infinity=True) on log_softmax of
# (T, N, C) outputs with concatenated 1-D targets; MaskConv zeroes padded time steps with masked_fill after every
# conv/BN/Hardtanh; packed sequences through bidirectional LSTMs whose two directions are summed; BatchNorm
# applied SequenceWise on (T*N, H); InferenceBatchSoftmax returns softmax only in eval mode (raw logits in
# training); input_percentages.mul_(T) turned into lengths in place; collate pads to the longest spectrogram
# and sorts by length; AdamW + ExponentialLR(0.99) per epoch from configure_optimizers.
# Adaptation: audio loading/STFT, hydra/OmegaConf configs, WER/CER metrics and checkpointing are replaced:
# synthetic log-spectrograms (each character of a 3-6 letter transcript is a band pattern lasting 6-10 frames,
# plus noise) with deepspeech's 29-symbol label set; the OmegaConf type checks become a `bidirectional` flag and
# an AdamConfig dataclass; sample_rate 16000 -> 8000, window .02 -> .01 (41 frequency bins); hidden 1024 -> 64,
# hidden_layers 5 -> 2; lr 1.5e-4 -> 3e-3; 240 utterances, batch 16, 3 epochs on Lightning's CPU trainer; the
# training loss is logged and printed per epoch.
import math
from dataclasses import dataclass
from typing import List

import pytorch_lightning as pl
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn import CTCLoss
from torch.utils.data import DataLoader, Dataset


@dataclass
class SpectConfig:
    sample_rate: int = 8000  # The sample rate for the data/model features
    window_size: float = .01  # Window size for spectrogram generation (seconds)


@dataclass
class BiDirectionalConfig:
    rnn_type: type = nn.LSTM  # Type of RNN to use in model
    hidden_size: int = 64  # Hidden size of RNN Layer
    hidden_layers: int = 2  # Number of RNN layers


@dataclass
class AdamConfig:
    learning_rate: float = 3e-3  # Initial Learning Rate
    learning_anneal: float = 0.99  # Annealing applied to learning rate after each epoch
    weight_decay: float = 1e-5  # Initial Weight Decay
    eps: float = 1e-8  # Adam eps
    betas: tuple = (0.9, 0.999)  # Adam betas


class SequenceWise(nn.Module):
    def __init__(self, module):
        """
        Collapses input of dim T*N*H to (T*N)*H, and applies to a module.
        Allows handling of variable sequence lengths and minibatch sizes.
        :param module: Module to apply input to.
        """
        super(SequenceWise, self).__init__()
        self.module = module

    def forward(self, x):
        t, n = x.size(0), x.size(1)
        x = x.view(t * n, -1)
        x = self.module(x)
        x = x.view(t, n, -1)
        return x

    def __repr__(self):
        tmpstr = self.__class__.__name__ + ' (\n'
        tmpstr += self.module.__repr__()
        tmpstr += ')'
        return tmpstr


class MaskConv(nn.Module):
    def __init__(self, seq_module):
        """
        Adds padding to the output of the module based on the given lengths. This is to ensure that the
        results of the model do not change when batch sizes change during inference.
        Input needs to be in the shape of (BxCxDxT)
        :param seq_module: The sequential module containing the conv stack.
        """
        super(MaskConv, self).__init__()
        self.seq_module = seq_module

    def forward(self, x, lengths):
        """
        :param x: The input of size BxCxDxT
        :param lengths: The actual length of each sequence in the batch
        :return: Masked output from the module
        """
        for module in self.seq_module:
            x = module(x)
            mask = torch.BoolTensor(x.size()).fill_(0)
            if x.is_cuda:
                mask = mask.cuda()
            for i, length in enumerate(lengths):
                length = length.item()
                if (mask[i].size(2) - length) > 0:
                    mask[i].narrow(2, length, mask[i].size(2) - length).fill_(1)
            x = x.masked_fill(mask, 0)
        return x, lengths


class InferenceBatchSoftmax(nn.Module):
    def forward(self, input_):
        if not self.training:
            return F.softmax(input_, dim=-1)
        else:
            return input_


class BatchRNN(nn.Module):
    def __init__(self, input_size, hidden_size, rnn_type=nn.LSTM, bidirectional=False, batch_norm=True):
        super(BatchRNN, self).__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bidirectional = bidirectional
        self.batch_norm = SequenceWise(nn.BatchNorm1d(input_size)) if batch_norm else None
        self.rnn = rnn_type(input_size=input_size, hidden_size=hidden_size,
                            bidirectional=bidirectional, bias=True)
        self.num_directions = 2 if bidirectional else 1

    def flatten_parameters(self):
        self.rnn.flatten_parameters()

    def forward(self, x, output_lengths, h=None):
        if self.batch_norm is not None:
            x = self.batch_norm(x)
        x = nn.utils.rnn.pack_padded_sequence(x, output_lengths)
        x, h = self.rnn(x, h)
        x, _ = nn.utils.rnn.pad_packed_sequence(x)
        if self.bidirectional:
            x = x.view(x.size(0), x.size(1), 2, -1).sum(2).view(x.size(0), x.size(1), -1)  # (TxNxH*2) -> (TxNxH) by sum
        return x, h


class Lookahead(nn.Module):
    # Wang et al 2016 - Lookahead Convolution Layer for Unidirectional Recurrent Neural Networks
    # input shape - sequence, batch, feature - TxNxH
    # output shape - same as input
    def __init__(self, n_features, context):
        super(Lookahead, self).__init__()
        assert context > 0
        self.context = context
        self.n_features = n_features
        self.pad = (0, self.context - 1)
        self.conv = nn.Conv1d(
            self.n_features,
            self.n_features,
            kernel_size=self.context,
            stride=1,
            groups=self.n_features,
            padding=0,
            bias=False
        )

    def forward(self, x):
        x = x.transpose(0, 1).transpose(1, 2)
        x = F.pad(x, pad=self.pad, value=0)
        x = self.conv(x)
        x = x.transpose(1, 2).transpose(0, 1).contiguous()
        return x

    def __repr__(self):
        return self.__class__.__name__ + '(' \
               + 'n_features=' + str(self.n_features) \
               + ', context=' + str(self.context) + ')'


class DeepSpeech(pl.LightningModule):
    def __init__(self,
                 labels: List,
                 model_cfg: BiDirectionalConfig,
                 precision: int,
                 optim_cfg: AdamConfig,
                 spect_cfg: SpectConfig
                 ):
        super().__init__()
        self.save_hyperparameters()
        self.model_cfg = model_cfg
        self.precision = precision
        self.optim_cfg = optim_cfg
        self.spect_cfg = spect_cfg
        self.bidirectional = True
        self.labels = labels
        num_classes = len(self.labels)

        self.conv = MaskConv(nn.Sequential(
            nn.Conv2d(1, 32, kernel_size=(41, 11), stride=(2, 2), padding=(20, 5)),
            nn.BatchNorm2d(32),
            nn.Hardtanh(0, 20, inplace=True),
            nn.Conv2d(32, 32, kernel_size=(21, 11), stride=(2, 1), padding=(10, 5)),
            nn.BatchNorm2d(32),
            nn.Hardtanh(0, 20, inplace=True)
        ))
        # Based on above convolutions and spectrogram size using conv formula (W - F + 2P)/ S+1
        rnn_input_size = int(math.floor((self.spect_cfg.sample_rate * self.spect_cfg.window_size) / 2) + 1)
        rnn_input_size = int(math.floor(rnn_input_size + 2 * 20 - 41) / 2 + 1)
        rnn_input_size = int(math.floor(rnn_input_size + 2 * 10 - 21) / 2 + 1)
        rnn_input_size *= 32

        self.rnns = nn.Sequential(
            BatchRNN(
                input_size=rnn_input_size,
                hidden_size=self.model_cfg.hidden_size,
                rnn_type=self.model_cfg.rnn_type,
                bidirectional=self.bidirectional,
                batch_norm=False
            ),
            *(
                BatchRNN(
                    input_size=self.model_cfg.hidden_size,
                    hidden_size=self.model_cfg.hidden_size,
                    rnn_type=self.model_cfg.rnn_type,
                    bidirectional=self.bidirectional
                ) for x in range(self.model_cfg.hidden_layers - 1)
            )
        )

        self.lookahead = None

        fully_connected = nn.Sequential(
            nn.BatchNorm1d(self.model_cfg.hidden_size),
            nn.Linear(self.model_cfg.hidden_size, num_classes, bias=False)
        )
        self.fc = nn.Sequential(
            SequenceWise(fully_connected),
        )
        self.inference_softmax = InferenceBatchSoftmax()
        self.criterion = CTCLoss(blank=self.labels.index('_'), reduction='sum', zero_infinity=True)
        self.epoch_losses = []

    def forward(self, x, lengths, hs=None):
        lengths = lengths.cpu().int()
        output_lengths = self.get_seq_lens(lengths)
        x, _ = self.conv(x, output_lengths)

        sizes = x.size()
        x = x.view(sizes[0], sizes[1] * sizes[2], sizes[3])  # Collapse feature dimension
        x = x.transpose(1, 2).transpose(0, 1).contiguous()  # TxNxH

        # if hs is None, create a list of None values corresponding to the number of rnn layers
        if hs is None:
            hs = [None] * len(self.rnns)

        new_hs = []
        for i, rnn in enumerate(self.rnns):
            x, h = rnn(x, output_lengths, hs[i])
            new_hs.append(h)

        if not self.bidirectional:  # no need for lookahead layer in bidirectional
            x = self.lookahead(x)

        x = self.fc(x)
        x = x.transpose(0, 1)
        # identity in training mode, softmax in eval mode
        x = self.inference_softmax(x)
        return x, output_lengths, new_hs

    def training_step(self, batch, batch_idx):
        inputs, targets, input_percentages, target_sizes = batch
        input_sizes = input_percentages.mul_(int(inputs.size(3))).int()
        out, output_sizes, hs = self(inputs, input_sizes)
        out = out.transpose(0, 1)  # TxNxH
        out = out.log_softmax(-1)

        loss = self.criterion(out, targets, output_sizes, target_sizes)
        self.log('train_loss', loss, on_step=False, on_epoch=True, batch_size=inputs.size(0))
        return loss

    def on_train_epoch_end(self):
        value = self.trainer.callback_metrics['train_loss'].item()
        self.epoch_losses.append(value)
        print(f"epoch {self.current_epoch} train_loss (CTC sum per batch) {value:.2f} lr {self.trainer.optimizers[0].param_groups[0]['lr']:.6f}")

    def configure_optimizers(self):
        optimizer = torch.optim.AdamW(
            params=self.parameters(),
            lr=self.optim_cfg.learning_rate,
            betas=self.optim_cfg.betas,
            eps=self.optim_cfg.eps,
            weight_decay=self.optim_cfg.weight_decay
        )
        scheduler = torch.optim.lr_scheduler.ExponentialLR(
            optimizer=optimizer,
            gamma=self.optim_cfg.learning_anneal
        )
        return [optimizer], [scheduler]

    def get_seq_lens(self, input_length):
        """
        Given a 1D Tensor or Variable containing integer sequence lengths, return a 1D tensor or variable
        containing the size sequences that will be output by the network.
        :param input_length: 1D Tensor
        :return: 1D Tensor scaled by model
        """
        seq_len = input_length
        for m in self.conv.modules():
            if type(m) == nn.modules.conv.Conv2d:
                seq_len = ((seq_len + 2 * m.padding[1] - m.dilation[1] * (m.kernel_size[1] - 1) - 1) // m.stride[1] + 1)
        return seq_len.int()


def _collate_fn(batch):
    def func(p):
        return p[0].size(1)

    batch = sorted(batch, key=lambda sample: sample[0].size(1), reverse=True)
    longest_sample = max(batch, key=func)[0]
    freq_size = longest_sample.size(0)
    minibatch_size = len(batch)
    max_seqlength = longest_sample.size(1)
    inputs = torch.zeros(minibatch_size, 1, freq_size, max_seqlength)
    input_percentages = torch.FloatTensor(minibatch_size)
    target_sizes = torch.IntTensor(minibatch_size)
    targets = []
    for x in range(minibatch_size):
        sample = batch[x]
        tensor = sample[0]
        target = sample[1]
        seq_length = tensor.size(1)
        inputs[x][0].narrow(1, 0, seq_length).copy_(tensor)
        input_percentages[x] = seq_length / float(max_seqlength)
        target_sizes[x] = len(target)
        targets.extend(target)
    targets = torch.tensor(targets, dtype=torch.long)
    return inputs, targets, input_percentages, target_sizes



LABELS = ["_", "'", "A", "B", "C", "D", "E", "F", "G", "H", "I", "J", "K", "L", "M", "N", "O", "P", "Q", "R", "S",
          "T", "U", "V", "W", "X", "Y", "Z", " "]


class SyntheticSpectrogramDataset(Dataset):
    """Stand-in for SpectrogramDataset: (freq=41, time) normalised log-spectrograms and transcript label ids."""

    def __init__(self, n=320, seed=0):
        g = torch.Generator().manual_seed(seed)
        letters = list(range(2, 12))  # transcripts over 'A'..'J'
        bands = torch.rand(29, 41, generator=g) ** 4 * 3
        self.items = []
        for _ in range(n):
            k = int(torch.randint(3, 7, (1,), generator=g))
            target = [letters[int(i)] for i in torch.randint(0, len(letters), (k,), generator=g)]
            frames = []
            for c in target:
                d = int(torch.randint(6, 11, (1,), generator=g))
                frames.append(bands[c][:, None].expand(41, d))
                frames.append(torch.zeros(41, 2))
            spect = torch.cat(frames, 1) + 0.3 * torch.randn(41, sum(f.shape[1] for f in frames), generator=g)
            spect = (spect - spect.mean()) / spect.std()
            self.items.append((spect, target))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


def main():
    pl.seed_everything(0, verbose=False)
    train_loader = DataLoader(SyntheticSpectrogramDataset(240, seed=0), batch_size=16, shuffle=True, collate_fn=_collate_fn)
    model = DeepSpeech(labels=LABELS, model_cfg=BiDirectionalConfig(), precision=32,
                       optim_cfg=AdamConfig(), spect_cfg=SpectConfig())
    trainer = pl.Trainer(max_epochs=3, accelerator="cpu", devices=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(model, train_loader)
    losses = model.epoch_losses
    print(f"[summary] ctc_loss first={losses[0]:.2f} last={losses[-1]:.2f} decreased={losses[-1] < losses[0]}")


if __name__ == "__main__":
    main()
