# Source: PreferredAI/cornac, cornac/eval_methods/base_method.py (ranking_eval), cornac/metrics/ranking.py (NDCG, MeasureAtK, Precision, Recall), cornac/models/vaecf/vaecf.py (VAE, learn), cornac/models/vaecf/recom_vaecf.py (VAECF.fit, VAECF.score), cornac/models/recommender.py (Recommender.rank), commit 644dc0a7a7f95f8ea3cecb5f3bd20a54d57206bf
# Report: https://github.com/PreferredAI/cornac/pull/523
# Cornac experiment: a variational autoencoder for collaborative filtering (VAECF, multinomial
# likelihood) is trained on the users' training interactions, then ranked top-10 lists are scored
# against each user's held-out test items with Recall, Precision and NDCG. The RatioSplit of a
# real rating file is replaced by a synthetic implicit-feedback data set (users in taste groups,
# each interacting with items of its group), scipy sparse rows by dense numpy rows.
import time

import numpy as np
import torch
import torch.nn as nn

torch.set_default_dtype(torch.float32)

EPS = 1e-10

ACT = {
    "sigmoid": nn.Sigmoid(),
    "tanh": nn.Tanh(),
    "elu": nn.ELU(),
    "relu": nn.ReLU(),
    "relu6": nn.ReLU6(),
}


class VAE(nn.Module):
    def __init__(self, z_dim, ae_structure, act_fn, likelihood):
        super(VAE, self).__init__()

        self.likelihood = likelihood
        self.act_fn = ACT.get(act_fn, None)
        if self.act_fn is None:
            raise ValueError("Supported act_fn: {}".format(ACT.keys()))

        # Encoder
        self.encoder = nn.Sequential()
        for i in range(len(ae_structure) - 1):
            self.encoder.add_module(
                "fc{}".format(i), nn.Linear(ae_structure[i], ae_structure[i + 1])
            )
            self.encoder.add_module("act{}".format(i), self.act_fn)
        self.enc_mu = nn.Linear(ae_structure[-1], z_dim)  # mu
        self.enc_logvar = nn.Linear(ae_structure[-1], z_dim)  # logvar

        # Decoder
        ae_structure = [z_dim] + ae_structure[::-1]
        self.decoder = nn.Sequential()
        for i in range(len(ae_structure) - 1):
            self.decoder.add_module(
                "fc{}".format(i), nn.Linear(ae_structure[i], ae_structure[i + 1])
            )
            if i != len(ae_structure) - 2:
                self.decoder.add_module("act{}".format(i), self.act_fn)

    def encode(self, x):
        h = self.encoder(x)
        return self.enc_mu(h), self.enc_logvar(h)

    def decode(self, z):
        h = self.decoder(z)
        if self.likelihood == "mult":
            return torch.softmax(h, dim=1)
        else:
            return torch.sigmoid(h)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(mu)
        return mu + eps * std

    def forward(self, x):
        mu, logvar = self.encode(x)
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar

    def loss(self, x, x_, mu, logvar, beta):
        # Likelihood
        ll_choices = {
            "mult": x * torch.log(x_ + EPS),
            "bern": x * torch.log(x_ + EPS) + (1 - x) * torch.log(1 - x_ + EPS),
            "gaus": -(x - x_) ** 2,
            "pois": x * torch.log(x_ + EPS) - x_,
        }

        ll = ll_choices.get(self.likelihood, None)
        if ll is None:
            raise ValueError("Supported likelihoods: {}".format(ll_choices.keys()))

        ll = torch.sum(ll, dim=1)

        # KL term
        std = torch.exp(0.5 * logvar)
        kld = -0.5 * (1 + 2.0 * torch.log(std) - mu.pow(2) - std.pow(2))
        kld = torch.sum(kld, dim=1)

        return torch.mean(beta * kld - ll)


class Dataset:
    """Users x items interaction matrix (dense stand-in for cornac.data.Dataset)."""

    def __init__(self, matrix):
        self.matrix = matrix
        self.num_users, self.num_items = matrix.shape
        self.total_items = self.num_items
        self.user_indices = np.arange(self.num_users)

    def is_unk_user(self, user_idx):
        return user_idx >= self.num_users

    def user_iter(self, batch_size, shuffle=False):
        order = np.random.permutation(self.num_users) if shuffle else np.arange(self.num_users)
        for start in range(0, self.num_users, batch_size):
            yield order[start:start + batch_size]


