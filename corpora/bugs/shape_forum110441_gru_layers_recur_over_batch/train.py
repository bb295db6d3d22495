# Source: AssemblyAI "Building an end-to-end Speech Recognition model in PyTorch" (Deep Speech 2 style SpeechRecognitionModel, BidirectionalGRU, train loop), as quoted in the forum thread
# Report: https://discuss.pytorch.org/t/gru-batch-first-changing-between-layers/110441
# ResCNN + stacked BiGRU acoustic model trained with CTC, the model code as quoted in the post.
# LibriSpeech mel spectrograms are replaced by synthetic
# 16-bin "spectrograms" where each of 6 symbols is a fixed spectral pattern lasting 3-4 frames;
# widths are reduced (rnn_dim 48, 2 ResCNN and 2 BiGRU layers); AdamW + OneCycleLR kept.
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim

N_SYMBOLS = 6
BLANK = N_SYMBOLS  # last class is the CTC blank, as blank=28 in the original


class CNNLayerNorm(nn.Module):
    """Layer normalization built for cnns input"""
    def __init__(self, n_feats):
        super(CNNLayerNorm, self).__init__()
        self.layer_norm = nn.LayerNorm(n_feats)

    def forward(self, x):
        # x (batch, channel, feature, time)
        x = x.transpose(2, 3).contiguous()  # (batch, channel, time, feature)
        x = self.layer_norm(x)
        return x.transpose(2, 3).contiguous()  # (batch, channel, feature, time)


