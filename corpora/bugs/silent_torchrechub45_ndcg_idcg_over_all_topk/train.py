# Source: datawhalechina/torch-rechub, torch_rechub/basic/metric.py (topk_metrics), torch_rechub/models/matching/dssm.py (DSSM), torch_rechub/basic/layers.py (MLP), examples/matching/movielens_utils.py (match_evaluation), commit 0858fbda5589c9e7e77178b492dd2144ce3af77e
# Report: https://github.com/datawhalechina/torch-rechub/pull/45
# Two-tower DSSM matching on MovieLens: user and item towers (embeddings + MLP, L2-normalised),
# point-wise training with sampled negatives, then every test user's embedding retrieves the
# top-k items and topk_metrics reports NDCG / MRR / Recall / Hit / Precision against the
# user's held-out (last) item. ml-1m is replaced by synthetic users whose taste is one genre;
# Annoy by exact top-k search; the feature classes by plain embedding tables.
import collections
import time
from collections import defaultdict

import numpy as np
import torch
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)


# ---------------------------------------------------------------- torch_rechub/basic/metric.py
def topk_metrics(y_true, y_pred, topKs=None):
	if topKs is None:
		topKs = [5]
	assert len(y_true) == len(y_pred)

	if not isinstance(topKs, (tuple, list)):
		raise ValueError('topKs wrong, it should be tuple or list')

	pred_array = []
	true_array = []
	for u in y_true.keys():
		pred_array.append(y_pred[u])
		true_array.append(y_true[u])
	ndcg_result = []
	mrr_result = []
	hit_result = []
	precision_result = []
	recall_result = []
	for idx in range(len(topKs)):
		ndcgs = 0
		mrrs = 0
		hits = 0
		precisions = 0
		recalls = 0
		for i in range(len(true_array)):
			if len(true_array[i]) != 0:
				mrr_tmp = 0
				mrr_flag = True
				hit_tmp = 0
				dcg_tmp = 0
				idcg_tmp = 0
				hit = 0
				for j in range(topKs[idx]):
					if pred_array[i][j] in true_array[i]:
						hit += 1.
						if mrr_flag:
							mrr_flag = False
							mrr_tmp = 1. / (1 + j)
							hit_tmp = 1.
						dcg_tmp += 1. / (np.log2(j + 2))
					idcg_tmp += 1. / (np.log2(j + 2))
				hits += hit_tmp
				mrrs += mrr_tmp
				recalls += hit / len(true_array[i])
				precisions += hit / topKs[idx]
				if idcg_tmp != 0:
					ndcgs += dcg_tmp / idcg_tmp
		hit_result.append(round(hits / len(pred_array), 4))
		mrr_result.append(round(mrrs / len(pred_array), 4))
		recall_result.append(round(recalls / len(pred_array), 4))
		precision_result.append(round(precisions / len(pred_array), 4))
		ndcg_result.append(round(ndcgs / len(pred_array), 4))

	results = defaultdict(list)
	for idx in range(len(topKs)):
		output = f'NDCG@{topKs[idx]}: {ndcg_result[idx]}'
		results['NDCG'].append(output)
		output = f'MRR@{topKs[idx]}: {mrr_result[idx]}'
		results['MRR'].append(output)
		output = f'Recall@{topKs[idx]}: {recall_result[idx]}'
		results['Recall'].append(output)
		output = f'Hit@{topKs[idx]}: {hit_result[idx]}'
		results['Hit'].append(output)
		output = f'Precision@{topKs[idx]}: {precision_result[idx]}'
		results['Precision'].append(output)
	return results


# ---------------------------------------------------------------- torch_rechub/basic/layers.py
class MLP(torch.nn.Module):
    def __init__(self, input_dim, output_layer=True, dims=None, dropout=0, activation="relu"):
        super().__init__()
        if dims is None:
            dims = []
        layers = list()
        for i_dim in dims:
            layers.append(torch.nn.Linear(input_dim, i_dim))
            layers.append(torch.nn.BatchNorm1d(i_dim))
            layers.append(torch.nn.ReLU())
            layers.append(torch.nn.Dropout(p=dropout))
            input_dim = i_dim
        if output_layer:
            layers.append(torch.nn.Linear(input_dim, 1))
        self.mlp = torch.nn.Sequential(*layers)

    def forward(self, x):
        return self.mlp(x)