def learn(vae, train_set, n_epochs, batch_size, learn_rate, beta, verbose, device=torch.device("cpu")):
    optimizer = torch.optim.Adam(params=vae.parameters(), lr=learn_rate)

    for epoch in range(1, n_epochs + 1):
        sum_loss = 0.0
        count = 0
        for batch_id, u_ids in enumerate(train_set.user_iter(batch_size, shuffle=False)):
            u_batch = (train_set.matrix[u_ids, :] > 0).astype(np.float64)  # Binarize data
            u_batch = torch.tensor(u_batch, dtype=torch.float32, device=device)

            # Reconstructed batch
            u_batch_, mu, logvar = vae(u_batch)

            loss = vae.loss(u_batch, u_batch_, mu, logvar, beta)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()

            sum_loss += loss.data.item()
            count += len(u_batch)

        if verbose and epoch % 20 == 0:
            print("epoch %d loss %.4f" % (epoch, sum_loss / count))

    return vae


class VAECF:
    def __init__(self, k=10, autoencoder_structure=[20], act_fn="tanh", likelihood="mult",
                 n_epochs=100, batch_size=100, learning_rate=0.001, beta=1.0, verbose=False, seed=None):
        self.k = k
        self.autoencoder_structure = autoencoder_structure
        self.act_fn = act_fn
        self.likelihood = likelihood
        self.batch_size = batch_size
        self.n_epochs = n_epochs
        self.learning_rate = learning_rate
        self.beta = beta
        self.seed = seed
        self.verbose = verbose
        self.device = torch.device("cpu")

    def fit(self, train_set):
        self.train_set = train_set
        if self.seed is not None:
            torch.manual_seed(self.seed)
        data_dim = train_set.matrix.shape[1]
        self.vae = VAE(self.k, [data_dim] + self.autoencoder_structure, self.act_fn, self.likelihood).to(self.device)
        learn(self.vae, self.train_set, n_epochs=self.n_epochs, batch_size=self.batch_size,
              learn_rate=self.learning_rate, beta=self.beta, verbose=self.verbose, device=self.device)
        return self

    def score(self, user_idx):
        x_u = (self.train_set.matrix[user_idx:user_idx + 1] > 0).astype(np.float64)
        with torch.no_grad():
            z_u, _ = self.vae.encode(torch.tensor(x_u, dtype=torch.float32, device=self.device))
            known_item_scores = self.vae.decode(z_u).data.cpu().numpy().flatten()
        return known_item_scores

    def rank(self, user_idx, item_indices=None):
        all_item_scores = self.score(user_idx)

        # rank items based on their scores
        if item_indices is None:
            item_scores = all_item_scores[: self.train_set.num_items]
            item_rank = item_scores.argsort()[::-1]
        else:
            item_scores = all_item_scores[item_indices]
            item_rank = np.array(item_indices)[item_scores.argsort()[::-1]]

        return item_rank, item_scores


class NDCG:
    def __init__(self, k=-1):
        self.name = "NDCG@{}".format(k)
        self.k = k

    @staticmethod
    def dcg_score(gt_pos, pd_rank, k=-1):
        if k > 0:
            truncated_pd_rank = pd_rank[:k]
        else:
            truncated_pd_rank = pd_rank

        ranked_scores = np.take(gt_pos, truncated_pd_rank)
        gain = 2 ** ranked_scores - 1
        discounts = np.log2(np.arange(len(ranked_scores)) + 2)

        return np.sum(gain / discounts)

    def compute(self, gt_pos, pd_rank, **kwargs):
        dcg = self.dcg_score(gt_pos, pd_rank, self.k)
        idcg = self.dcg_score(gt_pos, np.argsort(gt_pos)[::-1], self.k)
        ndcg = dcg / idcg

        return ndcg


class MeasureAtK:
    def __init__(self, name=None, k=-1):
        self.name = name
        self.k = k

    def compute(self, gt_pos, pd_rank, **kwargs):
        if self.k > 0:
            truncated_pd_rank = pd_rank[: self.k]
        else:
            truncated_pd_rank = pd_rank

        pred = np.zeros_like(gt_pos)
        pred[truncated_pd_rank] = 1

        tp = np.sum(pred * gt_pos)
        tp_fn = np.sum(gt_pos)
        tp_fp = np.sum(pred)

        return tp, tp_fn, tp_fp