class ResidualCNN(nn.Module):
    """Residual CNN inspired by https://arxiv.org/pdf/1603.05027.pdf
        except with layer norm instead of batch norm
    """
    def __init__(self, in_channels, out_channels, kernel, stride, dropout, n_feats):
        super(ResidualCNN, self).__init__()

        self.cnn1 = nn.Conv2d(in_channels, out_channels, kernel, stride, padding=kernel//2)
        self.cnn2 = nn.Conv2d(out_channels, out_channels, kernel, stride, padding=kernel//2)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.layer_norm1 = CNNLayerNorm(n_feats)
        self.layer_norm2 = CNNLayerNorm(n_feats)

    def forward(self, x):
        residual = x  # (batch, channel, feature, time)
        x = self.layer_norm1(x)
        x = F.gelu(x)
        x = self.dropout1(x)
        x = self.cnn1(x)
        x = self.layer_norm2(x)
        x = F.gelu(x)
        x = self.dropout2(x)
        x = self.cnn2(x)
        x += residual
        return x  # (batch, channel, feature, time)


class BidirectionalGRU(nn.Module):

    def __init__(self, rnn_dim, hidden_size, dropout, batch_first):
        super(BidirectionalGRU, self).__init__()

        self.BiGRU = nn.GRU(
            input_size=rnn_dim, hidden_size=hidden_size,
            num_layers=1, batch_first=batch_first, bidirectional=True)
        self.layer_norm = nn.LayerNorm(rnn_dim)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = self.layer_norm(x)
        x = F.gelu(x)
        x, _ = self.BiGRU(x)
        x = self.dropout(x)
        return x


class SpeechRecognitionModel(nn.Module):

    def __init__(self, n_cnn_layers, n_rnn_layers, rnn_dim, n_class, n_feats, stride=2, dropout=0.1):
        super(SpeechRecognitionModel, self).__init__()
        n_feats = n_feats//2
        self.cnn = nn.Conv2d(1, 8, 3, stride=stride, padding=3//2)  # cnn for extracting heirachal features

        # n residual cnn layers with filter size of 8
        self.rescnn_layers = nn.Sequential(*[
            ResidualCNN(8, 8, kernel=3, stride=1, dropout=dropout, n_feats=n_feats)
            for _ in range(n_cnn_layers)
        ])
        self.fully_connected = nn.Linear(n_feats*8, rnn_dim)
        self.birnn_layers = nn.Sequential(*[
            BidirectionalGRU(rnn_dim=rnn_dim if i==0 else rnn_dim*2,
                             hidden_size=rnn_dim, dropout=dropout, batch_first=i==0)
            for i in range(n_rnn_layers)
        ])
        self.classifier = nn.Sequential(
            nn.Linear(rnn_dim*2, rnn_dim),  # birnn returns rnn_dim*2
            nn.GELU(),
            nn.Dropout(dropout),
            nn.Linear(rnn_dim, n_class)
        )

    def forward(self, x):
        x = self.cnn(x)
        x = self.rescnn_layers(x)
        sizes = x.size()
        x = x.view(sizes[0], sizes[1] * sizes[2], sizes[3])  # (batch, feature, time)
        x = x.transpose(1, 2)  # (batch, time, feature)
        x = self.fully_connected(x)
        x = self.birnn_layers(x)
        x = self.classifier(x)
        return x


def make_utterances(n, rng, patterns, n_frames=48):
    specs = np.zeros((n, 1, 16, n_frames), dtype=np.float32)
    labels, input_lengths, label_lengths = [], [], []
    for k in range(n):
        length = rng.randint(2, 7)
        chars = rng.randint(0, N_SYMBOLS, size=length)
        t = rng.randint(0, 4)
        for ch in chars:
            dur = rng.randint(3, 5)
            specs[k, 0, :, t:t + dur] = patterns[ch][:, None]
            t += dur + rng.randint(1, 3)
        specs[k] += rng.normal(0, 0.1, size=(1, 16, n_frames))
        labels.append(torch.tensor(chars, dtype=torch.long))
        input_lengths.append(n_frames // 2)
        label_lengths.append(length)
    return torch.from_numpy(specs), labels, input_lengths, label_lengths


def GreedyDecoder(output, blank_label=BLANK, collapse_repeated=True):
    arg_maxes = torch.argmax(output, dim=2)
    decodes = []
    for i, args in enumerate(arg_maxes):
        decode = []
        for j, index in enumerate(args):
            if index != blank_label:
                if collapse_repeated and j != 0 and index == args[j - 1]:
                    continue
                decode.append(index.item())
        decodes.append(decode)
    return decodes


def batches(data, idx, batch_size):
    specs, labels, input_lengths, label_lengths = data
    for s in range(0, len(idx), batch_size):
        b = idx[s:s + batch_size]
        yield (specs[b], nn.utils.rnn.pad_sequence([labels[i] for i in b], batch_first=True),
               [input_lengths[i] for i in b], [label_lengths[i] for i in b], [labels[i].tolist() for i in b])


def train(model, train_data, criterion, optimizer, scheduler, epoch, batch_size, g):
    model.train()
    idx = torch.randperm(len(train_data[1]), generator=g).tolist()
    total, n = 0.0, 0
    for spectrograms, labels, input_lengths, label_lengths, _ in batches(train_data, idx, batch_size):
        optimizer.zero_grad()

        output = model(spectrograms)  # (batch, time, n_class)
        output = F.log_softmax(output, dim=2)
        output = output.transpose(0, 1)  # (time, batch, n_class)

        loss = criterion(output, labels, input_lengths, label_lengths)
        loss.backward()

        optimizer.step()
        scheduler.step()
        total += loss.item()
        n += 1
    return total / n


def test(model, test_data, criterion, batch_size):
    model.eval()
    test_loss, n, correct = 0.0, 0, 0
    idx = list(range(len(test_data[1])))
    with torch.no_grad():
        for spectrograms, labels, input_lengths, label_lengths, targets in batches(test_data, idx, batch_size):
            output = model(spectrograms)  # (batch, time, n_class)
            output = F.log_softmax(output, dim=2)
            decoded = GreedyDecoder(output)
            output = output.transpose(0, 1)  # (time, batch, n_class)
            test_loss += criterion(output, labels, input_lengths, label_lengths).item()
            n += 1
            correct += sum(int(d == t) for d, t in zip(decoded, targets))
    return test_loss / n, correct / len(idx)


def main():
    torch.manual_seed(7)
    rng = np.random.RandomState(7)
    patterns = rng.uniform(-1.5, 1.5, size=(N_SYMBOLS, 16)).astype(np.float32)
    train_data = make_utterances(320, rng, patterns)
    test_data = make_utterances(96, rng, patterns)

    hparams = {"n_cnn_layers": 2, "n_rnn_layers": 2, "rnn_dim": 48, "n_class": N_SYMBOLS + 1, "n_feats": 16,
               "stride": 2, "dropout": 0.1, "learning_rate": 2e-3, "batch_size": 8, "epochs": 10}
    model = SpeechRecognitionModel(hparams['n_cnn_layers'], hparams['n_rnn_layers'], hparams['rnn_dim'],
                                   hparams['n_class'], hparams['n_feats'], hparams['stride'], hparams['dropout'])
    optimizer = optim.AdamW(model.parameters(), hparams['learning_rate'])
    criterion = nn.CTCLoss(blank=BLANK)
    steps_per_epoch = (len(train_data[1]) + hparams['batch_size'] - 1) // hparams['batch_size']
    scheduler = optim.lr_scheduler.OneCycleLR(optimizer, max_lr=hparams['learning_rate'],
                                              steps_per_epoch=steps_per_epoch, epochs=hparams['epochs'],
                                              anneal_strategy='linear')
    g = torch.Generator().manual_seed(7)
    for epoch in range(1, hparams['epochs'] + 1):
        train_loss = train(model, train_data, criterion, optimizer, scheduler, epoch, hparams['batch_size'], g)
        test_loss, acc = test(model, test_data, criterion, hparams['batch_size'])
        print('epoch %d: train loss %.4f  test loss %.4f  exact-match %.3f' % (epoch, train_loss, test_loss, acc))
    # the same 4 test utterances decoded alone and inside a batch of 16
    model.eval()
    with torch.no_grad():
        alone = model(test_data[0][:4])
        in_batch = model(test_data[0][:16])[:4]
    print('max |logit change| of utterances 0-3 between batch of 4 and batch of 16: %.4f'
          % (alone - in_batch).abs().max().item())


if __name__ == "__main__":
    main()
