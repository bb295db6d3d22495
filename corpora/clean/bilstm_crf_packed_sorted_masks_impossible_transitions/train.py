# Source: jidasheng/bi-lstm-crf, bi_lstm_crf/app/train.py + bi_lstm_crf/model/model.py + bi_lstm_crf/model/crf.py, commit 2009d03215391e7867f8b91503894134770bd6bd
# https://github.com/jidasheng/bi-lstm-crf
#
# BiLSTM-CRF sequence tagger: masks from token id > 0, the batch is sorted by length for
# pack_padded_sequence and un-sorted after pad_packed_sequence (which trims to the longest sentence, so
# masks/tags are sliced to [:, :L]); the CRF has two extra START/STOP tags whose forbidden transitions are
# set to -1e4 through .data at init (and then trained like the rest); the NLL is the forward-algorithm
# partition minus the gold path score, with masked steps carrying the previous score; model.zero_grad();
# evaluation loss weighted by batch sizes under no_grad; Viterbi decoding with Python back-pointers.
# Adaptation: the corpus directory / Preprocessor are replaced by a synthetic BIO-tagged corpus
# (ids 1..60, pad 0; PER and LOC entities of 1-3 tokens drawn from their own word ranges, entity words
# also appear as plain O words after the word 'the' so context matters), 1500 sentences of 4-20 tokens
# split 60/20/20 like --val_split/--test_split 0.2; --num_epoch 20 -> 6, --batch_size 1000 -> 64,
# embedding 100 -> 32, hidden 128 -> 64, lr 1e-3 -> 1e-2; loss.csv / model saving go to a temp dir; tqdm
# disabled; a token accuracy of the Viterbi paths on the test split is printed at the end.
import os
import tempfile
from os.path import exists, join

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.optim as optim
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence
from torch.utils.data import DataLoader, TensorDataset
from tqdm import tqdm


# ---------------- bi_lstm_crf/model/crf.py ----------------


def log_sum_exp(x):
    """calculate log(sum(exp(x))) = max(x) + log(sum(exp(x - max(x))))
    """
    max_score = x.max(-1)[0]
    return max_score + (x - max_score.unsqueeze(-1)).exp().sum(-1).log()


IMPOSSIBLE = -1e4


