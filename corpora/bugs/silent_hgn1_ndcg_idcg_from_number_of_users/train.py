# Source: allenjack/HGN, run.py, eval_metrics.py, interactions.py, model/gating_network.py, data/Dataset.py, commit 6314fd94aa9a8a2fa2a66773816c4ec8d0140435
# Report: https://github.com/allenjack/HGN/pull/1
# HGN (Hierarchical Gating Networks) for sequential recommendation: user and item embeddings,
# feature gating and instance gating over the last L items, BPR loss against sampled negatives,
# then top-k evaluation (precision, recall, MAP, NDCG at 5/10/15/20) on each user's held-out
# last 20% of items. Amazon CDs is replaced by synthetic users who walk through one genre of
# items; the sparse interaction matrix by a dense numpy one.
import math
from time import time

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(1234)
np.random.seed(1234)
torch.set_num_threads(1)
device = torch.device('cpu')


# ---------------------------------------------------------------- eval_metrics.py
def precision_at_k(actual, predicted, topk):
    sum_precision = 0.0
    num_users = len(predicted)
    for i in range(num_users):
        act_set = set(actual[i])
        pred_set = set(predicted[i][:topk])
        sum_precision += len(act_set & pred_set) / float(topk)

    return sum_precision / num_users


def recall_at_k(actual, predicted, topk):
    sum_recall = 0.0
    num_users = len(predicted)
    true_users = 0
    for i in range(num_users):
        act_set = set(actual[i])
        pred_set = set(predicted[i][:topk])
        if len(act_set) != 0:
            sum_recall += len(act_set & pred_set) / float(len(act_set))
            true_users += 1
    return sum_recall / true_users


def apk(actual, predicted, k=10):
    if len(predicted) > k:
        predicted = predicted[:k]

    score = 0.0
    num_hits = 0.0

    for i, p in enumerate(predicted):
        if p in actual and p not in predicted[:i]:
            num_hits += 1.0
            score += num_hits / (i + 1.0)

    if not actual:
        return 0.0

    return score / min(len(actual), k)


def mapk(actual, predicted, k=10):
    return np.mean([apk(a, p, k) for a, p in zip(actual, predicted)])


def ndcg_k(actual, predicted, topk):
    k = min(topk, len(actual))
    idcg = idcg_k(k)
    res = 0
    for user_id in range(len(actual)):
        dcg_k = sum([int(predicted[user_id][j] in set(actual[user_id])) / math.log(j + 2, 2) for j in range(k)])
        res += dcg_k / idcg
    return res / float(len(actual))


# Calculates the ideal discounted cumulative gain at k
def idcg_k(k):
    res = sum([1.0 / math.log(i + 2, 2) for i in range(k)])
    if not res:
        return 1.0
    else:
        return res


# ---------------------------------------------------------------- data/Dataset.py
def split_data_sequentially(user_records, test_radio=0.2):
    train_set = []
    test_set = []

    for item_list in user_records:
        len_list = len(item_list)
        num_test_samples = int(math.ceil(len_list * test_radio))
        train_sample = []
        test_sample = []
        for i in range(len_list - num_test_samples, len_list):
            test_sample.append(item_list[i])

        for place in item_list:
            if place not in set(test_sample):
                train_sample.append(place)

        train_set.append(train_sample)
        test_set.append(test_sample)

    return train_set, test_set


def synthetic_amazon(num_users=400, num_genres=6, genre_size=40, seed=0):
    """Each user walks forward through one genre: next item = a few steps after the last."""
    rng = np.random.RandomState(seed)
    records = []
    for _ in range(num_users):
        g = rng.randint(num_genres)
        pos = rng.randint(genre_size)
        seq = []
        for _ in range(rng.randint(8, 16)):
            seq.append(g * genre_size + pos)
            pos = (pos + rng.randint(1, 5)) % genre_size
        # keep the first visit of each item (sequences of distinct items)
        seen, uniq = set(), []
        for it in seq:
            if it not in seen:
                seen.add(it)
                uniq.append(it)
        records.append([it + 1 for it in uniq])  # index_shift=1, item 0 pads sequences
    return records, num_users, num_genres * genre_size + 1


