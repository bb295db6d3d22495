# Source: Louis-udm/VGCN-BERT, train_vgcn_bert.py + model_vgcn_bert.py + utils.py, commit 78669af1b61c66c96537a1d99fc8defbfe7acc79
# Report: https://github.com/Louis-udm/VGCN-BERT/issues/19
# VGCN-BERT text classification: a vocabulary graph convolution over the words of each
# sentence produces gcn_embedding_dim extra "words" that are written into the token
# embeddings before a BERT encoder; class-weighted cross-entropy over the train split's class
# frequencies; weighted F1 and accuracy on the validation split after every epoch. BERT-base is
# replaced by a 1-layer encoder, the tokenizer and the pickled PMI graph by synthetic token ids
# and a co-occurrence graph built from the training sentences.
import math
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.nn.init as init

np.random.seed(44)
torch.manual_seed(44)
torch.set_num_threads(1)
device = torch.device("cpu")

gcn_embedding_dim = 4
total_train_epochs = 10
batch_size = 16
learning_rate0 = 3e-3
l2_decay = 0.01
warmup_proportion = 0.1
VOCAB, SEQ, HIDDEN = 60, 12, 32
MAX_SEQ_LENGTH = SEQ + gcn_embedding_dim + 2
PAD, CLS, SEP = 0, 1, 2


def get_class_count_and_weight(y, n_classes):
    classes_count = []
    weight = []
    for i in range(n_classes):
        count = np.sum(y == i)
        classes_count.append(count)
        weight.append(len(y) / (n_classes * count))
    return classes_count, weight


def normalize_adj(adj):
    rowsum = adj.sum(1)
    d_inv_sqrt = np.power(rowsum, -0.5).flatten()
    d_inv_sqrt[np.isinf(d_inv_sqrt)] = 0.0
    return (adj * d_inv_sqrt[None, :]).T * d_inv_sqrt[None, :]


class VocabGraphConvolution(nn.Module):
    def __init__(self, voc_dim, num_adj, hid_dim, out_dim, dropout_rate=0.2):
        super(VocabGraphConvolution, self).__init__()
        self.voc_dim = voc_dim
        self.num_adj = num_adj
        self.hid_dim = hid_dim
        self.out_dim = out_dim

        for i in range(self.num_adj):
            setattr(self, "W%d_vh" % i, nn.Parameter(torch.randn(voc_dim, hid_dim)))

        self.fc_hc = nn.Linear(hid_dim, out_dim)
        self.act_func = nn.ReLU()
        self.dropout = nn.Dropout(dropout_rate)

        self.reset_parameters()

    def reset_parameters(self):
        for n, p in self.named_parameters():
            if n.startswith("W") or n.startswith("a") or n in ("W", "a", "dense"):
                init.kaiming_uniform_(p, a=math.sqrt(5))

    def forward(self, vocab_adj_list, X_dv, add_linear_mapping_term=False):
        for i in range(self.num_adj):
            H_vh = vocab_adj_list[i].mm(getattr(self, "W%d_vh" % i))
            H_vh = self.dropout(H_vh)
            H_dh = X_dv.matmul(H_vh)

            if i == 0:
                fused_H = H_dh
            else:
                fused_H += H_dh

        out = self.fc_hc(fused_H)
        return out