class CRF(nn.Module):
    """General CRF module.
    The CRF module contain a inner Linear Layer which transform the input from features space to tag space.

    :param in_features: number of features for the input
    :param num_tag: number of tags. DO NOT include START, STOP tags, they are included internal.
    """

    def __init__(self, in_features, num_tags):
        super(CRF, self).__init__()

        self.num_tags = num_tags + 2
        self.start_idx = self.num_tags - 2
        self.stop_idx = self.num_tags - 1

        self.fc = nn.Linear(in_features, self.num_tags)

        # transition factor, Tij mean transition from j to i
        self.transitions = nn.Parameter(torch.randn(self.num_tags, self.num_tags), requires_grad=True)
        self.transitions.data[self.start_idx, :] = IMPOSSIBLE
        self.transitions.data[:, self.stop_idx] = IMPOSSIBLE

    def forward(self, features, masks):
        """decode tags

        :param features: [B, L, C], batch of unary scores
        :param masks: [B, L] masks
        :return: (best_score, best_paths)
            best_score: [B]
            best_paths: [B, L]
        """
        features = self.fc(features)
        return self.__viterbi_decode(features, masks[:, :features.size(1)].float())

    def loss(self, features, ys, masks):
        """negative log likelihood loss
        B: batch size, L: sequence length, D: dimension

        :param features: [B, L, D]
        :param ys: tags, [B, L]
        :param masks: masks for padding, [B, L]
        :return: loss
        """
        features = self.fc(features)

        L = features.size(1)
        masks_ = masks[:, :L].float()

        forward_score = self.__forward_algorithm(features, masks_)
        gold_score = self.__score_sentence(features, ys[:, :L].long(), masks_)
        loss = (forward_score - gold_score).mean()
        return loss

    def __score_sentence(self, features, tags, masks):
        """Gives the score of a provided tag sequence

        :param features: [B, L, C]
        :param tags: [B, L]
        :param masks: [B, L]
        :return: [B] score in the log space
        """
        B, L, C = features.shape

        # emission score
        emit_scores = features.gather(dim=2, index=tags.unsqueeze(-1)).squeeze(-1)

        # transition score
        start_tag = torch.full((B, 1), self.start_idx, dtype=torch.long, device=tags.device)
        tags = torch.cat([start_tag, tags], dim=1)  # [B, L+1]
        trans_scores = self.transitions[tags[:, 1:], tags[:, :-1]]

        # last transition score to STOP tag
        last_tag = tags.gather(dim=1, index=masks.sum(1).long().unsqueeze(1)).squeeze(1)  # [B]
        last_score = self.transitions[self.stop_idx, last_tag]

        score = ((trans_scores + emit_scores) * masks).sum(1) + last_score
        return score

    def __viterbi_decode(self, features, masks):
        """decode to tags using viterbi algorithm

        :param features: [B, L, C], batch of unary scores
        :param masks: [B, L] masks
        :return: (best_score, best_paths)
            best_score: [B]
            best_paths: [B, L]
        """
        B, L, C = features.shape

        bps = torch.zeros(B, L, C, dtype=torch.long, device=features.device)  # back pointers

        # Initialize the viterbi variables in log space
        max_score = torch.full((B, C), IMPOSSIBLE, device=features.device)  # [B, C]
        max_score[:, self.start_idx] = 0

        for t in range(L):
            mask_t = masks[:, t].unsqueeze(1)  # [B, 1]
            emit_score_t = features[:, t]  # [B, C]

            # [B, 1, C] + [C, C]
            acc_score_t = max_score.unsqueeze(1) + self.transitions  # [B, C, C]
            acc_score_t, bps[:, t, :] = acc_score_t.max(dim=-1)
            acc_score_t += emit_score_t
            max_score = acc_score_t * mask_t + max_score * (1 - mask_t)  # max_score or acc_score_t

        # Transition to STOP_TAG
        max_score += self.transitions[self.stop_idx]
        best_score, best_tag = max_score.max(dim=-1)

        # Follow the back pointers to decode the best path.
        best_paths = []
        bps = bps.cpu().numpy()
        for b in range(B):
            best_tag_b = best_tag[b].item()
            seq_len = int(masks[b, :].sum().item())

            best_path = [best_tag_b]
            for bps_t in reversed(bps[b, :seq_len]):
                best_tag_b = bps_t[best_tag_b]
                best_path.append(best_tag_b)
            # drop the last tag and reverse the left
            best_paths.append(best_path[-2::-1])

        return best_score, best_paths

    def __forward_algorithm(self, features, masks):
        """calculate the partition function with forward algorithm.
        TRICK: log_sum_exp([x1, x2, x3, x4, ...]) = log_sum_exp([log_sum_exp([x1, x2]), log_sum_exp([x3, x4]), ...])

        :param features: features. [B, L, C]
        :param masks: [B, L] masks
        :return:    [B], score in the log space
        """
        B, L, C = features.shape

        scores = torch.full((B, C), IMPOSSIBLE, device=features.device)  # [B, C]
        scores[:, self.start_idx] = 0.
        trans = self.transitions.unsqueeze(0)  # [1, C, C]

        # Iterate through the sentence
        for t in range(L):
            emit_score_t = features[:, t].unsqueeze(2)  # [B, C, 1]
            score_t = scores.unsqueeze(1) + trans + emit_score_t  # [B, 1, C] + [1, C, C] + [B, C, 1] => [B, C, C]
            score_t = log_sum_exp(score_t)  # [B, C]

            mask_t = masks[:, t].unsqueeze(1)  # [B, 1]
            scores = score_t * mask_t + scores * (1 - mask_t)
        scores = log_sum_exp(scores + self.transitions[self.stop_idx])
        return scores


# ---------------- bi_lstm_crf/model/model.py ----------------

