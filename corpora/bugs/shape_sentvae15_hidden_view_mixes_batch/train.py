# Source: timbmg/Sentence-VAE, model.py + train.py + utils.py, commit 4e2c7009ff36677c40d0b252400f68a5ea114078
# Report: https://github.com/timbmg/Sentence-VAE/issues/15
# Sentence VAE (Bowman et al. 2016) run with a 2-layer GRU encoder/decoder (-nl 2) and word
# dropout 1.0 (-wd 1.0), so that the decoder must reconstruct each sentence from its latent z.
# The Penn Treebank is replaced by synthetic sentences drawn from 40 templates over a 30-word vocabulary.
from collections import defaultdict

import numpy as np
import torch
import torch.nn as nn
import torch.nn.utils.rnn as rnn_utils
from torch.utils.data import DataLoader, Dataset


def to_var(x):
    if torch.cuda.is_available():
        x = x.cuda()
    return x


class SentenceVAE(nn.Module):
    def __init__(self, vocab_size, embedding_size, rnn_type, hidden_size, word_dropout, embedding_dropout, latent_size,
                sos_idx, eos_idx, pad_idx, unk_idx, max_sequence_length, num_layers=1, bidirectional=False):

        super().__init__()
        self.tensor = torch.cuda.FloatTensor if torch.cuda.is_available() else torch.Tensor

        self.max_sequence_length = max_sequence_length
        self.sos_idx = sos_idx
        self.eos_idx = eos_idx
        self.pad_idx = pad_idx
        self.unk_idx = unk_idx

        self.latent_size = latent_size

        self.rnn_type = rnn_type
        self.bidirectional = bidirectional
        self.num_layers = num_layers
        self.hidden_size = hidden_size

        self.embedding = nn.Embedding(vocab_size, embedding_size)
        self.word_dropout_rate = word_dropout
        self.embedding_dropout = nn.Dropout(p=embedding_dropout)

        if rnn_type == 'rnn':
            rnn = nn.RNN
        elif rnn_type == 'gru':
            rnn = nn.GRU
        else:
            raise ValueError()

        self.encoder_rnn = rnn(embedding_size, hidden_size, num_layers=num_layers, bidirectional=self.bidirectional,
                               batch_first=True)
        self.decoder_rnn = rnn(embedding_size, hidden_size, num_layers=num_layers, bidirectional=self.bidirectional,
                               batch_first=True)

        self.hidden_factor = (2 if bidirectional else 1) * num_layers

        self.hidden2mean = nn.Linear(hidden_size * self.hidden_factor, latent_size)
        self.hidden2logv = nn.Linear(hidden_size * self.hidden_factor, latent_size)
        self.latent2hidden = nn.Linear(latent_size, hidden_size * self.hidden_factor)
        self.outputs2vocab = nn.Linear(hidden_size * (2 if bidirectional else 1), vocab_size)

    def forward(self, input_sequence, length):

        batch_size = input_sequence.size(0)
        sorted_lengths, sorted_idx = torch.sort(length, descending=True)
        input_sequence = input_sequence[sorted_idx]

        # ENCODER
        input_embedding = self.embedding(input_sequence)

        packed_input = rnn_utils.pack_padded_sequence(input_embedding, sorted_lengths.data.tolist(), batch_first=True)

        _, hidden = self.encoder_rnn(packed_input)

        if self.bidirectional or self.num_layers > 1:
            # flatten hidden state
            hidden = hidden.view(batch_size, self.hidden_size*self.hidden_factor)
        else:
            hidden = hidden.squeeze()

        # REPARAMETERIZATION
        mean = self.hidden2mean(hidden)
        logv = self.hidden2logv(hidden)
        std = torch.exp(0.5 * logv)

        z = to_var(torch.randn([batch_size, self.latent_size]))
        z = z * std + mean

        # DECODER
        hidden = self.latent2hidden(z)

        if self.bidirectional or self.num_layers > 1:
            # unflatten hidden state
            hidden = hidden.view(self.hidden_factor, batch_size, self.hidden_size)
        else:
            hidden = hidden.unsqueeze(0)

        # decoder input
        if self.word_dropout_rate > 0:
            # randomly replace decoder input with <unk>
            prob = torch.rand(input_sequence.size())
            if torch.cuda.is_available():
                prob=prob.cuda()
            prob[(input_sequence.data - self.sos_idx) * (input_sequence.data - self.pad_idx) == 0] = 1
            decoder_input_sequence = input_sequence.clone()
            decoder_input_sequence[prob < self.word_dropout_rate] = self.unk_idx
            input_embedding = self.embedding(decoder_input_sequence)
        input_embedding = self.embedding_dropout(input_embedding)
        packed_input = rnn_utils.pack_padded_sequence(input_embedding, sorted_lengths.data.tolist(), batch_first=True)

        # decoder forward pass
        outputs, _ = self.decoder_rnn(packed_input, hidden)

        # process outputs
        padded_outputs = rnn_utils.pad_packed_sequence(outputs, batch_first=True)[0]
        padded_outputs = padded_outputs.contiguous()
        _,reversed_idx = torch.sort(sorted_idx)
        padded_outputs = padded_outputs[reversed_idx]
        b,s,_ = padded_outputs.size()

        # project outputs to vocab
        logp = nn.functional.log_softmax(self.outputs2vocab(padded_outputs.view(-1, padded_outputs.size(2))), dim=-1)
        logp = logp.view(b, s, self.embedding.num_embeddings)

        return logp, mean, logv, z


