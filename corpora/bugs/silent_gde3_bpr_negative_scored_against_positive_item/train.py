# Source: tanatosuu/GDE, GDE.py (GDE.forward BPR branch, predict_matrix, test, training loop), preprocess.py (spectral features), commit e4dcb6a737b6f0f71d1447856d1af2de8a40920b
# Report: https://github.com/tanatosuu/GDE/pull/2
# GDE (graph denoising encoder) for top-k recommendation: user/item embeddings are filtered
# by the smoothed spectral features of the user-user and item-item graphs (L_u, L_i), and
# trained with a BPR-style pairwise loss on (user, positive item, sampled negative item);
# NDCG@10/20 and Recall@10/20 on held-out interactions. preprocess.py's eigen-decomposition
# is done in the script (torch.linalg.eigh); the Gowalla matrix is replaced by a synthetic
# 300-user x 400-item implicit-feedback matrix with clustered tastes; CPU instead of .cuda().
import gc

import numpy as np
import torch
import torch.nn as nn

torch.manual_seed(0)
np.random.seed(0)
user_size, item_size = 300, 400
result = []
batch_size = 256
learning_rate = 0.03


def build_data():
    rng = np.random.default_rng(0)
    ucl, icl = rng.integers(0, 10, user_size), rng.integers(0, 10, item_size)
    prob = np.where(ucl[:, None] == icl[None, :], 0.25, 0.01)
    inter = rng.random((user_size, item_size)) < prob
    test_mask = rng.random((user_size, item_size)) < 0.2
    train = inter & ~test_mask
    test_data = [list(np.nonzero(inter[u] & test_mask[u])[0]) for u in range(user_size)]
    return torch.tensor(train, dtype=torch.float32), test_data


rate_matrix, test_data = build_data()
train_samples = int(rate_matrix.sum().item())


def cal_spectral_feature(Adj, size):
    value, vector = torch.linalg.eigh(Adj)
    return value[-size:], vector[:, -size:]


def preprocess(smooth_ratio=0.1):
    user_degree = rate_matrix.sum(1)
    item_degree = rate_matrix.sum(0)
    D = torch.diag(torch.where(user_degree > 0, 1 / user_degree.clamp(min=1).sqrt(), torch.zeros_like(user_degree)))
    M = torch.diag(torch.where(item_degree > 0, 1 / item_degree.clamp(min=1), torch.zeros_like(item_degree)))
    L_u = D.mm(rate_matrix).mm(M).mm(rate_matrix.t()).mm(D)
    D2 = torch.diag(torch.where(item_degree > 0, 1 / item_degree.clamp(min=1).sqrt(), torch.zeros_like(item_degree)))
    M2 = torch.diag(torch.where(user_degree > 0, 1 / user_degree.clamp(min=1), torch.zeros_like(user_degree)))
    L_i = D2.mm(rate_matrix.t()).mm(M2).mm(rate_matrix).mm(D2)
    return cal_spectral_feature(L_u, int(smooth_ratio * user_size)), cal_spectral_feature(L_i, int(smooth_ratio * item_size))


