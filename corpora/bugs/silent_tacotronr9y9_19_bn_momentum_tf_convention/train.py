# Source: r9y9/tacotron_pytorch, tacotron_pytorch/tacotron.py (BatchNormConv1d, Highway, CBHG), train.py, synthesis.py, commit f5f5e5df7911daabc49615a6e9150b9d8fbe6e99
# Report: https://github.com/r9y9/tacotron_pytorch/issues/19
# Tacotron's post-processing net: a CBHG over the mel spectrogram followed by a linear layer
# predicting the linear spectrogram, trained with the train.py loop (Noam-style lr decay, L1
# loss with extra weight on the low frequencies, gradient clipping) and evaluated in eval mode
# as synthesis.py does. The text encoder and attention decoder are removed (the postnet is fed
# the ground-truth mel, as in teacher forcing); LJSpeech is replaced by synthetic utterances of
# varying length and loudness, padded per batch as collate_fn does.
import numpy as np
import torch
from torch import nn
from torch.utils import data as data_utils

fs = 8000
num_mels = 20
num_freq = 64
batch_size = 8
initial_learning_rate = 0.002
nepochs = 12
clip_thresh = 1.0


class BatchNormConv1d(nn.Module):
    def __init__(self, in_dim, out_dim, kernel_size, stride, padding,
                 activation=None):
        super(BatchNormConv1d, self).__init__()
        self.conv1d = nn.Conv1d(in_dim, out_dim,
                                kernel_size=kernel_size,
                                stride=stride, padding=padding, bias=False)
        # Following tensorflow's default parameters
        self.bn = nn.BatchNorm1d(out_dim, momentum=0.99, eps=1e-3)
        self.activation = activation

    def forward(self, x):
        x = self.conv1d(x)
        if self.activation is not None:
            x = self.activation(x)
        return self.bn(x)


class Highway(nn.Module):
    def __init__(self, in_size, out_size):
        super(Highway, self).__init__()
        self.H = nn.Linear(in_size, out_size)
        self.H.bias.data.zero_()
        self.T = nn.Linear(in_size, out_size)
        self.T.bias.data.fill_(-1)
        self.relu = nn.ReLU()
        self.sigmoid = nn.Sigmoid()

    def forward(self, inputs):
        H = self.relu(self.H(inputs))
        T = self.sigmoid(self.T(inputs))
        return H * T + inputs * (1.0 - T)


