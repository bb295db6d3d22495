#!/usr/bin/env python3
# Source: fenchri/edge-oriented-graph, src/nnet/modules.py (EmbedLayer, Encoder), commit ad066448ee7027e766498a653023176343b0137e
# Report: https://github.com/fenchri/edge-oriented-graph/issues/12
# EoG's word EmbedLayer (pretrained vectors loaded via a word->id mapping, freeze option) and
# LSTM Encoder in a reduced relation classifier: a sentence is encoded, the two entity
# mentions are pooled and a pair classifier predicts the relation. The CDR/GDA documents and
# PubMed vectors are replaced by synthetic sentences and a synthetic "pretrained" vector
# file in which entity words of the same semantic type lie close together; test sentences
# use entity words never seen in training, as unseen chemicals/diseases do.
import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


class EmbedLayer(nn.Module):
    def __init__(self, num_embeddings, embedding_dim, dropout, ignore=None, freeze=False, pretrained=None, mapping=None):
        """
        Args:
            num_embeddings: (tensor) number of unique items
            embedding_dim: (int) dimensionality of vectors
            dropout: (float) dropout rate
            trainable: (bool) train or not
            pretrained: (dict) pretrained embeddings
            mapping: (dict) mapping of items to unique ids
        """
        super(EmbedLayer, self).__init__()

        self.embedding_dim = embedding_dim
        self.num_embeddings = num_embeddings
        self.freeze = freeze

        self.embedding = nn.Embedding(num_embeddings=num_embeddings,
                                      embedding_dim=embedding_dim,
                                      padding_idx=ignore)
        self.embedding.weight.requires_grad = not freeze

        if pretrained:
            self.load_pretrained(pretrained, mapping)

        self.drop = nn.Dropout(dropout)

    def load_pretrained(self, pretrained, mapping):
        """
        Args:
            weights: (dict) keys are words, values are vectors
            mapping: (dict) keys are words, values are unique ids
            trainable: (bool)

        Returns: updates the embedding matrix with pre-trained embeddings
        """
        pret_embeds = nn.init.normal_(torch.empty((self.num_embeddings, self.embedding_dim)))
        for word in mapping.keys():
            if word in pretrained:
                pret_embeds[mapping[word], :] = torch.from_numpy(pretrained[word])
            elif word.lower() in pretrained:
                pret_embeds[mapping[word], :] = torch.from_numpy(pretrained[word.lower()])
        self.embedding.from_pretrained(pret_embeds, freeze=self.freeze)

    def forward(self, xs):
        """
        Args:
            xs: (tensor) batchsize x word_ids

        Returns: (tensor) batchsize x word_ids x dimensionality
        """
        embeds = self.embedding(xs)
        if self.drop.p > 0:
            embeds = self.drop(embeds)

        return embeds


class Encoder(nn.Module):
    def __init__(self, input_size, rnn_size, num_layers, bidirectional, dropout):
        super(Encoder, self).__init__()
        self.enc = nn.LSTM(input_size=input_size, hidden_size=rnn_size, num_layers=num_layers,
                           bidirectional=bidirectional, dropout=dropout, batch_first=True)

    def forward(self, xs, xs_len):
        xs_len = xs_len.cpu()
        ys = pack_padded_sequence(xs, xs_len, batch_first=True, enforce_sorted=False)
        ys, _ = self.enc(ys)
        ys, _ = pad_packed_sequence(ys, batch_first=True, total_length=xs.size(1))
        return ys, None


class EOGLite(nn.Module):
    def __init__(self, params, pretrained, mapping):
        super().__init__()
        self.word_embed = EmbedLayer(num_embeddings=len(mapping), embedding_dim=params['word_dim'],
                                     dropout=params['drop_i'], ignore=0, freeze=params['freeze_words'],
                                     pretrained=pretrained, mapping=mapping)
        self.encoder = Encoder(input_size=params['word_dim'], rnn_size=params['lstm_dim'], num_layers=1,
                               bidirectional=True, dropout=0.0)
        self.classifier = nn.Sequential(nn.Linear(4 * params['lstm_dim'], 64), nn.ReLU(), nn.Linear(64, params['rel_size']))

    def forward(self, words, lengths, e1, e2):
        enc, _ = self.encoder(self.word_embed(words), lengths)
        idx = torch.arange(words.shape[0])
        return self.classifier(torch.cat([enc[idx, e1], enc[idx, e2]], 1))


def build_data(rng):
    types = 4
    centers = rng.randn(types, 50)
    pretrained, mapping = {}, {"<PAD>": 0}
    entity_words = {t: [] for t in range(types)}
    for t in range(types):
        for j in range(40):
            w = f"ent{t}_{j}"
            pretrained[w] = (centers[t] + 0.3 * rng.randn(50)).astype(np.float32)
            entity_words[t].append(w)
    for j in range(100):
        pretrained[f"w{j}"] = rng.randn(50).astype(np.float32)
    for w in pretrained:
        mapping[w] = len(mapping)

    def sentences(n, split):
        lo, hi = (0, 25) if split == "train" else (25, 40)
        X, L, E1, E2, Y = [], [], [], [], []
        for _ in range(n):
            t1, t2 = rng.randint(types), rng.randint(types)
            length = rng.randint(8, 15)
            toks = [mapping[f"w{rng.randint(100)}"] for _ in range(length)]
            p1, p2 = rng.choice(length, 2, replace=False)
            toks[p1] = mapping[entity_words[t1][rng.randint(lo, hi)]]
            toks[p2] = mapping[entity_words[t2][rng.randint(lo, hi)]]
            X.append(toks + [0] * (15 - length))
            L.append(length)
            E1.append(p1)
            E2.append(p2)
            Y.append(int(t1 == (t2 + 1) % types))
        return [torch.tensor(a) for a in (X, L, E1, E2, Y)]

    return pretrained, mapping, sentences(1200, "train"), sentences(600, "test")


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    pretrained, mapping, train, test = build_data(rng)
    params = {'word_dim': 50, 'lstm_dim': 48, 'drop_i': 0.2, 'freeze_words': True, 'rel_size': 2}
    model = EOGLite(params, pretrained, mapping)
    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=2e-3)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(8):
        model.train()
        perm = torch.randperm(len(train[0]))
        for i in range(0, len(perm), 32):
            b = perm[i:i + 32]
            loss = loss_fn(model(train[0][b], train[1][b], train[2][b], train[3][b]), train[4][b])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            pred = model(*test[:4]).argmax(1)
            tp = ((pred == 1) & (test[4] == 1)).sum().item()
            prec = tp / max(1, (pred == 1).sum().item())
            rec = tp / max(1, (test[4] == 1).sum().item())
            f1 = 2 * prec * rec / max(1e-8, prec + rec)
        print(f"epoch {epoch} train loss {loss.item():.4f} test P {prec:.3f} R {rec:.3f} F1 {f1:.3f}")


if __name__ == "__main__":
    main()