class BiRnnCrf(nn.Module):
    def __init__(self, vocab_size, tagset_size, embedding_dim, hidden_dim, num_rnn_layers=1, rnn="lstm"):
        super(BiRnnCrf, self).__init__()
        self.embedding_dim = embedding_dim
        self.hidden_dim = hidden_dim
        self.vocab_size = vocab_size
        self.tagset_size = tagset_size

        self.embedding = nn.Embedding(vocab_size, embedding_dim)
        RNN = nn.LSTM if rnn == "lstm" else nn.GRU
        self.rnn = RNN(embedding_dim, hidden_dim // 2, num_layers=num_rnn_layers,
                       bidirectional=True, batch_first=True)
        self.crf = CRF(hidden_dim, self.tagset_size)

    def __build_features(self, sentences):
        masks = sentences.gt(0)
        embeds = self.embedding(sentences.long())

        seq_length = masks.sum(1)
        sorted_seq_length, perm_idx = seq_length.sort(descending=True)
        embeds = embeds[perm_idx, :]

        pack_sequence = pack_padded_sequence(embeds, lengths=sorted_seq_length, batch_first=True)
        packed_output, _ = self.rnn(pack_sequence)
        lstm_out, _ = pad_packed_sequence(packed_output, batch_first=True)
        _, unperm_idx = perm_idx.sort()
        lstm_out = lstm_out[unperm_idx, :]

        return lstm_out, masks

    def loss(self, xs, tags):
        features, masks = self.__build_features(xs)
        loss = self.crf.loss(features, tags, masks=masks)
        return loss

    def forward(self, xs):
        # Get the emission scores from the BiLSTM
        features, masks = self.__build_features(xs)
        scores, tag_seq = self.crf(features, masks)
        return scores, tag_seq


# ---------------- synthetic stand-in for the Preprocessor / corpus ----------------
TAGS = ['O', 'B-PER', 'I-PER', 'B-LOC', 'I-LOC']


def load_dataset(val_split, test_split, max_seq_len, n=1500, seed=0):
    rng = np.random.RandomState(seed)
    xs = np.zeros((n, max_seq_len), dtype=np.int64)
    ys = np.zeros((n, max_seq_len), dtype=np.int64)
    for i in range(n):
        words, tags = [], []
        length = rng.randint(4, max_seq_len + 1)
        while len(words) < length:
            r = rng.rand()
            if r < 0.15:
                k = rng.randint(1, 4)
                words += list(rng.randint(11, 26, size=k)); tags += [1] + [2] * (k - 1)
            elif r < 0.3:
                k = rng.randint(1, 4)
                words += list(rng.randint(26, 41, size=k)); tags += [3] + [4] * (k - 1)
            elif r < 0.4:
                words += [1, rng.randint(11, 41)]; tags += [0, 0]
            else:
                words.append(rng.randint(41, 61)); tags.append(0)
        words, tags = words[:length], tags[:length]
        if tags[0] in (2, 4):
            tags[0] -= 1
        xs[i, :length], ys[i, :length] = words, tags
    x, y = torch.from_numpy(xs), torch.from_numpy(ys)
    n_val, n_test = int(n * val_split), int(n * test_split)
    n_train = n - n_val - n_test
    return ((x[:n_train], y[:n_train]), (x[n_train:n_train + n_val], y[n_train:n_train + n_val]),
            (x[n_train + n_val:], y[n_train + n_val:]))


# ---------------- bi_lstm_crf/app/train.py ----------------
def __eval_model(model, device, dataloader, desc):
    model.eval()
    with torch.no_grad():
        # eval
        losses, nums = zip(*[
            (model.loss(xb.to(device), yb.to(device)), len(xb))
            for xb, yb in tqdm(dataloader, desc=desc, disable=True)])
        return np.sum(np.multiply(losses, nums)) / np.sum(nums)


def __save_loss(losses, file_path):
    pd.DataFrame(data=losses, columns=["epoch", "batch", "train_loss", "val_loss"]).to_csv(file_path, index=False)


def __save_model(model_dir, model):
    model_path = join(model_dir, "model.pth")
    torch.save(model.state_dict(), model_path)
    print("save model => {}".format(model_path))


