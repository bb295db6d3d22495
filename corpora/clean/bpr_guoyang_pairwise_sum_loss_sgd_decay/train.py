# Source: guoyang9/BPR-pytorch, main.py + model.py (BPR) + data_utils.py (BPRData.ng_sample) + evaluate.py, commit a21fbcde6ab85f5215fe0db9bdb9471116e1a667
# Bayesian Personalised Ranking matrix factorisation: for every observed (user, item_i) pair, num_ng sampled unobserved
# items j; loss = -sum(log(sigmoid(x_ui - x_uj))) with SGD(lr=0.01, weight_decay=lamda) as the L2 regulariser;
# HR@10 / NDCG@10 of the held-out item among 99 sampled negatives.
# Suspicious-looking but correct patterns kept from the original:
#   - the loss is a SUM over a 4096-pair batch (not a mean) with lr 0.01: the effective step is large by design
#   - L2 regularisation via the optimizer's weight_decay shrinks EVERY embedding row every step, including users and
#     items absent from the batch (their gradient is zero but they still move)
#   - -(prediction_i - prediction_j).sigmoid().log() written without logsigmoid
#   - negatives re-sampled per epoch; the test loader's item_j is a copy of item_i ("not useful when testing") and
#     the model computes prediction_j for it anyway
#   - model.zero_grad() instead of optimizer.zero_grad(); evaluation without torch.no_grad(); no bias terms
# Adaptation: MovieLens-1M (ml-1m.train.rating / test.negative) replaced by synthetic implicit feedback from a
# low-rank preference model (400 users x 300 items, 1 held-out positive + 99 negatives per user); CUDA,
# tensorboardX, argparse/config and model pickling removed; 8 epochs; batch 4096 kept.
import time

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as data


class BPRData(data.Dataset):
	def __init__(self, features,
				num_item, train_mat=None, num_ng=0, is_training=None):
		super(BPRData, self).__init__()
		""" Note that the labels are only useful when training, we thus
			add them in the ng_sample() function.
		"""
		self.features = features
		self.num_item = num_item
		self.train_mat = train_mat
		self.num_ng = num_ng
		self.is_training = is_training

	def ng_sample(self):
		assert self.is_training, 'no need to sampling when testing'

		self.features_fill = []
		for x in self.features:
			u, i = x[0], x[1]
			for t in range(self.num_ng):
				j = np.random.randint(self.num_item)
				while (u, j) in self.train_mat:
					j = np.random.randint(self.num_item)
				self.features_fill.append([u, i, j])

	def __len__(self):
		return self.num_ng * len(self.features) if \
				self.is_training else len(self.features)

	def __getitem__(self, idx):
		features = self.features_fill if \
				self.is_training else self.features

		user = features[idx][0]
		item_i = features[idx][1]
		item_j = features[idx][2] if \
				self.is_training else features[idx][1]
		return user, item_i, item_j


class BPR(nn.Module):
	def __init__(self, user_num, item_num, factor_num):
		super(BPR, self).__init__()
		"""
		user_num: number of users;
		item_num: number of items;
		factor_num: number of predictive factors.
		"""
		self.embed_user = nn.Embedding(user_num, factor_num)
		self.embed_item = nn.Embedding(item_num, factor_num)

		nn.init.normal_(self.embed_user.weight, std=0.01)
		nn.init.normal_(self.embed_item.weight, std=0.01)

	def forward(self, user, item_i, item_j):
		user = self.embed_user(user)
		item_i = self.embed_item(item_i)
		item_j = self.embed_item(item_j)

		prediction_i = (user * item_i).sum(dim=-1)
		prediction_j = (user * item_j).sum(dim=-1)
		return prediction_i, prediction_j


def hit(gt_item, pred_items):
	if gt_item in pred_items:
		return 1
	return 0


def ndcg(gt_item, pred_items):
	if gt_item in pred_items:
		index = pred_items.index(gt_item)
		return np.reciprocal(np.log2(index+2))
	return 0


