# Source: foamliu/Chatbot, utils.py (maskNLLLoss) + train.py (train, validate, main) + models.py + data_gen.py, commit 2f6dfb574f94f1619978c836b9b49f5cb07e3812
# Report: https://github.com/foamliu/Chatbot/issues/4
# Seq2seq chatbot: bidirectional GRU encoder, Luong dot-attention GRU decoder with a softmax
# output, per-time-step masked NLL over padded target batches (time-major), teacher forcing,
# gradient clipping, Adam for encoder and decoder, a validation loss per epoch. The Chinese
# dialogue corpus (jieba-tokenised xiaohuangji pairs) is replaced by synthetic "reply" pairs: the
# reply is the prompt reversed through a fixed token table, prompts of 1-8 tokens.
import itertools
import random
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim

torch.set_num_threads(1)
device = torch.device("cpu")

# Configure training/optimization
clip = 50.0
teacher_forcing_ratio = 1.0
learning_rate = 0.001
print_every = 10
epochs = 6
hidden_size = 64
encoder_n_layers = 2
decoder_n_layers = 2
dropout = 0.1
batch_size = 32
attn_model = 'dot'

# Default word tokens
PAD_token = 0  # Used for padding short sentences
SOS_token = 1  # Start-of-sentence token
EOS_token = 2  # End-of-sentence token
NUM_WORDS = 32


def make_samples(n, seed):
    rng = random.Random(seed)
    table = list(range(4, NUM_WORDS))
    random.Random(1).shuffle(table)
    samples = []
    for _ in range(n):
        prompt = [rng.randrange(4, NUM_WORDS) for _ in range(rng.randint(1, 8))]
        reply = [table[w - 4] for w in reversed(prompt)]
        samples.append({'input': prompt + [EOS_token], 'output': reply + [EOS_token]})
    return samples


def zeroPadding(l, fillvalue=PAD_token):
    return list(itertools.zip_longest(*l, fillvalue=fillvalue))


def binaryMatrix(l):
    m = []
    for i, seq in enumerate(l):
        m.append([])
        for token in seq:
            if token == PAD_token:
                m[i].append(0)
            else:
                m[i].append(1)
    return m


# Returns padded input sequence tensor and lengths
def inputVar(indexes_batch):
    lengths = torch.tensor([len(indexes) for indexes in indexes_batch])
    padList = zeroPadding(indexes_batch)
    padVar = torch.LongTensor(padList)
    return padVar, lengths


# Returns padded target sequence tensor, padding mask, and max target length
def outputVar(indexes_batch):
    max_target_len = max([len(indexes) for indexes in indexes_batch])
    padList = zeroPadding(indexes_batch)
    mask = binaryMatrix(padList)
    mask = torch.BoolTensor(mask)
    padVar = torch.LongTensor(padList)
    return padVar, mask, max_target_len


# Returns all items for a given batch of pairs
def batch2TrainData(pair_batch):
    pair_batch.sort(key=lambda x: len(x[0]), reverse=True)
    input_batch, output_batch = [], []
    for pair in pair_batch:
        input_batch.append(pair[0])
        output_batch.append(pair[1])
    inp, lengths = inputVar(input_batch)
    output, mask, max_target_len = outputVar(output_batch)
    return inp, lengths, output, mask, max_target_len


class ChatbotDataset:
    def __init__(self, samples):
        self.samples = samples

    def __getitem__(self, idx):
        i = idx * batch_size
        length = min(batch_size, (len(self.samples) - i))
        pair_batch = []
        for i_batch in range(length):
            sample = self.samples[i + i_batch]
            pair_batch.append((sample['input'], sample['output']))
        return batch2TrainData(pair_batch)

    def __len__(self):
        return len(self.samples) // batch_size


class EncoderRNN(nn.Module):
    def __init__(self, hidden_size, embedding, n_layers=1, dropout=0):
        super(EncoderRNN, self).__init__()
        self.n_layers = n_layers
        self.hidden_size = hidden_size
        self.embedding = embedding
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers,
                          dropout=(0 if n_layers == 1 else dropout), bidirectional=True)

    def forward(self, input_seq, input_lengths, hidden=None):
        embedded = self.embedding(input_seq)
        packed = torch.nn.utils.rnn.pack_padded_sequence(embedded, input_lengths)
        outputs, hidden = self.gru(packed, hidden)
        outputs, _ = torch.nn.utils.rnn.pad_packed_sequence(outputs)
        # Sum bidirectional GRU outputs
        outputs = outputs[:, :, :self.hidden_size] + outputs[:, :, self.hidden_size:]
        return outputs, hidden


# Luong attention layer
class Attn(torch.nn.Module):
    def __init__(self, method, hidden_size):
        super(Attn, self).__init__()
        self.method = method
        self.hidden_size = hidden_size

    def dot_score(self, hidden, encoder_output):
        return torch.sum(hidden * encoder_output, dim=2)

    def forward(self, hidden, encoder_outputs):
        attn_energies = self.dot_score(hidden, encoder_outputs)
        # Transpose max_length and batch_size dimensions
        attn_energies = attn_energies.t()
        return F.softmax(attn_energies, dim=1).unsqueeze(1)