# ---------------------------------------------------------------- interactions.py
class Interactions(object):
    def __init__(self, user_item_sequence, num_users, num_items):
        user_ids, item_ids = [], []
        for uid, item_seq in enumerate(user_item_sequence):
            for iid in item_seq:
                user_ids.append(uid)
                item_ids.append(iid)

        self.num_users = num_users
        self.num_items = num_items
        self.user_ids = np.asarray(user_ids)
        self.item_ids = np.asarray(item_ids)
        self.sequences = None
        self.test_sequences = None

    def __len__(self):
        return len(self.user_ids)

    def tocsr(self):
        mat = np.zeros((self.num_users, self.num_items))
        mat[self.user_ids, self.item_ids] = 1.0
        return mat

    def to_sequence(self, sequence_length=5, target_length=1):
        max_sequence_length = sequence_length + target_length

        sort_indices = np.lexsort((self.user_ids,))
        user_ids = self.user_ids[sort_indices]
        item_ids = self.item_ids[sort_indices]

        user_ids, indices, counts = np.unique(user_ids, return_index=True, return_counts=True)

        num_subsequences = sum([c - max_sequence_length + 1 if c >= max_sequence_length else 1 for c in counts])

        sequences = np.zeros((num_subsequences, sequence_length), dtype=np.int64)
        sequences_targets = np.zeros((num_subsequences, target_length), dtype=np.int64)
        sequence_users = np.empty(num_subsequences, dtype=np.int64)

        test_sequences = np.zeros((self.num_users, sequence_length), dtype=np.int64)
        test_users = np.empty(self.num_users, dtype=np.int64)

        _uid = None
        for i, (uid, item_seq) in enumerate(_generate_sequences(user_ids, item_ids, indices, max_sequence_length)):
            if uid != _uid:
                test_sequences[uid][:] = item_seq[-sequence_length:]
                test_users[uid] = uid
                _uid = uid
            sequences_targets[i][:] = item_seq[-target_length:]
            sequences[i][:] = item_seq[:sequence_length]
            sequence_users[i] = uid

        self.sequences = SequenceInteractions(sequence_users, sequences, sequences_targets)
        self.test_sequences = SequenceInteractions(test_users, test_sequences)


class SequenceInteractions(object):
    def __init__(self, user_ids, sequences, targets=None):
        self.user_ids = user_ids
        self.sequences = sequences
        self.targets = targets


def _sliding_window(tensor, window_size, step_size=1):
    if len(tensor) - window_size >= 0:
        for i in range(len(tensor), 0, -step_size):
            if i - window_size >= 0:
                yield tensor[i - window_size:i]
            else:
                break
    else:
        num_paddings = window_size - len(tensor)
        yield np.pad(tensor, (num_paddings, 0), 'constant')


def _generate_sequences(user_ids, item_ids, indices, max_sequence_length):
    for i in range(len(indices)):
        start_idx = indices[i]
        if i >= len(indices) - 1:
            stop_idx = None
        else:
            stop_idx = indices[i + 1]
        for seq in _sliding_window(item_ids[start_idx:stop_idx], max_sequence_length):
            yield (user_ids[i], seq)