def train(args):
    model_dir = args.model_dir
    if not exists(model_dir):
        os.mkdir(model_dir)

    model = BiRnnCrf(61, len(TAGS), args.embedding_dim, args.hidden_dim, args.num_rnn_layers, args.rnn_type)

    # loss
    loss_path = join(args.model_dir, "loss.csv")
    losses = []

    # datasets
    (x_train, y_train), (x_val, y_val), (x_test, y_test) = load_dataset(
        args.val_split, args.test_split, max_seq_len=args.max_seq_len)

    train_dl = DataLoader(TensorDataset(x_train, y_train), batch_size=args.batch_size, shuffle=True)
    valid_dl = DataLoader(TensorDataset(x_val, y_val), batch_size=args.batch_size * 2)
    test_dl = DataLoader(TensorDataset(x_test, y_test), batch_size=args.batch_size * 2)

    optimizer = optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)

    device = torch.device("cpu")
    model.to(device)

    val_loss = 0
    best_val_loss = 1e4
    for epoch in range(args.num_epoch):
        # train
        model.train()
        bar = tqdm(train_dl, disable=True)
        for bi, (xb, yb) in enumerate(bar):
            model.zero_grad()

            loss = model.loss(xb.to(device), yb.to(device))
            loss.backward()
            optimizer.step()
            bar.set_description("{:2d}/{} loss: {:5.2f}, val_loss: {:5.2f}".format(
                epoch+1, args.num_epoch, loss, val_loss))
            losses.append([epoch, bi, loss.item(), np.nan])

        # evaluation
        val_loss = __eval_model(model, device, dataloader=valid_dl, desc="eval").item()
        print("{:2d}/{} loss: {:5.2f}, val_loss: {:5.2f}".format(epoch + 1, args.num_epoch, loss.item(), val_loss))
        # save losses
        losses[-1][-1] = val_loss
        __save_loss(losses, loss_path)

        # save model
        if not args.save_best_val_model or val_loss < best_val_loss:
            best_val_loss = val_loss
            __save_model(args.model_dir, model)
            print("save model(epoch: {}) => {}".format(epoch, loss_path))

    # test
    test_loss = __eval_model(model, device, dataloader=test_dl, desc="test").item()
    last_loss = losses[-1][:]
    last_loss[-1] = test_loss
    losses.append(last_loss)
    __save_loss(losses, loss_path)
    print("training completed. test loss: {:.2f}".format(test_loss))

    with torch.no_grad():
        _, paths = model(x_test)
    correct = total = 0
    for path, y, x in zip(paths, y_test, x_test):
        n = int((x > 0).sum())
        correct += sum(int(p == t) for p, t in zip(path, y[:n].tolist()))
        total += n
    print("test token accuracy of the Viterbi paths: {:.3f}".format(correct / total))


def main():
    import argparse
    torch.manual_seed(0)
    parser = argparse.ArgumentParser()
    parser.add_argument('--model_dir', type=str, default=os.path.join(tempfile.mkdtemp(), "model_dir"))
    parser.add_argument('--num_epoch', type=int, default=6, help="number of epoch to train")
    parser.add_argument('--lr', type=float, default=1e-2, help='learning rate')
    parser.add_argument('--weight_decay', type=float, default=0., help='the L2 normalization parameter')
    parser.add_argument('--batch_size', type=int, default=64, help='batch size for training')
    parser.add_argument('--max_seq_len', type=int, default=20, help='max sequence length within training')
    parser.add_argument('--val_split', type=float, default=0.2, help='the split for the validation dataset')
    parser.add_argument('--test_split', type=float, default=0.2, help='the split for the testing dataset')
    parser.add_argument('--save_best_val_model', action="store_true",
                        help="save the model whose validation score is smallest")
    parser.add_argument('--embedding_dim', type=int, default=32, help='the dimension of the embedding layer')
    parser.add_argument('--hidden_dim', type=int, default=64, help='the dimension of the RNN hidden state')
    parser.add_argument('--num_rnn_layers', type=int, default=1, help='the number of RNN layers')
    parser.add_argument('--rnn_type', type=str, default="lstm", help='RNN type, choice: "lstm", "gru"')
    args = parser.parse_args([])
    train(args)


if __name__ == "__main__":
    main()
