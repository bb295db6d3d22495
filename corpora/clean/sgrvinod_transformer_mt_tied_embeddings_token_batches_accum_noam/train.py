# Source: sgrvinod/a-PyTorch-Tutorial-to-Machine-Translation, train.py + model.py + dataloader.py + utils.py, commit a4dd7bc5554d11ac80355241f603dcaa24bc70ae
# https://github.com/sgrvinod/a-PyTorch-Tutorial-to-Machine-Translation
#
# Transformer for translation written from scratch: pre-LayerNorm multi-head attention that detects self- vs
# cross-attention with torch.equal, key-padding masks built from lengths, a causal mask in the decoder, one
# weight tensor shared by the encoder embedding, the decoder embedding and the output projection, a fixed
# sinusoidal positional-encoding tensor (requires_grad=False, not a buffer), batches bucketed by target length
# with a token budget, gradient accumulation over batches_per_step batches ((loss / batches_per_step).backward()),
# the "Noam" learning rate written into the param groups after every optimizer step (change_lr/get_lr),
# label-smoothed cross-entropy on pack_padded_sequence'd predictions that skip <BOS>.
# Adaptation: WMT14 en-de + youtokentome BPE -> a synthetic "translation" (target = source mapped
# through a fixed token permutation) with an integer tokenizer stub exposing the same encode/subword_to_id/
# vocab_size calls (PAD 0, UNK 1, BOS 2, EOS 3); d_model 512 -> 64, 8 heads -> 4, d_queries/d_values 64 -> 16,
# d_inner 2048 -> 128, 6 layers -> 2; tokens_in_batch 2000 -> 200, batches_per_step 25000 // 2000 -> 800 // 200,
# n_steps 100000 -> 120, warmup 8000 -> 100; checkpoints, tqdm and the checkpoint resume branch removed; device cpu;
# fixed seeds; the validation loss is returned for a summary line.
import math
import random
import time
from itertools import groupby
from random import shuffle

import torch
import torch.nn.functional as F
import torch.optim
import torch.utils.data
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_sequence

device = torch.device("cpu")


class MultiHeadAttention(nn.Module):
    def __init__(self, d_model, n_heads, d_queries, d_values, dropout, in_decoder=False):
        super(MultiHeadAttention, self).__init__()
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_queries = d_queries
        self.d_values = d_values
        self.d_keys = d_queries  # size of key vectors, same as of the query vectors to allow dot-products for similarity
        self.in_decoder = in_decoder
        self.cast_queries = nn.Linear(d_model, n_heads * d_queries)
        self.cast_keys_values = nn.Linear(d_model, n_heads * (d_queries + d_values))
        self.cast_output = nn.Linear(n_heads * d_values, d_model)
        self.softmax = nn.Softmax(dim=-1)
        self.layer_norm = nn.LayerNorm(d_model)
        self.apply_dropout = nn.Dropout(dropout)

    def forward(self, query_sequences, key_value_sequences, key_value_sequence_lengths):
        batch_size = query_sequences.size(0)  # batch size (N) in number of sequences
        query_sequence_pad_length = query_sequences.size(1)
        key_value_sequence_pad_length = key_value_sequences.size(1)
        self_attention = torch.equal(key_value_sequences, query_sequences)
        input_to_add = query_sequences.clone()
        query_sequences = self.layer_norm(query_sequences)  # (N, query_sequence_pad_length, d_model)
        if self_attention:
            key_value_sequences = self.layer_norm(key_value_sequences)  # (N, key_value_sequence_pad_length, d_model)
        queries = self.cast_queries(query_sequences)  # (N, query_sequence_pad_length, n_heads * d_queries)
        keys, values = self.cast_keys_values(key_value_sequences).split(split_size=self.n_heads * self.d_keys,
                                                                        dim=-1)
        queries = queries.contiguous().view(batch_size, query_sequence_pad_length, self.n_heads,
                                            self.d_queries)  # (N, query_sequence_pad_length, n_heads, d_queries)
        keys = keys.contiguous().view(batch_size, key_value_sequence_pad_length, self.n_heads,
                                      self.d_keys)  # (N, key_value_sequence_pad_length, n_heads, d_keys)
        values = values.contiguous().view(batch_size, key_value_sequence_pad_length, self.n_heads,
                                          self.d_values)  # (N, key_value_sequence_pad_length, n_heads, d_values)
        queries = queries.permute(0, 2, 1, 3).contiguous().view(-1, query_sequence_pad_length,
                                                                self.d_queries)  # (N * n_heads, query_sequence_pad_length, d_queries)
        keys = keys.permute(0, 2, 1, 3).contiguous().view(-1, key_value_sequence_pad_length,
                                                          self.d_keys)  # (N * n_heads, key_value_sequence_pad_length, d_keys)
        values = values.permute(0, 2, 1, 3).contiguous().view(-1, key_value_sequence_pad_length,
                                                              self.d_values)  # (N * n_heads, key_value_sequence_pad_length, d_values)
        attention_weights = torch.bmm(queries, keys.permute(0, 2, 1))
        attention_weights = (1. / math.sqrt(self.d_keys)) * attention_weights
        not_pad_in_keys = torch.LongTensor(range(key_value_sequence_pad_length)).unsqueeze(0).unsqueeze(0).expand_as(
            attention_weights).to(device)  # (N * n_heads, query_sequence_pad_length, key_value_sequence_pad_length)
        not_pad_in_keys = not_pad_in_keys < key_value_sequence_lengths.repeat_interleave(self.n_heads).unsqueeze(
            1).unsqueeze(2).expand_as(attention_weights)
        attention_weights = attention_weights.masked_fill(~not_pad_in_keys, -float('inf'))
        if self.in_decoder and self_attention:
            not_future_mask = torch.ones_like(attention_weights).tril().bool().to(device)
            attention_weights = attention_weights.masked_fill(~not_future_mask, -float('inf'))
        attention_weights = self.softmax(attention_weights)
        attention_weights = self.apply_dropout(attention_weights)
        sequences = torch.bmm(attention_weights, values)  # (N * n_heads, query_sequence_pad_length, d_values)
        sequences = sequences.contiguous().view(batch_size, self.n_heads, query_sequence_pad_length,
                                                self.d_values).permute(0, 2, 1, 3)
        sequences = sequences.contiguous().view(batch_size, query_sequence_pad_length, -1)
        sequences = self.cast_output(sequences)  # (N, query_sequence_pad_length, d_model)
        sequences = self.apply_dropout(sequences) + input_to_add  # (N, query_sequence_pad_length, d_model)
        return sequences


