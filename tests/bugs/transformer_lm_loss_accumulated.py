"""Language modeling with nn.TransformerEncoder: sinusoidal PositionalEncoding with dropout, a
square subsequent mask from nn.Transformer.generate_square_subsequent_mask, batchify / get_batch
with (seq, batch) layout, CrossEntropyLoss over output.view(-1, ntokens), SGD lr 5 with StepLR,
clip_grad_norm_(0.5), evaluate() in eval() + no_grad with a trimmed mask on the last batch,
best model kept as a state_dict.

Source: pytorch/tutorials, beginner_source/transformer_tutorial.py,
commit e5f60c64367b2ff3c19e5b73a2c7eac4bf1269f1.
Reduced: vocab 30, d_model 16, 2 heads, 2 layers, bptt 6, batch 4, 1 epoch.

Mutation: `total_loss += loss` instead of `loss.item()`: every step's graph stays alive through the running total.
Expected: warning silent.loss_graph_kept at the `total_loss += loss` line.
"""

import copy
import math

import torch
from torch import nn
from torch.nn import TransformerEncoder, TransformerEncoderLayer


class PositionalEncoding(nn.Module):
    def __init__(self, d_model, dropout=0.1, max_len=64):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * (-math.log(10000.0) / d_model))
        pe = torch.zeros(max_len, 1, d_model)
        pe[:, 0, 0::2] = torch.sin(position * div_term)
        pe[:, 0, 1::2] = torch.cos(position * div_term)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0)]
        return self.dropout(x)


class TransformerModel(nn.Module):
    def __init__(self, ntoken, d_model, nhead, d_hid, nlayers, dropout=0.5):
        super().__init__()
        self.pos_encoder = PositionalEncoding(d_model, dropout)
        encoder_layers = TransformerEncoderLayer(d_model, nhead, d_hid, dropout)
        self.transformer_encoder = TransformerEncoder(encoder_layers, nlayers, enable_nested_tensor=False)
        self.embedding = nn.Embedding(ntoken, d_model)
        self.d_model = d_model
        self.linear = nn.Linear(d_model, ntoken)
        self.init_weights()

    def init_weights(self):
        initrange = 0.1
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.linear.bias.data.zero_()
        self.linear.weight.data.uniform_(-initrange, initrange)

    def forward(self, src, src_mask=None):
        src = self.embedding(src) * math.sqrt(self.d_model)
        src = self.pos_encoder(src)
        if src_mask is None:
            src_mask = nn.Transformer.generate_square_subsequent_mask(len(src))
        output = self.transformer_encoder(src, src_mask)
        return self.linear(output)


def batchify(data, bsz):
    seq_len = data.size(0) // bsz
    data = data[:seq_len * bsz]
    return data.view(bsz, seq_len).t().contiguous()


bptt, ntokens = 6, 30


def get_batch(source, i):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].reshape(-1)
    return data, target


def build():
    torch.manual_seed(0)
    train_data = batchify(torch.randint(0, ntokens, (100,)), 4)
    val_data = batchify(torch.randint(0, ntokens, (40,)), 2)
    model = TransformerModel(ntokens, 16, 2, 32, 2, 0.2)
    criterion = nn.CrossEntropyLoss()
    lr = 5.0
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.95)

    def train_epoch():
        model.train()
        total_loss = 0.0
        src_mask = nn.Transformer.generate_square_subsequent_mask(bptt)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, bptt)):
            data, targets = get_batch(train_data, i)
            seq_len = data.size(0)
            if seq_len != bptt:
                src_mask = src_mask[:seq_len, :seq_len]
            output = model(data, src_mask)
            loss = criterion(output.view(-1, ntokens), targets)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
            optimizer.step()
            total_loss += loss  # <- bug

    def evaluate(eval_model, data_source):
        eval_model.eval()
        total_loss = 0.0
        src_mask = nn.Transformer.generate_square_subsequent_mask(bptt)
        with torch.no_grad():
            for i in range(0, data_source.size(0) - 1, bptt):
                data, targets = get_batch(data_source, i)
                seq_len = data.size(0)
                if seq_len != bptt:
                    src_mask = src_mask[:seq_len, :seq_len]
                output = eval_model(data, src_mask)
                output_flat = output.view(-1, ntokens)
                total_loss += seq_len * criterion(output_flat, targets).item()
        return total_loss / (len(data_source) - 1)

    def train():
        best_val_loss, best_model = float("inf"), None
        for epoch in range(1, 2):
            train_epoch()
            val_loss = evaluate(model, val_data)
            if val_loss < best_val_loss:
                best_val_loss = val_loss
                best_model = copy.deepcopy(model)
            scheduler.step()
        return best_model

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