# ---------------------------------------------------------------- model/gating_network.py
class HGN(nn.Module):
    def __init__(self, num_users, num_items, model_args, device):
        super(HGN, self).__init__()
        self.args = model_args
        L = self.args['L']
        dims = self.args['d']

        self.user_embeddings = nn.Embedding(num_users, dims).to(device)
        self.item_embeddings = nn.Embedding(num_items, dims).to(device)

        self.feature_gate_item = nn.Linear(dims, dims).to(device)
        self.feature_gate_user = nn.Linear(dims, dims).to(device)

        self.instance_gate_item = nn.Parameter(torch.nn.init.xavier_uniform_(torch.zeros(dims, 1)))
        self.instance_gate_user = nn.Parameter(torch.nn.init.xavier_uniform_(torch.zeros(dims, L)))

        self.W2 = nn.Embedding(num_items, dims, padding_idx=0).to(device)
        self.b2 = nn.Embedding(num_items, 1, padding_idx=0).to(device)

        self.user_embeddings.weight.data.normal_(0, 1.0 / self.user_embeddings.embedding_dim)
        self.item_embeddings.weight.data.normal_(0, 1.0 / self.item_embeddings.embedding_dim)
        self.W2.weight.data.normal_(0, 1.0 / self.W2.embedding_dim)
        self.b2.weight.data.zero_()

    def forward(self, item_seq, user_ids, items_to_predict, for_pred=False):
        item_embs = self.item_embeddings(item_seq)
        user_emb = self.user_embeddings(user_ids)

        gate = torch.sigmoid(self.feature_gate_item(item_embs) + self.feature_gate_user(user_emb).unsqueeze(1))
        gated_item = item_embs * gate

        instance_score = torch.sigmoid(torch.matmul(gated_item, self.instance_gate_item.unsqueeze(0)).squeeze() +
                                       user_emb.mm(self.instance_gate_user))
        union_out = gated_item * instance_score.unsqueeze(2)
        union_out = torch.sum(union_out, dim=1)
        union_out = union_out / torch.sum(instance_score, dim=1).unsqueeze(1)

        w2 = self.W2(items_to_predict)
        b2 = self.b2(items_to_predict)

        if for_pred:
            w2 = w2.squeeze()
            b2 = b2.squeeze()
            res = user_emb.mm(w2.t()) + b2
            res += union_out.mm(w2.t())
            rel_score = torch.matmul(item_embs, w2.t().unsqueeze(0))
            rel_score = torch.sum(rel_score, dim=1)
            res += rel_score
        else:
            res = torch.baddbmm(b2, w2, user_emb.unsqueeze(2)).squeeze()
            res += torch.bmm(union_out.unsqueeze(1), w2.permute(0, 2, 1)).squeeze()
            rel_score = item_embs.bmm(w2.permute(0, 2, 1))
            rel_score = torch.sum(rel_score, dim=1)
            res += rel_score

        return res


# ---------------------------------------------------------------- run.py
def evaluation(hgn, train, test_set, topk=20):
    num_users = train.num_users
    num_items = train.num_items
    batch_size = 1024
    num_batches = int(num_users / batch_size) + 1
    user_indexes = np.arange(num_users)
    item_indexes = np.arange(num_items)
    pred_list = None
    train_matrix = train.tocsr()
    test_sequences = train.test_sequences.sequences

    for batchID in range(num_batches):
        start = batchID * batch_size
        end = start + batch_size

        if batchID == num_batches - 1:
            if start < num_users:
                end = num_users
            else:
                break

        batch_user_index = user_indexes[start:end]

        batch_test_sequences = test_sequences[batch_user_index]
        batch_test_sequences = np.atleast_2d(batch_test_sequences)

        batch_test_sequences = torch.from_numpy(batch_test_sequences).type(torch.LongTensor).to(device)
        item_ids = torch.from_numpy(item_indexes).type(torch.LongTensor).to(device)
        batch_user_ids = torch.from_numpy(np.array(batch_user_index)).type(torch.LongTensor).to(device)

        rating_pred = hgn(batch_test_sequences, batch_user_ids, item_ids, True)
        rating_pred = rating_pred.cpu().data.numpy().copy()
        rating_pred[train_matrix[batch_user_index] > 0] = 0

        ind = np.argpartition(rating_pred, -topk)
        ind = ind[:, -topk:]
        arr_ind = rating_pred[np.arange(len(rating_pred))[:, None], ind]
        arr_ind_argsort = np.argsort(arr_ind)[np.arange(len(rating_pred)), ::-1]
        batch_pred_list = ind[np.arange(len(rating_pred))[:, None], arr_ind_argsort]

        if batchID == 0:
            pred_list = batch_pred_list
        else:
            pred_list = np.append(pred_list, batch_pred_list, axis=0)

    precision, recall, MAP, ndcg = [], [], [], []
    for k in [5, 10, 15, 20]:
        precision.append(precision_at_k(test_set, pred_list, k))
        recall.append(recall_at_k(test_set, pred_list, k))
        MAP.append(mapk(test_set, pred_list, k))
        ndcg.append(ndcg_k(test_set, pred_list, k))

    return precision, recall, MAP, ndcg


def negsamp_vectorized_bsearch_preverif(pos_inds, n_items, n_samp=32):
    raw_samp = np.random.randint(0, n_items - len(pos_inds), size=n_samp)
    pos_inds_adj = pos_inds - np.arange(len(pos_inds))
    neg_inds = raw_samp + np.searchsorted(pos_inds_adj, raw_samp, side='right')
    return neg_inds