class Precision(MeasureAtK):
    def __init__(self, k=-1):
        MeasureAtK.__init__(self, name="Precision@{}".format(k), k=k)

    def compute(self, gt_pos, pd_rank, **kwargs):
        tp, _, tp_fp = MeasureAtK.compute(self, gt_pos, pd_rank, **kwargs)
        return tp / tp_fp


class Recall(MeasureAtK):
    def __init__(self, k=-1):
        MeasureAtK.__init__(self, name="Recall@{}".format(k), k=k)

    def compute(self, gt_pos, pd_rank, **kwargs):
        tp, tp_fn, _ = MeasureAtK.compute(self, gt_pos, pd_rank, **kwargs)
        return tp / tp_fn


def ranking_eval(model, metrics, train_set, test_set, val_set=None, rating_threshold=1.0,
                 exclude_unknowns=True, verbose=False):
    if len(metrics) == 0:
        return [], []

    avg_results = []
    user_results = [{} for _ in enumerate(metrics)]

    gt_mat = test_set.matrix
    train_mat = train_set.matrix
    val_mat = None if val_set is None else val_set.matrix

    def pos_items(row):
        return [int(item_idx) for item_idx in np.nonzero(row)[0] if row[item_idx] >= rating_threshold]

    for user_idx in test_set.user_indices:
        test_pos_items = pos_items(gt_mat[user_idx])
        if len(test_pos_items) == 0:
            continue

        u_gt_pos = np.zeros(test_set.num_items, dtype="int")
        u_gt_pos[test_pos_items] = 1

        val_pos_items = [] if val_mat is None else pos_items(val_mat[user_idx])
        train_pos_items = (
            []
            if train_set.is_unk_user(user_idx)
            else pos_items(train_mat[user_idx])
        )

        u_gt_neg = np.ones(test_set.num_items, dtype="int")
        u_gt_neg[test_pos_items + val_pos_items + train_pos_items] = 0

        item_indices = None if exclude_unknowns else np.arange(test_set.num_items)
        item_rank, item_scores = model.rank(user_idx, item_indices)

        for i, mt in enumerate(metrics):
            mt_score = mt.compute(
                gt_pos=u_gt_pos,
                gt_neg=u_gt_neg,
                pd_rank=item_rank,
                pd_scores=item_scores,
            )
            user_results[i][user_idx] = mt_score

    # avg results of ranking metrics
    for i, mt in enumerate(metrics):
        avg_results.append(sum(user_results[i].values()) / len(user_results[i]))

    return avg_results, user_results


def make_data(num_users=400, num_items=300, n_groups=6, seed=123):
    """Implicit feedback: each user interacts with ~24 items, mostly from its taste group;
    80% of a user's interactions go to training, 20% are held out for testing."""
    rng = np.random.RandomState(seed)
    group_items = np.array_split(rng.permutation(num_items), n_groups)
    popularity = rng.gamma(0.7, 1.0, size=num_items) + 0.05
    train = np.zeros((num_users, num_items))
    test = np.zeros((num_users, num_items))
    for u in range(num_users):
        g = rng.randint(n_groups)
        own = group_items[g]
        p = np.full(num_items, 0.03) * popularity
        p[own] = popularity[own]
        p = p / p.sum()
        items = rng.choice(num_items, size=24, replace=False, p=p)
        n_test = 5
        test[u, items[:n_test]] = 1.0
        train[u, items[n_test:]] = 1.0
    return Dataset(train), Dataset(test)


def main():
    start = time.time()
    np.random.seed(123)
    torch.manual_seed(123)
    train_set, test_set = make_data()
    print("users %d items %d train interactions %d test interactions %d" % (
        train_set.num_users, train_set.num_items, int(train_set.matrix.sum()), int(test_set.matrix.sum())))

    vaecf = VAECF(k=10, autoencoder_structure=[20], act_fn="tanh", likelihood="mult",
                  n_epochs=100, batch_size=100, learning_rate=0.003, beta=1.0, verbose=True, seed=123)
    vaecf.fit(train_set)

    metrics = [Recall(k=10), Precision(k=10), NDCG(k=10)]
    avg_results, _ = ranking_eval(vaecf, metrics, train_set, test_set, exclude_unknowns=True)
    print("TEST: " + " | ".join("%s %.4f" % (mt.name, r) for mt, r in zip(metrics, avg_results)))
    print("done in %.1fs" % (time.time() - start))


if __name__ == "__main__":
    main()