class PositionWiseFCNetwork(nn.Module):
    def __init__(self, d_model, d_inner, dropout):
        super(PositionWiseFCNetwork, self).__init__()
        self.d_model = d_model
        self.d_inner = d_inner
        self.layer_norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, d_inner)
        self.relu = nn.ReLU()
        self.fc2 = nn.Linear(d_inner, d_model)
        self.apply_dropout = nn.Dropout(dropout)

    def forward(self, sequences):
        input_to_add = sequences.clone()  # (N, pad_length, d_model)
        sequences = self.layer_norm(sequences)  # (N, pad_length, d_model)
        sequences = self.apply_dropout(self.relu(self.fc1(sequences)))  # (N, pad_length, d_inner)
        sequences = self.fc2(sequences)  # (N, pad_length, d_model)
        sequences = self.apply_dropout(sequences) + input_to_add  # (N, pad_length, d_model)
        return sequences


class Encoder(nn.Module):
    def __init__(self, vocab_size, positional_encoding, d_model, n_heads, d_queries, d_values, d_inner, n_layers,
                 dropout):
        super(Encoder, self).__init__()
        self.vocab_size = vocab_size
        self.positional_encoding = positional_encoding
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_queries = d_queries
        self.d_values = d_values
        self.d_inner = d_inner
        self.n_layers = n_layers
        self.dropout = dropout
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.positional_encoding.requires_grad = False
        self.encoder_layers = nn.ModuleList([self.make_encoder_layer() for i in range(n_layers)])
        self.apply_dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model)

    def make_encoder_layer(self):
        encoder_layer = nn.ModuleList([MultiHeadAttention(d_model=self.d_model,
                                                          n_heads=self.n_heads,
                                                          d_queries=self.d_queries,
                                                          d_values=self.d_values,
                                                          dropout=self.dropout,
                                                          in_decoder=False),
                                       PositionWiseFCNetwork(d_model=self.d_model,
                                                             d_inner=self.d_inner,
                                                             dropout=self.dropout)])
        return encoder_layer

    def forward(self, encoder_sequences, encoder_sequence_lengths):
        pad_length = encoder_sequences.size(1)  # pad-length of this batch only, varies across batches
        encoder_sequences = self.embedding(encoder_sequences) * math.sqrt(self.d_model) + self.positional_encoding[:,
                                                                                          :pad_length, :].to(
            device)  # (N, pad_length, d_model)
        encoder_sequences = self.apply_dropout(encoder_sequences)  # (N, pad_length, d_model)
        for encoder_layer in self.encoder_layers:
            encoder_sequences = encoder_layer[0](query_sequences=encoder_sequences,
                                                 key_value_sequences=encoder_sequences,
                                                 key_value_sequence_lengths=encoder_sequence_lengths)
            encoder_sequences = encoder_layer[1](sequences=encoder_sequences)  # (N, pad_length, d_model)
        encoder_sequences = self.layer_norm(encoder_sequences)  # (N, pad_length, d_model)
        return encoder_sequences