class GDE(nn.Module):
    def __init__(self, user_size, item_size, beta=5.0, feature_type='smoothed', drop_out=0.1, latent_size=32, reg=0.01):
        super(GDE, self).__init__()
        self.user_embed = torch.nn.Embedding(user_size, latent_size)
        self.item_embed = torch.nn.Embedding(item_size, latent_size)

        nn.init.xavier_normal_(self.user_embed.weight)
        nn.init.xavier_normal_(self.item_embed.weight)

        self.beta = beta
        self.reg = reg
        self.drop_out = drop_out
        if drop_out != 0:
            self.m = torch.nn.Dropout(drop_out)

        (user_values, user_vector), (item_values, item_vector) = preprocess()
        user_filter = self.weight_feature(user_values)
        item_filter = self.weight_feature(item_values)

        self.L_u = (user_vector * user_filter).mm(user_vector.t())
        self.L_i = (item_vector * item_filter).mm(item_vector.t())

        del user_vector, item_vector, user_filter, item_filter
        gc.collect()

    def weight_feature(self, value):
        return torch.exp(self.beta * value)

    def forward(self, user, pos_item, nega_item, loss_type='adaptive'):
        if self.drop_out == 0:
            final_user, final_pos, final_nega = self.L_u[user].mm(self.user_embed.weight), self.L_i[pos_item].mm(self.item_embed.weight), self.L_i[nega_item].mm(self.item_embed.weight)
        else:
            final_user, final_pos, final_nega = (self.m(self.L_u[user]) * (1 - self.drop_out)).mm(self.user_embed.weight), (self.m(self.L_i[pos_item]) * (1 - self.drop_out)).mm(self.item_embed.weight), \
                (self.m(self.L_i[nega_item]) * (1 - self.drop_out)).mm(self.item_embed.weight)

        if loss_type == 'adaptive':
            res_nega = (final_user * final_nega).sum(1)
            nega_weight = (1 - (1 - res_nega.sigmoid().clamp(max=0.99)).log10()).detach()
            out = ((final_user * final_pos).sum(1) - nega_weight * res_nega).sigmoid()
        else:
            out = ((final_user * final_pos).sum(1) - (final_pos * final_nega).sum(1)).sigmoid()

        reg_term = self.reg * (final_user ** 2 + final_pos ** 2 + final_nega ** 2).sum()
        return (-torch.log(out).sum() + reg_term) / batch_size

    def predict_matrix(self):
        final_user = self.L_u.mm(self.user_embed.weight)
        final_item = self.L_i.mm(self.item_embed.weight)
        # mask the observed interactions
        return (final_user.mm(final_item.t())).sigmoid() - rate_matrix * 1000

    def test(self):
        def cal_idcg(k=20):
            idcg_set = [0]
            scores = 0.0
            for i in range(1, k + 1):
                scores += 1 / np.log2(1 + i)
                idcg_set.append(scores)
            return idcg_set

        def cal_score(topn, now_user, trunc=20):
            dcg10, dcg20, hit10, hit20 = 0.0, 0.0, 0.0, 0.0
            for k in range(trunc):
                max_item = topn[k]
                if test_data[now_user].count(max_item) != 0:
                    if k <= 10:
                        dcg10 += 1 / np.log2(2 + k)
                        hit10 += 1
                    dcg20 += 1 / np.log2(2 + k)
                    hit20 += 1
            return dcg10, dcg20, hit10, hit20

        ndcg10, ndcg20, recall10, recall20 = 0.0, 0.0, 0.0, 0.0
        with torch.no_grad():
            predict = self.predict_matrix()
        idcg_set = cal_idcg()
        n_users = 0
        for now_user in range(user_size):
            test_lens = len(test_data[now_user])
            if test_lens == 0:
                continue
            n_users += 1
            all10 = 10 if (test_lens > 10) else test_lens
            all20 = 20 if (test_lens > 20) else test_lens
            topn = predict[now_user].topk(20)[1].tolist()
            dcg10, dcg20, hit10, hit20 = cal_score(topn, now_user)
            ndcg10 += (dcg10 / idcg_set[all10])
            ndcg20 += (dcg20 / idcg_set[all20])
            recall10 += (hit10 / all10)
            recall20 += (hit20 / all20)
        ndcg10, ndcg20, recall10, recall20 = round(ndcg10 / n_users, 4), round(ndcg20 / n_users, 4), round(recall10 / n_users, 4), round(recall20 / n_users, 4)
        print("  test ndcg@10 %.4f ndcg@20 %.4f recall@10 %.4f recall@20 %.4f" % (ndcg10, ndcg20, recall10, recall20))
        result.append([ndcg10, ndcg20, recall10, recall20])


# Model training and test
model = GDE(user_size, item_size)
optimizer = torch.optim.SGD(model.parameters(), lr=learning_rate)
epoch = train_samples // batch_size

if __name__ == "__main__":
    for i in range(40):
        total_loss = 0.0
        for j in range(0, epoch):
            u = torch.LongTensor(np.random.randint(0, user_size, batch_size))
            p = torch.multinomial(rate_matrix[u], 1, True).squeeze(1)
            nega = torch.multinomial(1 - rate_matrix[u], 1, True).squeeze(1)

            loss = model(u, p, nega, loss_type='bpr')
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            total_loss += loss.item()
        print('epoch %d training loss:%f' % (i, total_loss / epoch))
        if (i + 1) % 8 == 0:
            model.test()