class PTB(Dataset):
    pad_idx, unk_idx, sos_idx, eos_idx = 0, 1, 2, 3

    def __init__(self, n, seed, max_sequence_length=12):
        rng = np.random.RandomState(0)
        templates = [rng.randint(4, 34, size=rng.randint(4, 9)) for _ in range(40)]
        rng = np.random.RandomState(seed)
        self.data = []
        for _ in range(n):
            words = templates[rng.randint(40)]
            inp = np.full(max_sequence_length, self.pad_idx)
            tgt = np.full(max_sequence_length, self.pad_idx)
            inp[0], inp[1:len(words) + 1] = self.sos_idx, words
            tgt[:len(words)], tgt[len(words)] = words, self.eos_idx
            self.data.append({'input': torch.tensor(inp), 'target': torch.tensor(tgt), 'length': len(words) + 1})

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        return self.data[idx]


def main():
    torch.manual_seed(0)
    datasets = {'train': PTB(1024, seed=1), 'valid': PTB(256, seed=2)}
    splits = ['train', 'valid']
    model = SentenceVAE(vocab_size=34, sos_idx=PTB.sos_idx, eos_idx=PTB.eos_idx, pad_idx=PTB.pad_idx,
                        unk_idx=PTB.unk_idx, max_sequence_length=12, embedding_size=32, rnn_type='gru',
                        hidden_size=64, word_dropout=1.0, embedding_dropout=0.5, latent_size=16,
                        num_layers=2, bidirectional=False)

    def kl_anneal_function(anneal_function, step, k, x0):
        if anneal_function == 'logistic':
            return float(1/(1+np.exp(-k*(step-x0))))
        elif anneal_function == 'linear':
            return min(1, step/x0)

    NLL = torch.nn.NLLLoss(ignore_index=PTB.pad_idx, reduction='sum')
    def loss_fn(logp, target, length, mean, logv, anneal_function, step, k, x0):

        # cut-off unnecessary padding from target, and flatten
        target = target[:, :torch.max(length).item()].contiguous().view(-1)
        logp = logp.view(-1, logp.size(2))

        # Negative Log Likelihood
        NLL_loss = NLL(logp, target)

        # KL Divergence
        KL_loss = -0.5 * torch.sum(1 + logv - mean.pow(2) - logv.exp())
        KL_weight = kl_anneal_function(anneal_function, step, k, x0)

        return NLL_loss, KL_loss, KL_weight

    optimizer = torch.optim.Adam(model.parameters(), lr=0.003)

    step = 0
    for epoch in range(6):

        for split in splits:

            data_loader = DataLoader(dataset=datasets[split], batch_size=32, shuffle=split=='train')

            tracker = defaultdict(list)

            # Enable/Disable Dropout
            if split == 'train':
                model.train()
            else:
                model.eval()

            for iteration, batch in enumerate(data_loader):

                batch_size = batch['input'].size(0)

                # Forward pass
                logp, mean, logv, z = model(batch['input'], batch['length'])

                # loss calculation
                NLL_loss, KL_loss, KL_weight = loss_fn(logp, batch['target'],
                    batch['length'], mean, logv, 'logistic', step, 0.0025, 2500)

                loss = (NLL_loss + KL_weight * KL_loss) / batch_size

                # backward + optimization
                if split == 'train':
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                    step += 1

                tracker['ELBO'].append(loss.item())
                tracker['NLL'].append(NLL_loss.item() / batch_size)
                target = batch['target'][:, :logp.size(1)]
                tracker['acc'].append((logp.argmax(-1) == target)[target != PTB.pad_idx].float().mean().item())

            print("%s Epoch %02d/%i, Mean ELBO %9.4f, NLL %8.4f, token acc %.3f" % (
                split.upper(), epoch, 6, np.mean(tracker['ELBO']), np.mean(tracker['NLL']), np.mean(tracker['acc'])))


if __name__ == "__main__":
    main()