class Decoder(nn.Module):
    def __init__(self, vocab_size, positional_encoding, d_model, n_heads, d_queries, d_values, d_inner, n_layers,
                 dropout):
        super(Decoder, self).__init__()
        self.vocab_size = vocab_size
        self.positional_encoding = positional_encoding
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_queries = d_queries
        self.d_values = d_values
        self.d_inner = d_inner
        self.n_layers = n_layers
        self.dropout = dropout
        self.embedding = nn.Embedding(vocab_size, d_model)
        self.positional_encoding.requires_grad = False
        self.decoder_layers = nn.ModuleList([self.make_decoder_layer() for i in range(n_layers)])
        self.apply_dropout = nn.Dropout(dropout)
        self.layer_norm = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, vocab_size)

    def make_decoder_layer(self):
        decoder_layer = nn.ModuleList([MultiHeadAttention(d_model=self.d_model,
                                                          n_heads=self.n_heads,
                                                          d_queries=self.d_queries,
                                                          d_values=self.d_values,
                                                          dropout=self.dropout,
                                                          in_decoder=True),
                                       MultiHeadAttention(d_model=self.d_model,
                                                          n_heads=self.n_heads,
                                                          d_queries=self.d_queries,
                                                          d_values=self.d_values,
                                                          dropout=self.dropout,
                                                          in_decoder=True),
                                       PositionWiseFCNetwork(d_model=self.d_model,
                                                             d_inner=self.d_inner,
                                                             dropout=self.dropout)])
        return decoder_layer

    def forward(self, decoder_sequences, decoder_sequence_lengths, encoder_sequences, encoder_sequence_lengths):
        pad_length = decoder_sequences.size(1)  # pad-length of this batch only, varies across batches
        decoder_sequences = self.embedding(decoder_sequences) * math.sqrt(self.d_model) + self.positional_encoding[:,
                                                                                          :pad_length, :].to(
            device)  # (N, pad_length, d_model)
        decoder_sequences = self.apply_dropout(decoder_sequences)
        for decoder_layer in self.decoder_layers:
            decoder_sequences = decoder_layer[0](query_sequences=decoder_sequences,
                                                 key_value_sequences=decoder_sequences,
                                                 key_value_sequence_lengths=decoder_sequence_lengths)
            decoder_sequences = decoder_layer[1](query_sequences=decoder_sequences,
                                                 key_value_sequences=encoder_sequences,
                                                 key_value_sequence_lengths=encoder_sequence_lengths)
            decoder_sequences = decoder_layer[2](sequences=decoder_sequences)  # (N, pad_length, d_model)
        decoder_sequences = self.layer_norm(decoder_sequences)  # (N, pad_length, d_model)
        decoder_sequences = self.fc(decoder_sequences)  # (N, pad_length, vocab_size)
        return decoder_sequences