class VGCNBertEmbeddings(nn.Module):
    def __init__(self, gcn_adj_dim, gcn_adj_num, gcn_embedding_dim):
        super(VGCNBertEmbeddings, self).__init__()
        self.word_embeddings = nn.Embedding(VOCAB, HIDDEN, padding_idx=0)
        self.position_embeddings = nn.Embedding(MAX_SEQ_LENGTH, HIDDEN)
        self.token_type_embeddings = nn.Embedding(2, HIDDEN)
        self.LayerNorm = nn.LayerNorm(HIDDEN, eps=1e-12)
        self.dropout = nn.Dropout(0.1)
        self.gcn_embedding_dim = gcn_embedding_dim
        self.vocab_gcn = VocabGraphConvolution(gcn_adj_dim, gcn_adj_num, 16, gcn_embedding_dim)

    def forward(self, vocab_adj_list, gcn_swop_eye, input_ids, token_type_ids=None, attention_mask=None):
        words_embeddings = self.word_embeddings(input_ids)
        vocab_input = gcn_swop_eye.matmul(words_embeddings).transpose(1, 2)

        if self.gcn_embedding_dim > 0:
            gcn_vocab_out = self.vocab_gcn(vocab_adj_list, vocab_input)

            gcn_words_embeddings = words_embeddings.clone()
            for i in range(self.gcn_embedding_dim):
                tmp_pos = (
                    attention_mask.sum(-1) - 2 - self.gcn_embedding_dim + 1 + i
                ) + torch.arange(0, input_ids.shape[0]).to(
                    input_ids.device
                ) * input_ids.shape[1]
                gcn_words_embeddings.flatten(start_dim=0, end_dim=1)[
                    tmp_pos, :
                ] = gcn_vocab_out[:, :, i]

        seq_length = input_ids.size(1)
        position_ids = torch.arange(seq_length, dtype=torch.long, device=input_ids.device)
        position_ids = position_ids.unsqueeze(0).expand_as(input_ids)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)

        position_embeddings = self.position_embeddings(position_ids)
        token_type_embeddings = self.token_type_embeddings(token_type_ids)
        embeddings = gcn_words_embeddings + position_embeddings + token_type_embeddings
        embeddings = self.LayerNorm(embeddings)
        embeddings = self.dropout(embeddings)
        return embeddings


class VGCN_Bert(nn.Module):
    def __init__(self, gcn_adj_dim, gcn_adj_num, gcn_embedding_dim, num_labels):
        super(VGCN_Bert, self).__init__()
        self.embeddings = VGCNBertEmbeddings(gcn_adj_dim, gcn_adj_num, gcn_embedding_dim)
        layer = nn.TransformerEncoderLayer(HIDDEN, 2, 64, dropout=0.1, activation="gelu", batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
        self.pooler = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.Tanh())
        self.num_labels = num_labels
        self.dropout = nn.Dropout(0.1)
        self.classifier = nn.Linear(HIDDEN, num_labels)

    def forward(self, vocab_adj_list, gcn_swop_eye, input_ids, token_type_ids=None, attention_mask=None):
        embedding_output = self.embeddings(vocab_adj_list, gcn_swop_eye, input_ids, token_type_ids, attention_mask)
        encoded = self.encoder(embedding_output, src_key_padding_mask=attention_mask == 0)
        pooled_output = self.pooler(encoded[:, 0])
        pooled_output = self.dropout(pooled_output)
        score_out = self.classifier(pooled_output)
        return score_out


def make_split(n, rng):
    """Sentences of 5-12 word ids; class 1 (the rare one) contains words from a 'negative' set."""
    neg_words = np.arange(3, 9)
    docs, labels = [], []
    for _ in range(n):
        y = int(rng.random() < 0.2)
        length = rng.integers(5, SEQ + 1)
        words = rng.integers(9, VOCAB, size=length)
        if y == 1:
            k = rng.integers(2, 5)
            words[rng.choice(length, k, replace=False)] = rng.choice(neg_words, k)
        elif rng.random() < 0.05:
            words[rng.integers(length)] = rng.choice(neg_words)
        docs.append(words)
        labels.append(y)
    return docs, np.array(labels)


def encode(docs, labels):
    """CorpusDataset.pad: [CLS] words [gcn slots] [SEP] pad, plus the token->vocab swop matrix."""
    n = len(docs)
    input_ids = torch.zeros(n, MAX_SEQ_LENGTH, dtype=torch.long)
    input_mask = torch.zeros(n, MAX_SEQ_LENGTH, dtype=torch.long)
    gcn_swop_eye = torch.zeros(n, VOCAB, MAX_SEQ_LENGTH)
    for j, words in enumerate(docs):
        ids = [CLS] + list(words) + [PAD] * gcn_embedding_dim + [SEP]
        input_ids[j, : len(ids)] = torch.tensor(ids)
        input_mask[j, : len(ids)] = 1
        for p, w in enumerate(words, start=1):
            gcn_swop_eye[j, w, p] = 1.0
    segment_ids = torch.zeros_like(input_ids)
    return input_ids, input_mask, segment_ids, torch.tensor(labels, dtype=torch.long), gcn_swop_eye