def metrics(model, test_loader, top_k):
	HR, NDCG = [], []

	for user, item_i, item_j in test_loader:
		prediction_i, prediction_j = model(user, item_i, item_j)
		_, indices = torch.topk(prediction_i, top_k)
		recommends = torch.take(
				item_i, indices).cpu().numpy().tolist()

		gt_item = item_i[0].item()
		HR.append(hit(gt_item, recommends))
		NDCG.append(ndcg(gt_item, recommends))

	return np.mean(HR), np.mean(NDCG)


def load_all(user_num=400, item_num=300, per_user=20, test_num_ng=99, seed=0):
	""" Synthetic stand-in for data_utils.load_all() (ml-1m): rank-4 preferences + popularity. """
	rng = np.random.RandomState(seed)
	U, V, pop = rng.randn(user_num, 4), rng.randn(item_num, 4), rng.randn(item_num) * 0.5
	train_data, test_data = [], []
	train_mat = sp.dok_matrix((user_num, item_num), dtype=np.float32)
	for u in range(user_num):
		liked = list(np.argsort(-(U[u] @ V.T + pop + rng.gumbel(size=item_num)))[:per_user + 1])
		test_item = liked.pop(rng.randint(len(liked)))
		for i in liked:
			train_data.append([u, int(i)])
			train_mat[u, int(i)] = 1.0
		test_data.append([u, int(test_item), int(test_item)])
		for j in [j for j in rng.permutation(item_num) if j not in liked and j != test_item][:test_num_ng]:
			test_data.append([u, int(j), int(j)])
	return train_data, test_data, user_num, item_num, train_mat


def main():
	np.random.seed(0)
	torch.manual_seed(0)
	lr, lamda, batch_size, epochs, top_k, factor_num, num_ng, test_num_ng = 0.01, 0.001, 4096, 8, 10, 32, 4, 99

	train_data, test_data, user_num, item_num, train_mat = load_all(test_num_ng=test_num_ng)
	train_dataset = BPRData(train_data, item_num, train_mat, num_ng, True)
	test_dataset = BPRData(test_data, item_num, train_mat, 0, False)
	train_loader = data.DataLoader(train_dataset, batch_size=batch_size, shuffle=True, num_workers=0)
	test_loader = data.DataLoader(test_dataset, batch_size=test_num_ng+1, shuffle=False, num_workers=0)

	model = BPR(user_num, item_num, factor_num)
	optimizer = optim.SGD(model.parameters(), lr=lr, weight_decay=lamda)

	model.eval()
	HR0, NDCG0 = metrics(model, test_loader, top_k)
	print("init HR: {:.3f}\tNDCG: {:.3f}".format(HR0, NDCG0))
	count, best_hr = 0, 0
	for epoch in range(epochs):
		model.train()
		start_time = time.time()
		train_loader.dataset.ng_sample()

		for user, item_i, item_j in train_loader:
			model.zero_grad()
			prediction_i, prediction_j = model(user, item_i, item_j)
			loss = - (prediction_i - prediction_j).sigmoid().log().sum()
			loss.backward()
			optimizer.step()
			count += 1

		model.eval()
		HR, NDCG = metrics(model, test_loader, top_k)

		elapsed_time = time.time() - start_time
		print("epoch {:03d} last batch loss {:.2f} time {:.1f}s".format(epoch, loss.item(), elapsed_time))
		print("HR: {:.3f}\tNDCG: {:.3f}".format(np.mean(HR), np.mean(NDCG)))

		if HR > best_hr:
			best_hr, best_ndcg, best_epoch = HR, NDCG, epoch

	print("End. Best epoch {:03d}: HR = {:.3f}, NDCG = {:.3f}".format(best_epoch, best_hr, best_ndcg))
	print("[summary] HR@10 first={:.3f} last={:.3f} increased={}".format(HR0, HR, HR > HR0))


if __name__ == "__main__":
	main()
