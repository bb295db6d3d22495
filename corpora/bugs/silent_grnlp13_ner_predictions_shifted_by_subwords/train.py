# Source: nlpaueb/gr-nlp-toolkit, gr_nlp_toolkit/processors/ner.py (NER.__call__), gr_nlp_toolkit/processors/tokenizer.py (create_mask_and_tokens, Tokenizer), gr_nlp_toolkit/processors/ner_model.py (NERBERTModel), gr_nlp_toolkit/token/token.py (Token), commit f1eb389a16eb672cf75bc1a6bb96845f88ea5357
# Report: https://github.com/nlpaueb/gr-nlp-toolkit/pull/13
# Greek NER pipeline: a WordPiece tokenizer splits words into sub-words ("##" continuation),
# create_mask_and_tokens marks the first sub-word of every word, a token-classification model
# tags every sub-word, and the NER processor maps the predictions of first sub-words back to
# the words. Here the tagger (NERBERTModel with BERT replaced by a small embedding + BiGRU
# encoder) is trained on first-sub-word labels of synthetic sentences, then the pipeline tags a
# test set and word-level accuracy / entity F1 are computed from the words' .ner fields.
import time
from typing import Dict, List, Tuple

import numpy
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
numpy.random.seed(0)
torch.set_num_threads(1)

I2L = ['O', 'S-PERSON', 'B-PERSON', 'E-PERSON', 'S-GPE', 'B-ORG', 'I-ORG', 'E-ORG']
L2I = {l: i for i, l in enumerate(I2L)}
CLS, SEP, PAD = 1, 2, 0