# ---------------------------------------------------------------- torch_rechub/models/matching/dssm.py
class DSSM(torch.nn.Module):
    def __init__(self, user_features, item_features, user_params, item_params, temperature=1.0):
        super().__init__()
        self.user_features = user_features
        self.item_features = item_features
        self.temperature = temperature
        self.user_dims = sum([dim for _, _, dim in user_features])
        self.item_dims = sum([dim for _, _, dim in item_features])

        self.embedding = torch.nn.ModuleDict(
            {name: torch.nn.Embedding(vocab, dim) for name, vocab, dim in user_features + item_features})
        self.user_mlp = MLP(self.user_dims, output_layer=False, **user_params)
        self.item_mlp = MLP(self.item_dims, output_layer=False, **item_params)
        self.mode = None

    def forward(self, x):
        user_embedding = self.user_tower(x)
        item_embedding = self.item_tower(x)
        if self.mode == "user":
            return user_embedding
        if self.mode == "item":
            return item_embedding

        y = torch.mul(user_embedding, item_embedding).sum(dim=1)
        # y = y / self.temperature
        return torch.sigmoid(y)

    def user_tower(self, x):
        if self.mode == "item":
            return None
        input_user = torch.cat([self.embedding[name](x[name]) for name, _, _ in self.user_features], dim=1)
        user_embedding = self.user_mlp(input_user)
        user_embedding = F.normalize(user_embedding, p=2, dim=1)
        return user_embedding

    def item_tower(self, x):
        if self.mode == "user":
            return None
        input_item = torch.cat([self.embedding[name](x[name]) for name, _, _ in self.item_features], dim=1)
        item_embedding = self.item_mlp(input_item)
        item_embedding = F.normalize(item_embedding, p=2, dim=1)
        return item_embedding


# ---------------------------------------------------------------- synthetic MovieLens
def make_data(n_users=400, n_items=300, n_genres=10, seed=0):
    rng = np.random.RandomState(seed)
    item_genre = rng.randint(n_genres, size=n_items)
    user_genre = rng.randint(n_genres, size=n_users)
    popularity = rng.zipf(1.6, size=n_items).astype(float)
    seqs = {}
    for u in range(n_users):
        liked = np.flatnonzero(item_genre == user_genre[u])
        other = np.flatnonzero(item_genre != user_genre[u])
        k = rng.randint(8, 16)
        p = popularity[liked] / popularity[liked].sum()
        picks = list(rng.choice(liked, size=min(k, len(liked)), replace=False, p=p))
        picks += list(rng.choice(other, size=2, replace=False))
        rng.shuffle(picks)
        seqs[u] = picks
    return seqs, item_genre, user_genre, n_items


def match_evaluation(model, test_users, user_genre, item_genre, ground_truth, topk=10):
    model.eval()
    with torch.no_grad():
        model.mode = "user"
        users = torch.tensor(test_users)
        user_embedding = model({"user_id": users, "user_genre": torch.tensor(user_genre[test_users])})
        model.mode = "item"
        items = torch.arange(len(item_genre))
        item_embedding = model({"movie_id": items, "movie_genre": torch.tensor(item_genre)})
        model.mode = None
    scores = user_embedding @ item_embedding.T
    topk_idx = scores.topk(topk, dim=1).indices.numpy()
    match_res = collections.defaultdict(dict)
    for user_id, items_idx in zip(test_users, topk_idx):
        match_res[user_id] = items_idx
    print("compute topk metrics")
    out = topk_metrics(y_true=ground_truth, y_pred=match_res, topKs=[topk])
    print(dict(out))
    model.train()


if __name__ == "__main__":
    t0 = time.time()
    seqs, item_genre, user_genre, n_items = make_data()
    n_users = len(seqs)
    train_pairs, ground_truth = [], {}
    for u, items in seqs.items():
        for it in items[:-1]:
            train_pairs.append((u, it))
        ground_truth[u] = [items[-1]]  # leave the last item out for the test
    rng = np.random.RandomState(1)
    user_features = [("user_id", n_users, 16), ("user_genre", 10, 8)]
    item_features = [("movie_id", n_items, 16), ("movie_genre", 10, 8)]
    model = DSSM(user_features, item_features, temperature=0.02,
                 user_params={"dims": [64, 32], "dropout": 0.1}, item_params={"dims": [64, 32], "dropout": 0.1})
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, weight_decay=1e-6)
    for epoch in range(6):
        # point-wise samples: each positive with 3 random negatives (neg_ratio=3)
        rows = []
        for u, it in train_pairs:
            rows.append((u, it, 1.0))
            for neg in rng.randint(n_items, size=3):
                rows.append((u, int(neg), 0.0))
        rows = np.array(rows)
        rng.shuffle(rows)
        total = 0.0
        for b in range(0, len(rows), 256):
            batch = rows[b:b + 256]
            u = torch.tensor(batch[:, 0].astype(int))
            it = torch.tensor(batch[:, 1].astype(int))
            x = {"user_id": u, "user_genre": torch.tensor(user_genre[u.numpy()]),
                 "movie_id": it, "movie_genre": torch.tensor(item_genre[it.numpy()])}
            y_pred = model(x)
            loss = F.binary_cross_entropy(y_pred, torch.tensor(batch[:, 2], dtype=torch.float32))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            total += loss.item() * len(batch)
        print("epoch %d train_loss %.4f" % (epoch, total / len(rows)))
    match_evaluation(model, list(range(n_users)), user_genre, item_genre, ground_truth, topk=10)
    print("done in %.1fs" % (time.time() - t0))