class Transformer(nn.Module):
    def __init__(self, vocab_size, positional_encoding, d_model=512, n_heads=8, d_queries=64, d_values=64,
                 d_inner=2048, n_layers=6, dropout=0.1):
        super(Transformer, self).__init__()
        self.vocab_size = vocab_size
        self.positional_encoding = positional_encoding
        self.d_model = d_model
        self.n_heads = n_heads
        self.d_queries = d_queries
        self.d_values = d_values
        self.d_inner = d_inner
        self.n_layers = n_layers
        self.dropout = dropout
        self.encoder = Encoder(vocab_size=vocab_size, positional_encoding=positional_encoding, d_model=d_model,
                               n_heads=n_heads, d_queries=d_queries, d_values=d_values, d_inner=d_inner,
                               n_layers=n_layers, dropout=dropout)
        self.decoder = Decoder(vocab_size=vocab_size, positional_encoding=positional_encoding, d_model=d_model,
                               n_heads=n_heads, d_queries=d_queries, d_values=d_values, d_inner=d_inner,
                               n_layers=n_layers, dropout=dropout)
        self.init_weights()

    def init_weights(self):
        for p in self.parameters():
            if p.dim() > 1:
                nn.init.xavier_uniform_(p, gain=1.)
        nn.init.normal_(self.encoder.embedding.weight, mean=0., std=math.pow(self.d_model, -0.5))
        self.decoder.embedding.weight = self.encoder.embedding.weight
        self.decoder.fc.weight = self.decoder.embedding.weight
        print("Model initialized.")

    def forward(self, encoder_sequences, decoder_sequences, encoder_sequence_lengths, decoder_sequence_lengths):
        encoder_sequences = self.encoder(encoder_sequences, encoder_sequence_lengths)
        decoder_sequences = self.decoder(decoder_sequences, decoder_sequence_lengths, encoder_sequences,
                                         encoder_sequence_lengths)  # (N, decoder_sequence_pad_length, vocab_size)
        return decoder_sequences


class LabelSmoothedCE(torch.nn.Module):
    def __init__(self, eps=0.1):
        super(LabelSmoothedCE, self).__init__()
        self.eps = eps

    def forward(self, inputs, targets, lengths):
        inputs, _, _, _ = pack_padded_sequence(input=inputs,
                                               lengths=lengths,
                                               batch_first=True,
                                               enforce_sorted=False)  # (sum(lengths), vocab_size)
        targets, _, _, _ = pack_padded_sequence(input=targets,
                                                lengths=lengths,
                                                batch_first=True,
                                                enforce_sorted=False)  # (sum(lengths))
        target_vector = torch.zeros_like(inputs).scatter(dim=1, index=targets.unsqueeze(1),
                                                         value=1.).to(device)  # (sum(lengths), n_classes), one-hot
        target_vector = target_vector * (1. - self.eps) + self.eps / target_vector.size(1)
        loss = (-1 * target_vector * F.log_softmax(inputs, dim=1)).sum(dim=1)  # (sum(lengths))
        loss = torch.mean(loss)
        return loss


def get_positional_encoding(d_model, max_length=100):
    positional_encoding = torch.zeros((max_length, d_model))  # (max_length, d_model)
    for i in range(max_length):
        for j in range(d_model):
            if j % 2 == 0:
                positional_encoding[i, j] = math.sin(i / math.pow(10000, j / d_model))
            else:
                positional_encoding[i, j] = math.cos(i / math.pow(10000, (j - 1) / d_model))
    positional_encoding = positional_encoding.unsqueeze(0)  # (1, max_length, d_model)
    return positional_encoding


def get_lr(step, d_model, warmup_steps):
    lr = 2. * math.pow(d_model, -0.5) * min(math.pow(step, -0.5), step * math.pow(warmup_steps, -1.5))
    return lr


def change_lr(optimizer, new_lr):
    for param_group in optimizer.param_groups:
        param_group['lr'] = new_lr


class AverageMeter(object):
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


class IntBPE(object):
    """Stand-in for youtokentome.BPE on pre-tokenized integer 'sentences' (space-separated ids)."""

    def __init__(self, vocab_size):
        self._vocab_size = vocab_size

    def vocab_size(self):
        return self._vocab_size

    def subword_to_id(self, token):
        return {'<PAD>': 0, '<UNK>': 1, '<BOS>': 2, '<EOS>': 3}[token]

    def encode(self, sentences, output_type=None, bos=False, eos=False):
        out = []
        for s in sentences:
            ids = [int(t) for t in s.split()]
            out.append(([2] if bos else []) + ids + ([3] if eos else []))
        return out


VOCAB = 40
PERM = list(range(4, VOCAB))
random.Random(5).shuffle(PERM)


def make_corpus(n, seed):
    rng = random.Random(seed)
    src, tgt = [], []
    for _ in range(n):
        s = [rng.randrange(4, VOCAB) for _ in range(rng.randint(3, 10))]
        t = [PERM[x - 4] for x in s]
        src.append(' '.join(map(str, s)))
        tgt.append(' '.join(map(str, t)))
    return src, tgt