class CBHG(nn.Module):
    def __init__(self, in_dim, K=16, projections=[128, 128]):
        super(CBHG, self).__init__()
        self.in_dim = in_dim
        self.relu = nn.ReLU()
        self.conv1d_banks = nn.ModuleList(
            [BatchNormConv1d(in_dim, in_dim, kernel_size=k, stride=1,
                             padding=k // 2, activation=self.relu)
             for k in range(1, K + 1)])
        self.max_pool1d = nn.MaxPool1d(kernel_size=2, stride=1, padding=1)

        in_sizes = [K * in_dim] + projections[:-1]
        activations = [self.relu] * (len(projections) - 1) + [None]
        self.conv1d_projections = nn.ModuleList(
            [BatchNormConv1d(in_size, out_size, kernel_size=3, stride=1,
                             padding=1, activation=ac)
             for (in_size, out_size, ac) in zip(
                 in_sizes, projections, activations)])

        self.pre_highway = nn.Linear(projections[-1], in_dim, bias=False)
        self.highways = nn.ModuleList(
            [Highway(in_dim, in_dim) for _ in range(4)])

        self.gru = nn.GRU(
            in_dim, in_dim, 1, batch_first=True, bidirectional=True)

    def forward(self, inputs, input_lengths=None):
        x = inputs
        if x.size(-1) == self.in_dim:
            x = x.transpose(1, 2)
        T = x.size(-1)
        x = torch.cat([conv1d(x)[:, :, :T] for conv1d in self.conv1d_banks], dim=1)
        assert x.size(1) == self.in_dim * len(self.conv1d_banks)
        x = self.max_pool1d(x)[:, :, :T]

        for conv1d in self.conv1d_projections:
            x = conv1d(x)

        x = x.transpose(1, 2)
        if x.size(-1) != self.in_dim:
            x = self.pre_highway(x)

        # Residual connection
        x += inputs
        for highway in self.highways:
            x = highway(x)

        if input_lengths is not None:
            x = nn.utils.rnn.pack_padded_sequence(
                x, input_lengths, batch_first=True)

        outputs, _ = self.gru(x)

        if input_lengths is not None:
            outputs, _ = nn.utils.rnn.pad_packed_sequence(
                outputs, batch_first=True)

        return outputs


class PostNetTacotron(nn.Module):
    def __init__(self, mel_dim=80, linear_dim=1025):
        super(PostNetTacotron, self).__init__()
        self.mel_dim = mel_dim
        self.linear_dim = linear_dim
        self.postnet = CBHG(mel_dim, K=8, projections=[64, mel_dim])
        self.last_linear = nn.Linear(mel_dim * 2, linear_dim)

    def forward(self, mel_outputs, input_lengths=None):
        linear_outputs = self.postnet(mel_outputs, input_lengths)
        linear_outputs = self.last_linear(linear_outputs)
        return linear_outputs


def make_utterances(n, rng, basis):
    utts = []
    for _ in range(n):
        T = rng.randint(20, 80)
        gain = rng.uniform(-1.5, 1.5)
        t = np.arange(T)[:, None]
        mel = np.sin(t / rng.uniform(3, 9) + rng.uniform(0, 6, size=num_mels)) * 0.8 + gain
        mel += 0.2 * rng.randn(T, num_mels)
        lin = np.tanh(mel @ basis) + 0.5 * np.tanh(np.roll(mel, 1, axis=0) @ basis[:, ::-1])
        utts.append((mel.astype(np.float32), lin.astype(np.float32)))
    return utts


def _pad_2d(x, max_len):
    return np.pad(x, [(0, max_len - len(x)), (0, 0)], mode="constant", constant_values=0)


def collate_fn(batch):
    input_lengths = [len(x[0]) for x in batch]
    max_target_len = np.max(input_lengths) + 1
    mel_batch = torch.FloatTensor(np.array([_pad_2d(x[0], max_target_len) for x in batch]))
    y_batch = torch.FloatTensor(np.array([_pad_2d(x[1], max_target_len) for x in batch]))
    return torch.LongTensor(input_lengths), mel_batch, y_batch


def _learning_rate_decay(init_lr, global_step):
    warmup_steps = 150.0
    step = global_step + 1.
    lr = init_lr * warmup_steps**0.5 * np.minimum(
        step * warmup_steps**-1.5, step**-0.5)
    return lr


def linear_l1(criterion, linear_outputs, y, linear_dim):
    n_priority_freq = int(3000 / (fs * 0.5) * linear_dim)
    return 0.5 * criterion(linear_outputs, y) \
        + 0.5 * criterion(linear_outputs[:, :, :n_priority_freq],
                          y[:, :, :n_priority_freq])


def evaluate(model, loader):
    # synthesis.py: model.eval(), one utterance at a time
    model.eval()
    criterion = nn.L1Loss()
    total = 0.
    with torch.no_grad():
        for input_lengths, mel, y in loader:
            linear_outputs = model(mel)
            total += linear_l1(criterion, linear_outputs, y, model.linear_dim).item()
    model.train()
    return total / len(loader)


def train(model, data_loader, valid_loader, optimizer, init_lr=0.002, nepochs=None, clip_thresh=1.0):
    model.train()
    linear_dim = model.linear_dim
    criterion = nn.L1Loss()
    global_step = 0
    global_epoch = 0
    while global_epoch < nepochs:
        running_loss = 0.
        for step, (input_lengths, mel, y) in enumerate(data_loader):
            current_lr = _learning_rate_decay(init_lr, global_step)
            for param_group in optimizer.param_groups:
                param_group['lr'] = current_lr

            optimizer.zero_grad()

            sorted_lengths, indices = torch.sort(
                input_lengths.view(-1), dim=0, descending=True)
            sorted_lengths = sorted_lengths.long().numpy()
            mel, y = mel[indices], y[indices]

            linear_outputs = model(mel)
            linear_loss = linear_l1(criterion, linear_outputs, y, linear_dim)
            loss = linear_loss

            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip_thresh)
            optimizer.step()

            global_step += 1
            running_loss += loss.item()

        bn = model.postnet.conv1d_banks[0].bn
        print("epoch {} train loss {:.4f} eval-mode valid loss {:.4f} "
              "bank-1 BN running_mean[:3] {}".format(
                  global_epoch, running_loss / len(data_loader), evaluate(model, valid_loader),
                  " ".join("{:.3f}".format(v) for v in bn.running_mean[:3].tolist())))
        global_epoch += 1


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    basis = rng.randn(num_mels, num_freq) / np.sqrt(num_mels)
    train_utts = make_utterances(100, rng, basis)
    valid_utts = make_utterances(24, rng, basis)
    data_loader = data_utils.DataLoader(
        train_utts, batch_size=batch_size, shuffle=True, collate_fn=collate_fn)
    valid_loader = data_utils.DataLoader(valid_utts, batch_size=1, shuffle=False, collate_fn=collate_fn)

    model = PostNetTacotron(mel_dim=num_mels, linear_dim=num_freq)
    optimizer = torch.optim.Adam(model.parameters(), lr=initial_learning_rate,
                                 betas=(0.9, 0.999), weight_decay=0.0)
    train(model, data_loader, valid_loader, optimizer, init_lr=initial_learning_rate,
          nepochs=nepochs, clip_thresh=clip_thresh)
