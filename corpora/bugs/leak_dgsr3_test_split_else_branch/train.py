# Source: CRIPAC-DIG/DGSR, new_data.py (generate_user, generate_data), new_main.py, DGSR_utils.py (eval_metric), commit 68f9ca989395edd6d48c8542dc330c77688cb053
# Report: https://github.com/CRIPAC-DIG/DGSR/issues/3
# DGSR data generation and training: every user's time-ordered interactions are cut into
# (history -> next item) samples and written to train / val / test by position j; the model is
# trained with cross-entropy over all items and tested by ranking the target among 100
# sampled negatives (Recall@K / NDCG@K). The DGL dynamic-graph sub-graphs and the graph
# encoder are replaced by the user's last item_max_length items with a short-term attention
# and a long-term user embedding (unified_map as in DGSR); the Amazon csv by synthetic users.
import datetime

import numpy as np
import pandas as pd
import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader


def refine_time(data):
    data = data.sort_values(['time'], kind='mergesort')
    time_seq = data['time'].values
    time_gap = 1
    for i, da in enumerate(time_seq[0:-1]):
        if time_seq[i] == time_seq[i+1] or time_seq[i] > time_seq[i+1]:
            time_seq[i+1] = time_seq[i+1] + time_gap
            time_gap += 1
    data['time'] = time_seq
    return data


def generate_user(user, data, item_max_length, train_set, test_set, val_set=None):
    data_user = data[data['user_id'] == user].sort_values('time')
    u_time = data_user['time'].values
    u_seq = data_user['item_id'].values
    split_point = len(u_seq) - 1
    train_num = 0
    test_num = 0
    # 生成训练数据
    if len(u_seq) < 3:
        return 0, 0
    else:
        for j, t in enumerate(u_time[0:-1]):
            if j == 0:
                continue
            his = u_seq[max(0, j + 1 - item_max_length):j + 1]
            his = np.concatenate([np.full(item_max_length - len(his), -1), his])
            target = u_seq[j+1]
            last_item = u_seq[j]
            sample = (user, his, target, last_item)
            if j < split_point-1:
                train_set.append(sample)
                train_num += 1
            if j == split_point-1-2:
                val_set.append(sample)
            else:
                test_set.append(sample)
                test_num += 1
        return train_num, test_num


def generate_data(data, item_max_length):
    train_set, val_set, test_set = [], [], []
    user = data['user_id'].unique()
    a = [generate_user(u, data, item_max_length, train_set, test_set, val_set) for u in user]
    return a, train_set, val_set, test_set


def make_interactions(user_num, item_num, rng):
    # each user half follows a preferred stride over items (sequential taste), half picks at random
    rows = []
    for u in range(user_num):
        length = rng.randint(8, 16)
        stride = rng.randint(1, 6)
        it = rng.randint(item_num)
        t = rng.randint(1000)
        for _ in range(length):
            rows.append((u, it, t))
            t += rng.randint(1, 50)
            it = (it + stride) % item_num if rng.rand() < 0.5 else rng.randint(item_num)
    return pd.DataFrame(rows, columns=['user_id', 'item_id', 'time'])


class DGSR(nn.Module):
    def __init__(self, user_num, item_num, input_dim, item_max_length, feat_drop=0.3):
        super(DGSR, self).__init__()
        self.item_num = item_num
        self.hidden_size = input_dim
        self.item_max_length = item_max_length
        self.user_embedding = nn.Embedding(user_num, self.hidden_size)
        self.item_embedding = nn.Embedding(item_num + 1, self.hidden_size, padding_idx=item_num)
        self.pos_embedding = nn.Embedding(item_max_length, self.hidden_size)
        self.att = nn.Linear(self.hidden_size, 1)
        self.feat_drop = nn.Dropout(feat_drop)
        self.unified_map = nn.Linear(3 * self.hidden_size, self.hidden_size, bias=False)

    def forward(self, his, user_index=None, last_item_index=None, neg_tar=None, is_training=False):
        his = torch.where(his < 0, torch.full_like(his, self.item_num), his)
        h = self.item_embedding(his) + self.pos_embedding.weight
        a = self.att(torch.tanh(h)).squeeze(-1).masked_fill(his == self.item_num, -1e9)
        short = (torch.softmax(a, -1).unsqueeze(-1) * h).sum(1)
        user_layer = [self.user_embedding(user_index), short, self.item_embedding(last_item_index)]
        unified_embedding = self.unified_map(self.feat_drop(torch.cat(user_layer, -1)))
        score = torch.matmul(unified_embedding, self.item_embedding.weight[:self.item_num].transpose(1, 0))
        if is_training:
            return score
        else:
            neg_embedding = self.item_embedding(neg_tar)
            score_neg = torch.matmul(unified_embedding.unsqueeze(1), neg_embedding.transpose(2, 1)).squeeze(1)
            return score, score_neg