# ---------------------------------------------------------------- synthetic WordPiece vocabulary
class Vocab:
    """Words of 1-3 sub-words; each sub-word is a string, continuation pieces start with '##'."""

    def __init__(self, rng, n_words=300):
        self.pieces = ['[PAD]', '[CLS]', '[SEP]']
        self.words = {}
        for kind in ('O', 'PER', 'GPE', 'ORG'):
            ws = []
            for w in range(n_words // 4):
                n_sub = rng.choice([1, 2, 3], p=[0.45, 0.35, 0.2])
                subs = ['%s%d' % (kind.lower(), w)] + ['##%s%d_%d' % (kind.lower(), w, k) for k in range(1, n_sub)]
                ws.append(subs)
            self.words[kind] = ws
        for ws in self.words.values():
            for subs in ws:
                self.pieces.extend(subs)
        self.ids = {p: i for i, p in enumerate(self.pieces)}


def make_sentence(rng, vocab):
    words, labels = [], []
    for _ in range(rng.randint(6, 14)):
        r = rng.rand()
        if r < 0.6:
            words.append(vocab.words['O'][rng.randint(len(vocab.words['O']))]); labels.append('O')
        elif r < 0.75:
            words.append(vocab.words['GPE'][rng.randint(len(vocab.words['GPE']))]); labels.append('S-GPE')
        elif r < 0.9:
            if rng.rand() < 0.5:
                words.append(vocab.words['PER'][rng.randint(len(vocab.words['PER']))]); labels.append('S-PERSON')
            else:
                for lab in ('B-PERSON', 'E-PERSON'):
                    words.append(vocab.words['PER'][rng.randint(len(vocab.words['PER']))]); labels.append(lab)
        else:
            n = rng.randint(2, 4)
            for k in range(n):
                words.append(vocab.words['ORG'][rng.randint(len(vocab.words['ORG']))])
                labels.append('B-ORG' if k == 0 else ('E-ORG' if k == n - 1 else 'I-ORG'))
    return words, labels


# ---------------------------------------------------------------- token/token.py
class Token:
    def __init__(self, subwords: List[str]):
        self._text = ""
        self._subwords = subwords
        self._ids = []
        self._ner = None

    @property
    def subwords(self):
        return self._subwords

    @property
    def ids(self):
        return self._ids

    @property
    def ner(self):
        return self._ner

    @ner.setter
    def ner(self, value):
        self._ner = value


# ---------------------------------------------------------------- processors/tokenizer.py
def create_mask_and_tokens(input_tokens: List[str], input_ids: List[int]) -> Tuple[List[str], List[Token], Dict]:
    mask = []
    tokens = []
    subword2word = {}

    word = 0
    for j, input in enumerate(zip(input_tokens, input_ids), 1):
        t = input[0]
        i = input[1]
        # it isn't a sub-word
        if not t.startswith("##"):
            tokenObj = Token([t])
            tokenObj.ids.append(i)
            tokens.append(tokenObj)
            mask.append(True)
            word = word + 1
        else:
            # add sub-words to token
            tokenObj.subwords.append(t)
            tokenObj.ids.append(i)
            mask.append(False)
        subword2word[j] = word

    subword2word[0] = 0
    return mask, tokens, subword2word


class Document:
    def __init__(self, pieces, ids):
        self.input_ids = [CLS] + ids + [SEP]
        self.token_mask, self.tokens, self.subword2word = create_mask_and_tokens(pieces, ids)


# ---------------------------------------------------------------- processors/ner_model.py
class NERBERTModel(nn.Module):
    def __init__(self, vocab_size, model_output_size, dp, hidden=64):
        super(NERBERTModel, self).__init__()
        self._embed = nn.Embedding(vocab_size, hidden, padding_idx=PAD)
        self._encoder = nn.GRU(hidden, hidden // 2, batch_first=True, bidirectional=True)
        self._dp = nn.Dropout(dp)
        self._output_linear = nn.Linear(hidden, model_output_size)

    def forward(self, text, text_len):
        packed = nn.utils.rnn.pack_padded_sequence(self._embed(text), text_len, batch_first=True,
                                                   enforce_sorted=False)
        out, _ = self._encoder(packed)
        out, _ = nn.utils.rnn.pad_packed_sequence(out, batch_first=True, total_length=text.shape[1])
        return self._output_linear(self._dp(out))


# ---------------------------------------------------------------- processors/ner.py
class NER:
    def __init__(self, model, I2L):
        self.I2L = I2L
        self._model = model

    def predict(self, doc):
        self._model.eval()
        with torch.no_grad():
            ids = torch.tensor([doc.input_ids])
            out = torch.softmax(self._model(ids, torch.tensor([len(doc.input_ids)])), dim=-1)
        return {'outputs': [out[0].numpy()]}

    def __call__(self, doc: Document) -> Document:
        # predict
        predictions = self.predict(doc)
        predictions = numpy.argmax(predictions['outputs'][0], axis=-1)

        # map predictions -> tokens, special tokens are not included
        for mask, pred, token in zip(doc.token_mask, predictions[1: len(predictions) - 1], doc.tokens):
            if mask:
                token.ner = self.I2L[pred]

        return doc


# ---------------------------------------------------------------- training and evaluation
def encode(words, labels, vocab):
    pieces, ids, tags = [], [], []
    for subs, lab in zip(words, labels):
        for k, p in enumerate(subs):
            pieces.append(p)
            ids.append(vocab.ids[p])
            tags.append(L2I[lab] if k == 0 else -100)  # label only the first sub-word
    return pieces, ids, tags


def entities(labels):
    spans, start = set(), None
    for i, lab in enumerate(labels):
        if lab is None or lab == 'O':
            start = None
            continue
        tag, typ = lab.split('-')
        if tag == 'S':
            spans.add((i, i, typ))
        elif tag == 'B':
            start = i
        elif tag == 'E' and start is not None:
            spans.add((start, i, typ))
            start = None
    return spans


if __name__ == '__main__':
    t0 = time.time()
    rng = numpy.random.RandomState(0)
    vocab = Vocab(rng)
    train = [encode(*make_sentence(rng, vocab), vocab) for _ in range(600)]
    test_sents = [make_sentence(rng, vocab) for _ in range(200)]

    model = NERBERTModel(len(vocab.pieces), len(I2L), dp=0.1)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(6):
        model.train()
        order = rng.permutation(len(train))
        total = 0.0
        for b in range(0, len(order), 32):
            batch = [train[i] for i in order[b:b + 32]]
            lens = torch.tensor([len(x[1]) + 2 for x in batch])
            text = torch.zeros(len(batch), int(lens.max()), dtype=torch.long)
            target = torch.full((len(batch), int(lens.max())), -100, dtype=torch.long)
            for i, (_, ids, tags) in enumerate(batch):
                text[i, :len(ids) + 2] = torch.tensor([CLS] + ids + [SEP])
                target[i, 1:len(ids) + 1] = torch.tensor(tags)
            loss = F.cross_entropy(model(text, lens).transpose(1, 2), target, ignore_index=-100)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item()
        print('epoch %d train_loss %.4f' % (epoch, total / ((len(order) + 31) // 32)))

    ner = NER(model, I2L)
    correct = n_words = tp = n_pred = n_gold = 0
    for words, labels in test_sents:
        pieces, ids, _ = encode(words, labels, vocab)
        doc = ner(Document(pieces, ids))
        pred = [tok.ner for tok in doc.tokens]
        correct += sum(p == g for p, g in zip(pred, labels))
        n_words += len(labels)
        pe, ge = entities(pred), entities(labels)
        tp += len(pe & ge); n_pred += len(pe); n_gold += len(ge)
    prec, rec = tp / max(n_pred, 1), tp / max(n_gold, 1)
    f1 = 2 * prec * rec / max(prec + rec, 1e-9)
    print('test word accuracy %.4f entity precision %.4f recall %.4f F1 %.4f' % (correct / n_words, prec, rec, f1))
    print('done in %.1fs' % (time.time() - t0))