class SequenceLoader(object):
    def __init__(self, source_data, target_data, split, tokens_in_batch):
        self.tokens_in_batch = tokens_in_batch
        self.split = split.lower()
        self.for_training = self.split == "train"
        self.bpe_model = IntBPE(VOCAB)
        assert len(source_data) == len(target_data), "There are a different number of source or target sequences!"
        source_lengths = [len(s) for s in self.bpe_model.encode(source_data, bos=False, eos=False)]
        target_lengths = [len(t) for t in self.bpe_model.encode(target_data, bos=True, eos=True)]
        self.data = list(zip(source_data, target_data, source_lengths, target_lengths))
        if self.for_training:
            self.data.sort(key=lambda x: x[3])
        self.create_batches()

    def create_batches(self):
        if self.for_training:
            chunks = [list(g) for _, g in groupby(self.data, key=lambda x: x[3])]
            self.all_batches = list()
            for chunk in chunks:
                chunk.sort(key=lambda x: x[2])
                seqs_per_batch = self.tokens_in_batch // chunk[0][3]
                self.all_batches.extend([chunk[i: i + seqs_per_batch] for i in range(0, len(chunk), seqs_per_batch)])
            shuffle(self.all_batches)
            self.n_batches = len(self.all_batches)
            self.current_batch = -1
        else:
            self.all_batches = [[d] for d in self.data]
            self.n_batches = len(self.all_batches)
            self.current_batch = -1

    def __iter__(self):
        return self

    def __next__(self):
        self.current_batch += 1
        try:
            source_data, target_data, source_lengths, target_lengths = zip(*self.all_batches[self.current_batch])
        except IndexError:
            raise StopIteration
        source_data = self.bpe_model.encode(source_data, bos=False, eos=False)
        target_data = self.bpe_model.encode(target_data, bos=True, eos=True)
        source_data = pad_sequence(sequences=[torch.LongTensor(s) for s in source_data],
                                   batch_first=True,
                                   padding_value=self.bpe_model.subword_to_id('<PAD>'))
        target_data = pad_sequence(sequences=[torch.LongTensor(t) for t in target_data],
                                   batch_first=True,
                                   padding_value=self.bpe_model.subword_to_id('<PAD>'))
        source_lengths = torch.LongTensor(source_lengths)
        target_lengths = torch.LongTensor(target_lengths)
        return source_data, target_data, source_lengths, target_lengths


# Model parameters
d_model = 64  # size of vectors throughout the transformer model
n_heads = 4  # number of heads in the multi-head attention
d_queries = 16  # size of query vectors (and also the size of the key vectors) in the multi-head attention
d_values = 16  # size of value vectors in the multi-head attention
d_inner = 128  # an intermediate size in the position-wise FC
n_layers = 2  # number of layers in the Encoder and Decoder
dropout = 0.1  # dropout probability
positional_encoding = get_positional_encoding(d_model=d_model, max_length=160)

# Learning parameters
checkpoint = None  # path to model checkpoint, None if none
tokens_in_batch = 200  # batch size in target language tokens
batches_per_step = 800 // tokens_in_batch  # perform a training step, i.e. update parameters, once every so many batches
print_frequency = 10  # print status once every so many steps
n_steps = 120  # number of training steps
warmup_steps = 100  # number of warmup steps where learning rate is increased linearly
step = 1  # the step number, start from 1 to prevent math error in the next line
lr = get_lr(step=step, d_model=d_model, warmup_steps=warmup_steps)
start_epoch = 0  # start at this epoch
betas = (0.9, 0.98)  # beta coefficients in the Adam optimizer
epsilon = 1e-9  # epsilon term in the Adam optimizer
label_smoothing = 0.1  # label smoothing co-efficient in the Cross Entropy loss