def generate_negative_samples(train_matrix, num_neg=3, num_sets=10):
    neg_samples = []
    for user_id, row in enumerate(train_matrix):
        pos_ind = np.flatnonzero(row)
        neg_sample = negsamp_vectorized_bsearch_preverif(pos_ind, train_matrix.shape[1], num_neg * num_sets)
        neg_samples.append(neg_sample)

    return np.asarray(neg_samples).reshape(num_sets, train_matrix.shape[0], num_neg)


def train_model(train_data, test_data, config):
    num_users = train_data.num_users
    num_items = train_data.num_items

    sequences_np = train_data.sequences.sequences
    targets_np = train_data.sequences.targets
    users_np = train_data.sequences.user_ids
    train_matrix = train_data.tocsr()

    n_train = sequences_np.shape[0]
    print("Total training records:{}".format(n_train))

    hgn = HGN(num_users, num_items, config, device).to(device)

    optimizer = torch.optim.Adam(hgn.parameters(), lr=config['learning_rate'], weight_decay=config['l2'])

    record_indexes = np.arange(n_train)
    batch_size = config['batch_size']
    num_batches = int(n_train / batch_size) + 1
    for epoch_num in range(config['n_iter']):
        t1 = time()
        hgn.train()
        np.random.shuffle(record_indexes)
        negatives_np_multi = generate_negative_samples(train_matrix, config['neg_samples'],
                                                       config['sets_of_neg_samples'])

        epoch_loss = 0.0
        for batchID in range(num_batches):
            start = batchID * batch_size
            end = start + batch_size

            if batchID == num_batches - 1:
                if start < n_train:
                    end = n_train
                else:
                    break

            batch_record_index = record_indexes[start:end]

            batch_users = users_np[batch_record_index]
            batch_sequences = sequences_np[batch_record_index]
            batch_targets = targets_np[batch_record_index]
            negatives_np = negatives_np_multi[batchID % config['sets_of_neg_samples']]
            batch_neg = negatives_np[batch_users]

            batch_users = torch.from_numpy(batch_users).type(torch.LongTensor).to(device)
            batch_sequences = torch.from_numpy(batch_sequences).type(torch.LongTensor).to(device)
            batch_targets = torch.from_numpy(batch_targets).type(torch.LongTensor).to(device)
            batch_negatives = torch.from_numpy(batch_neg).type(torch.LongTensor).to(device)

            items_to_predict = torch.cat((batch_targets, batch_negatives), 1)
            prediction_score = hgn(batch_sequences, batch_users, items_to_predict, False)

            (targets_prediction, negatives_prediction) = torch.split(
                prediction_score, [batch_targets.size(1), batch_negatives.size(1)], dim=1)

            loss = -torch.log(torch.sigmoid(targets_prediction - negatives_prediction) + 1e-8)
            loss = torch.mean(torch.sum(loss))

            epoch_loss += loss.item()

            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        epoch_loss /= num_batches

        t2 = time()
        print("Epoch %d [%.1f s]  loss=%.4f" % (epoch_num + 1, t2 - t1, epoch_loss))

        if (epoch_num + 1) % 10 == 0:
            hgn.eval()
            precision, recall, MAP, ndcg = evaluation(hgn, train_data, test_data, topk=20)
            print('precision@5/10/15/20', ', '.join('%.4f' % e for e in precision))
            print('recall@5/10/15/20   ', ', '.join('%.4f' % e for e in recall))
            print('MAP@5/10/15/20      ', ', '.join('%.4f' % e for e in MAP))
            print('NDCG@5/10/15/20     ', ', '.join('%.4f' % e for e in ndcg))


if __name__ == '__main__':
    config = dict(L=5, T=3, n_iter=30, batch_size=256, learning_rate=1e-2, l2=1e-5,
                  neg_samples=3, sets_of_neg_samples=50, d=32)
    t0 = time()
    user_records, num_users, num_items = synthetic_amazon()
    train_val_set, test_set = split_data_sequentially(user_records, test_radio=0.2)
    train = Interactions(train_val_set, num_users, num_items)
    train.to_sequence(config['L'], config['T'])
    train_model(train, test_set, config)
    print("done in %.1fs" % (time() - t0))