class LuongAttnDecoderRNN(nn.Module):
    def __init__(self, attn_model, embedding, hidden_size, output_size, n_layers=1, dropout=0.1):
        super(LuongAttnDecoderRNN, self).__init__()
        self.attn_model = attn_model
        self.hidden_size = hidden_size
        self.output_size = output_size
        self.n_layers = n_layers
        self.dropout = dropout

        self.embedding = embedding
        self.embedding_dropout = nn.Dropout(dropout)
        self.gru = nn.GRU(hidden_size, hidden_size, n_layers, dropout=(0 if n_layers == 1 else dropout))
        self.concat = nn.Linear(hidden_size * 2, hidden_size)
        self.out = nn.Linear(hidden_size, output_size)
        self.attn = Attn(attn_model, hidden_size)

    def forward(self, input_step, last_hidden, encoder_outputs):
        embedded = self.embedding(input_step)
        embedded = self.embedding_dropout(embedded)
        rnn_output, hidden = self.gru(embedded, last_hidden)
        attn_weights = self.attn(rnn_output, encoder_outputs)
        context = attn_weights.bmm(encoder_outputs.transpose(0, 1))
        rnn_output = rnn_output.squeeze(0)
        context = context.squeeze(1)
        concat_input = torch.cat((rnn_output, context), 1)
        concat_output = torch.tanh(self.concat(concat_input))
        output = self.out(concat_output)
        output = F.softmax(output, dim=1)
        return output, hidden


def maskNLLLoss(inp, target, mask):
    nTotal = mask.sum()
    crossEntropy = -torch.log(torch.gather(inp, 1, target.view(-1, 1)))
    loss = crossEntropy.masked_select(mask).mean()
    loss = loss.to(device)
    return loss, nTotal.item()


def train(input_variable, lengths, target_variable, mask, max_target_len, encoder, decoder, encoder_optimizer,
          decoder_optimizer):
    encoder_optimizer.zero_grad()
    decoder_optimizer.zero_grad()

    input_variable = input_variable.to(device)
    target_variable = target_variable.to(device)
    mask = mask.to(device)

    loss = 0
    print_losses = []
    n_totals = 0

    encoder_outputs, encoder_hidden = encoder(input_variable, lengths)
    decoder_input = torch.LongTensor([[SOS_token for _ in range(batch_size)]])
    decoder_hidden = encoder_hidden[:decoder.n_layers]

    use_teacher_forcing = True if random.random() < teacher_forcing_ratio else False
    if use_teacher_forcing:
        for t in range(max_target_len):
            decoder_output, decoder_hidden = decoder(decoder_input, decoder_hidden, encoder_outputs)
            # Teacher forcing: next input is current target
            decoder_input = target_variable[t].view(1, -1)
            mask_loss, nTotal = maskNLLLoss(decoder_output, target_variable[t], mask[t])
            loss += mask_loss
            print_losses.append(mask_loss.item() * nTotal)
            n_totals += nTotal

    loss.backward()

    _ = torch.nn.utils.clip_grad_norm_(encoder.parameters(), clip)
    _ = torch.nn.utils.clip_grad_norm_(decoder.parameters(), clip)

    encoder_optimizer.step()
    decoder_optimizer.step()

    return sum(print_losses) / n_totals


def validate(val_loader, encoder, decoder):
    """Validation loss (maskNLLLoss, as in train.py) and accuracy on the reply tokens."""
    with torch.no_grad():
        encoder.eval()
        decoder.eval()
        print_losses = []
        n_totals = 0
        correct, counted = 0, 0
        for i_batch in range(val_loader.__len__()):
            input_variable, lengths, target_variable, mask, max_target_len = val_loader.__getitem__(i_batch)
            encoder_outputs, encoder_hidden = encoder(input_variable, lengths)
            decoder_input = torch.LongTensor([[SOS_token for _ in range(batch_size)]])
            decoder_hidden = encoder_hidden[:decoder.n_layers]
            for t in range(max_target_len):
                decoder_output, decoder_hidden = decoder(decoder_input, decoder_hidden, encoder_outputs)
                _, topi = decoder_output.topk(1)
                decoder_input = torch.LongTensor([[topi[i][0] for i in range(batch_size)]])
                mask_loss, nTotal = maskNLLLoss(decoder_output, target_variable[t], mask[t])
                print_losses.append(mask_loss.item() * nTotal)
                n_totals += nTotal
                correct += (topi[:, 0] == target_variable[t])[mask[t]].sum().item()
                counted += mask[t].sum().item()
    return sum(print_losses) / n_totals, correct / counted


def main():
    t0 = time.time()
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)
    train_loader = ChatbotDataset(make_samples(batch_size * 20, seed=1))
    val_loader = ChatbotDataset(make_samples(batch_size * 8, seed=2))

    embedding = nn.Embedding(NUM_WORDS, hidden_size)
    encoder = EncoderRNN(hidden_size, embedding, encoder_n_layers, dropout)
    decoder = LuongAttnDecoderRNN(attn_model, embedding, hidden_size, NUM_WORDS, decoder_n_layers, dropout)
    encoder = encoder.to(device)
    decoder = decoder.to(device)

    encoder_optimizer = optim.Adam(encoder.parameters(), lr=learning_rate)
    decoder_optimizer = optim.Adam(decoder.parameters(), lr=learning_rate)

    for epoch in range(epochs):
        encoder.train()
        decoder.train()
        losses = []
        for i in range(train_loader.__len__()):
            input_variable, lengths, target_variable, mask, max_target_len = train_loader.__getitem__(i)
            loss = train(input_variable, lengths, target_variable, mask, max_target_len, encoder, decoder,
                         encoder_optimizer, decoder_optimizer)
            losses.append(loss)
        val_loss, val_acc = validate(val_loader, encoder, decoder)
        print('Epoch: [{0}]\tLoss {1:.4f}\t * VAL LOSS - {2:.3f}\tval reply-token accuracy {3:.3f}'.format(
            epoch, float(np.mean(losses)), val_loss, val_acc))
    print('done in %.1fs' % (time.time() - t0))


if __name__ == '__main__':
    main()