def collate(data):
    user = torch.tensor([d[0] for d in data]).long()
    his = torch.tensor(np.stack([d[1] for d in data])).long()
    label = torch.tensor([d[2] for d in data]).long()
    last_item = torch.tensor([d[3] for d in data]).long()
    return user, his, label, last_item


def collate_test(data, user_neg):
    user, his, label, last_item = collate(data)
    neg = torch.tensor(np.stack([user_neg[d[0]] for d in data])).long()
    return user, his, label, last_item, neg


def eval_metric(all_top):
    recall5, recall10, ndgg5, ndgg10 = [], [], [], []
    for index in range(len(all_top)):
        prediction = (-all_top[index]).argsort(1).argsort(1)
        predictions = prediction[:, 0]
        for i, rank in enumerate(predictions):
            recall10.append(1 if rank < 10 else 0)
            ndgg10.append(1 / np.log2(rank + 2) if rank < 10 else 0)
            recall5.append(1 if rank < 5 else 0)
            ndgg5.append(1 / np.log2(rank + 2) if rank < 5 else 0)
    return np.mean(recall5), np.mean(recall10), np.mean(ndgg5), np.mean(ndgg10)


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    opt = dict(batchSize=50, hidden_size=32, epoch=8, lr=0.005, l2=0.0001, item_max_length=10)
    data = make_interactions(300, 200, rng)
    data = pd.concat([refine_time(g) for _, g in data.groupby('user_id')]).reset_index(drop=True)
    user = data['user_id'].unique()
    item = data['item_id'].unique()
    user_num = len(user)
    item_num = 200
    all_num, train_set, val_set, test_set = generate_data(data, opt['item_max_length'])
    print('train number:', len(train_set))
    print('test number:', len(test_set))
    print('user number:', user_num)
    print('item number:', item_num)
    # 100 negatives per user, items the user never interacted with (generate_neg.py)
    data_neg = {}
    for u in user:
        seen = set(data[data['user_id'] == u]['item_id'].values)
        cand = np.array([i for i in range(item_num) if i not in seen])
        data_neg[u] = rng.choice(cand, 99, replace=False)
    train_data = DataLoader(dataset=train_set, batch_size=opt['batchSize'], collate_fn=collate, shuffle=True)
    test_data = DataLoader(dataset=test_set, batch_size=opt['batchSize'], collate_fn=lambda x: collate_test(x, data_neg))

    model = DGSR(user_num=user_num, item_num=item_num, input_dim=opt['hidden_size'],
                 item_max_length=opt['item_max_length'])
    optimizer = optim.Adam(model.parameters(), lr=opt['lr'], weight_decay=opt['l2'])
    loss_func = nn.CrossEntropyLoss()
    best_result = [0, 0, 0, 0]
    for epoch in range(opt['epoch']):
        epoch_loss = 0
        iter = 0
        model.train()
        for user_b, his, label, last_item in train_data:
            iter += 1
            score = model(his, user_b, last_item, is_training=True)
            loss = loss_func(score, label)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            epoch_loss += loss.item()
        epoch_loss /= iter
        model.eval()
        print('Epoch {}, loss {:.4f}'.format(epoch, epoch_loss), datetime.datetime.now().strftime('%H:%M:%S'))

        # test
        all_top, all_loss = [], []
        with torch.no_grad():
            for user_b, his, label, last_item, neg_tar in test_data:
                score, top = model(his, user_b, last_item, neg_tar=torch.cat([label.unsqueeze(1), neg_tar], -1),
                                   is_training=False)
                test_loss = loss_func(score, label)
                all_loss.append(test_loss.item())
                all_top.append(top.detach().cpu().numpy())
            recall5, recall10, ndgg5, ndgg10 = eval_metric(all_top)
            best_result = [max(b, r) for b, r in zip(best_result, [recall5, recall10, ndgg5, ndgg10])]
        print('train_loss:%.4f\ttest_loss:%.4f\tRecall@5:%.4f\tRecall@10:%.4f\tNDGG@5:%.4f\tNDGG10@10:%.4f' %
              (epoch_loss, np.mean(all_loss), recall5, recall10, ndgg5, ndgg10))
    print('best Recall@10 %.4f' % best_result[1])


if __name__ == "__main__":
    main()