def main():
    global checkpoint, step, start_epoch, epoch, epochs
    random.seed(0)
    torch.manual_seed(0)

    train_src, train_tgt = make_corpus(1500, seed=1)
    val_src, val_tgt = make_corpus(100, seed=2)
    train_loader = SequenceLoader(train_src, train_tgt, split="train", tokens_in_batch=tokens_in_batch)
    val_loader = SequenceLoader(val_src, val_tgt, split="val", tokens_in_batch=tokens_in_batch)

    model = Transformer(vocab_size=train_loader.bpe_model.vocab_size(),
                        positional_encoding=positional_encoding,
                        d_model=d_model,
                        n_heads=n_heads,
                        d_queries=d_queries,
                        d_values=d_values,
                        d_inner=d_inner,
                        n_layers=n_layers,
                        dropout=dropout)
    optimizer = torch.optim.Adam(params=[p for p in model.parameters() if p.requires_grad],
                                 lr=lr,
                                 betas=betas,
                                 eps=epsilon)

    criterion = LabelSmoothedCE(eps=label_smoothing)
    model = model.to(device)
    criterion = criterion.to(device)

    epochs = (n_steps // (train_loader.n_batches // batches_per_step)) + 1
    val_losses = [validate(val_loader=val_loader, model=model, criterion=criterion)]
    for epoch in range(start_epoch, epochs):
        step = epoch * train_loader.n_batches // batches_per_step
        train_loader.create_batches()
        train(train_loader=train_loader,
              model=model,
              criterion=criterion,
              optimizer=optimizer,
              epoch=epoch,
              step=step)
        val_loader.create_batches()
        val_losses.append(validate(val_loader=val_loader, model=model, criterion=criterion))
    print('[summary] val_loss (label-smoothed CE) first=%.3f last=%.3f decreased=%s' % (
        val_losses[0], val_losses[-1], val_losses[-1] < val_losses[0]))


def train(train_loader, model, criterion, optimizer, epoch, step):
    model.train()  # training mode enables dropout
    data_time = AverageMeter()  # data loading time
    step_time = AverageMeter()  # forward prop. + back prop. time
    losses = AverageMeter()  # loss
    start_data_time = time.time()
    start_step_time = time.time()
    for i, (source_sequences, target_sequences, source_sequence_lengths, target_sequence_lengths) in enumerate(
            train_loader):
        source_sequences = source_sequences.to(device)  # (N, max_source_sequence_pad_length_this_batch)
        target_sequences = target_sequences.to(device)  # (N, max_target_sequence_pad_length_this_batch)
        source_sequence_lengths = source_sequence_lengths.to(device)  # (N)
        target_sequence_lengths = target_sequence_lengths.to(device)  # (N)
        data_time.update(time.time() - start_data_time)
        predicted_sequences = model(source_sequences, target_sequences, source_sequence_lengths,
                                    target_sequence_lengths)  # (N, max_target_sequence_pad_length_this_batch, vocab_size)
        loss = criterion(inputs=predicted_sequences,
                         targets=target_sequences[:, 1:],
                         lengths=target_sequence_lengths - 1)  # scalar
        (loss / batches_per_step).backward()
        losses.update(loss.item(), (target_sequence_lengths - 1).sum().item())
        if (i + 1) % batches_per_step == 0:
            optimizer.step()
            optimizer.zero_grad()
            step += 1
            change_lr(optimizer, new_lr=get_lr(step=step, d_model=d_model, warmup_steps=warmup_steps))
            step_time.update(time.time() - start_step_time)
            if step % print_frequency == 0:
                print('Epoch {0}/{1}-----'
                      'Batch {2}/{3}-----'
                      'Step {4}/{5}-----'
                      'Loss {losses.val:.4f} ({losses.avg:.4f})-----'
                      'lr {6:.5f}'.format(epoch + 1, epochs, i + 1, train_loader.n_batches, step, n_steps,
                                          optimizer.param_groups[0]['lr'], losses=losses))
            start_step_time = time.time()
        start_data_time = time.time()


def validate(val_loader, model, criterion):
    model.eval()  # eval mode disables dropout
    with torch.no_grad():
        losses = AverageMeter()
        for i, (source_sequence, target_sequence, source_sequence_length, target_sequence_length) in enumerate(
                val_loader):
            source_sequence = source_sequence.to(device)  # (1, source_sequence_length)
            target_sequence = target_sequence.to(device)  # (1, target_sequence_length)
            source_sequence_length = source_sequence_length.to(device)  # (1)
            target_sequence_length = target_sequence_length.to(device)  # (1)
            predicted_sequence = model(source_sequence, target_sequence, source_sequence_length,
                                       target_sequence_length)  # (1, target_sequence_length, vocab_size)
            loss = criterion(inputs=predicted_sequence,
                             targets=target_sequence[:, 1:],
                             lengths=target_sequence_length - 1)  # scalar
            losses.update(loss.item(), (target_sequence_length - 1).sum().item())
        print("\nValidation loss: %.3f\n" % losses.avg)
    return losses.avg


if __name__ == '__main__':
    main()