def weighted_f1(y_true, y_pred, num_classes):
    f1s, supports = [], []
    for c in range(num_classes):
        tp = np.sum((y_pred == c) & (y_true == c))
        fp = np.sum((y_pred == c) & (y_true != c))
        fn = np.sum((y_pred != c) & (y_true == c))
        prec = tp / (tp + fp) if tp + fp else 0.0
        rec = tp / (tp + fn) if tp + fn else 0.0
        f1s.append(2 * prec * rec / (prec + rec) if prec + rec else 0.0)
        supports.append(np.sum(y_true == c))
    return float(np.average(f1s, weights=supports)), f1s


def main():
    rng = np.random.default_rng(44)
    train_docs, train_y = make_split(320, rng)
    valid_docs, valid_y = make_split(200, rng)
    num_classes = 2

    cooc = np.zeros((VOCAB, VOCAB), dtype=np.float32)
    for words in train_docs:
        u = np.unique(words)
        cooc[np.ix_(u, u)] += 1.0
    gcn_vocab_adj = (cooc > 2).astype(np.float32) * cooc / cooc.max()
    np.fill_diagonal(gcn_vocab_adj, 1.0)
    gcn_adj_list = [torch.from_numpy(normalize_adj(gcn_vocab_adj).astype(np.float32)).to_sparse()]

    train_classes_num, train_classes_weight = get_class_count_and_weight(train_y, num_classes)
    loss_weight = torch.tensor(train_classes_weight).to(device)
    print("  Train_classes count:", [int(c) for c in train_classes_num])

    train_data = encode(train_docs, train_y)
    valid_data = encode(valid_docs, valid_y)
    n_train = len(train_docs)
    steps_per_epoch = math.ceil(n_train / batch_size)
    total_train_steps = steps_per_epoch * total_train_epochs

    model = VGCN_Bert(gcn_adj_dim=VOCAB, gcn_adj_num=len(gcn_adj_list),
                      gcn_embedding_dim=gcn_embedding_dim, num_labels=num_classes).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=learning_rate0, weight_decay=l2_decay)
    warmup_steps = int(warmup_proportion * total_train_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda s: (s + 1) / warmup_steps if s < warmup_steps
        else max(0.0, (total_train_steps - s) / (total_train_steps - warmup_steps)))

    train_start = time.time()
    for epoch in range(total_train_epochs):
        tr_loss = 0
        model.train()
        optimizer.zero_grad()
        for step in range(steps_per_epoch):
            sl = slice(step * batch_size, (step + 1) * batch_size)
            input_ids, input_mask, segment_ids, label_ids, gcn_swop_eye = (t[sl] for t in train_data)

            logits = model(gcn_adj_list, gcn_swop_eye, input_ids, segment_ids, input_mask)
            if loss_weight is None:
                loss = F.cross_entropy(logits, label_ids)
            else:
                loss = F.cross_entropy(
                    logits.view(-1, num_classes), label_ids, loss_weight
                )
            loss.backward()
            tr_loss += loss.item()
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()

        model.eval()
        with torch.no_grad():
            input_ids, input_mask, segment_ids, label_ids, gcn_swop_eye = valid_data
            logits = model(gcn_adj_list, gcn_swop_eye, input_ids, segment_ids, input_mask)
            predicted = logits.argmax(-1).numpy()
        f1, per_class = weighted_f1(valid_y, predicted, num_classes)
        acc = float(np.mean(predicted == valid_y))
        print(f"Epoch : {epoch}, train loss {tr_loss / steps_per_epoch:.4f}, weighted avg f1-score: {100 * f1:.3f} "
              f"Acc : {100 * acc:.3f} on valid, f1 per class {per_class[0]:.3f} {per_class[1]:.3f}")
    print(f"done in {time.time() - train_start:.1f}s")


if __name__ == "__main__":
    main()
