"""Word-level LSTM language model: batchify, truncated BPTT with repackage_hidden (detach), dropout
and tied encoder/decoder weights, clip_grad_norm_, and the script's default update without an
optimizer (p.data.add_(p.grad, alpha=-lr) after model.zero_grad()), evaluation under eval() +
no_grad with the hidden state carried.

Source: pytorch/examples, word_language_model/main.py and model.py (RNNModel), commit 77f55b912142e11fcfdf5b530231fb9c52f181e8.
Reduced: vocab 30, emsize = nhid = 16, bptt 5, batch 4, one epoch over 40 tokens per column (this copy: 20).

Mutation: `repackage_hidden` dropped and the resulting 'backward through the graph a second time' error silenced with `loss.backward(retain_graph=True)`: every backward runs through all earlier batches.
Expected: warning silent.loss_graph_kept (graph kept across steps through the hidden state), at `output, hidden = model(data, hidden)`.
"""

import math

import torch
import torch.nn as nn


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=True):
        super(RNNModel, self).__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.LSTM(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.nhid, self.nlayers = nhid, nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return torch.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return (weight.new_zeros(self.nlayers, bsz, self.nhid), weight.new_zeros(self.nlayers, bsz, self.nhid))


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def repackage_hidden(h):
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


bptt, ntokens = 5, 30


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def build():
    torch.manual_seed(0)
    train_data = batchify(torch.randint(0, ntokens, (80,)), 4)
    val_data = batchify(torch.randint(0, ntokens, (60,)), 2)
    model = RNNModel(ntokens, 16, 16, 2, 0.2)
    criterion = nn.NLLLoss()
    lr, clip = 20.0, 0.25

    def evaluate(data_source):
        model.eval()
        total_loss = 0.0
        hidden = model.init_hidden(2)
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, bptt):
                data, targets = get_batch(data_source, i)
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
                total_loss += len(data) * criterion(output, targets).item()
        return total_loss / (len(data_source) - 1)

    def train():
        model.train()
        total_loss = 0.0
        hidden = model.init_hidden(4)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
            data, targets = get_batch(train_data, i)
            model.zero_grad()
            output, hidden = model(data, hidden)  # <- bug
            loss = criterion(output, targets)
            loss.backward(retain_graph=True)
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            for p in model.parameters():
                p.data.add_(p.grad, alpha=-lr)
            total_loss += loss.item()
        val_loss = evaluate(val_data)
        return math.exp(val_loss)

    return [model], [], train


if __name__ == "__main__":
    build()[2]()
