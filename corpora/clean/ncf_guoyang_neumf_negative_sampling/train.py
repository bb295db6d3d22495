# Source: guoyang9/NCF, main.py + model.py (NCF: GMF/MLP/NeuMF) + data_utils.py (NCFData.ng_sample) + evaluate.py, commit 0507d5bf7c1253826dfd0afc1f0aa95fac6b23cb
# Neural Collaborative Filtering (NeuMF-end) trained with BCEWithLogitsLoss on 1 positive : num_ng sampled negatives,
# evaluated by HR@10 / NDCG@10 with 1 held-out positive ranked against 99 negatives.
# Suspicious-looking but correct patterns kept from the original:
#   - model.zero_grad() instead of optimizer.zero_grad(); BCEWithLogitsLoss on raw logits, labels cast to float
#   - negatives are re-sampled every epoch (ng_sample) so the training set changes between epochs
#   - two separate embedding tables per side (GMF and MLP), GMF branch is an element-wise product
#   - embeddings N(0, 0.01), predict_layer kaiming_uniform(a=1, nonlinearity='sigmoid'), biases zeroed via .data
#   - dropout 0.0 modules kept in the MLP; evaluation in eval() mode, no torch.no_grad() in evaluate.metrics
# Adaptation: MovieLens-1M replaced by a synthetic implicit-feedback matrix from a low-rank user/item model;
# CUDA, tensorboardX, argparse, config.py and model saving removed; 300 users x 200 items, 4 epochs.
import time

import numpy as np
import scipy.sparse as sp
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data as data


class NCFData(data.Dataset):
	def __init__(self, features, num_item, train_mat=None, num_ng=0, is_training=None):
		super(NCFData, self).__init__()
		""" Note that the labels are only useful when training, we thus
			add them in the ng_sample() function.
		"""
		self.features_ps = features
		self.num_item = num_item
		self.train_mat = train_mat
		self.num_ng = num_ng
		self.is_training = is_training
		self.labels = [0 for _ in range(len(features))]

	def ng_sample(self):
		assert self.is_training, 'no need to sampling when testing'

		self.features_ng = []
		for x in self.features_ps:
			u = x[0]
			for t in range(self.num_ng):
				j = np.random.randint(self.num_item)
				while (u, j) in self.train_mat:
					j = np.random.randint(self.num_item)
				self.features_ng.append([u, j])

		labels_ps = [1 for _ in range(len(self.features_ps))]
		labels_ng = [0 for _ in range(len(self.features_ng))]

		self.features_fill = self.features_ps + self.features_ng
		self.labels_fill = labels_ps + labels_ng

	def __len__(self):
		return (self.num_ng + 1) * len(self.labels)

	def __getitem__(self, idx):
		features = self.features_fill if self.is_training \
					else self.features_ps
		labels = self.labels_fill if self.is_training \
					else self.labels

		user = features[idx][0]
		item = features[idx][1]
		label = labels[idx]
		return user, item, label


class NCF(nn.Module):
	def __init__(self, user_num, item_num, factor_num, num_layers,
					dropout, model, GMF_model=None, MLP_model=None):
		super(NCF, self).__init__()
		self.dropout = dropout
		self.model = model
		self.GMF_model = GMF_model
		self.MLP_model = MLP_model

		self.embed_user_GMF = nn.Embedding(user_num, factor_num)
		self.embed_item_GMF = nn.Embedding(item_num, factor_num)
		self.embed_user_MLP = nn.Embedding(
				user_num, factor_num * (2 ** (num_layers - 1)))
		self.embed_item_MLP = nn.Embedding(
				item_num, factor_num * (2 ** (num_layers - 1)))

		MLP_modules = []
		for i in range(num_layers):
			input_size = factor_num * (2 ** (num_layers - i))
			MLP_modules.append(nn.Dropout(p=self.dropout))
			MLP_modules.append(nn.Linear(input_size, input_size//2))
			MLP_modules.append(nn.ReLU())
		self.MLP_layers = nn.Sequential(*MLP_modules)

		if self.model in ['MLP', 'GMF']:
			predict_size = factor_num
		else:
			predict_size = factor_num * 2
		self.predict_layer = nn.Linear(predict_size, 1)

		self._init_weight_()

	def _init_weight_(self):
		""" We leave the weights initialization here. """
		nn.init.normal_(self.embed_user_GMF.weight, std=0.01)
		nn.init.normal_(self.embed_user_MLP.weight, std=0.01)
		nn.init.normal_(self.embed_item_GMF.weight, std=0.01)
		nn.init.normal_(self.embed_item_MLP.weight, std=0.01)

		for m in self.MLP_layers:
			if isinstance(m, nn.Linear):
				nn.init.xavier_uniform_(m.weight)
		nn.init.kaiming_uniform_(self.predict_layer.weight,
								a=1, nonlinearity='sigmoid')

		for m in self.modules():
			if isinstance(m, nn.Linear) and m.bias is not None:
				m.bias.data.zero_()

	def forward(self, user, item):
		if not self.model == 'MLP':
			embed_user_GMF = self.embed_user_GMF(user)
			embed_item_GMF = self.embed_item_GMF(item)
			output_GMF = embed_user_GMF * embed_item_GMF
		if not self.model == 'GMF':
			embed_user_MLP = self.embed_user_MLP(user)
			embed_item_MLP = self.embed_item_MLP(item)
			interaction = torch.cat((embed_user_MLP, embed_item_MLP), -1)
			output_MLP = self.MLP_layers(interaction)

		if self.model == 'GMF':
			concat = output_GMF
		elif self.model == 'MLP':
			concat = output_MLP
		else:
			concat = torch.cat((output_GMF, output_MLP), -1)

		prediction = self.predict_layer(concat)
		return prediction.view(-1)


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

	for user, item, label in test_loader:
		predictions = model(user, item)
		_, indices = torch.topk(predictions, top_k)
		recommends = torch.take(
				item, indices).cpu().numpy().tolist()

		gt_item = item[0].item()
		HR.append(hit(gt_item, recommends))
		NDCG.append(ndcg(gt_item, recommends))

	return np.mean(HR), np.mean(NDCG)


def load_all(user_num=240, item_num=200, per_user=25, test_num_ng=99):
	""" Synthetic stand-in for data_utils.load_all(): implicit feedback from a rank-4 preference model. """
	rng = np.random.RandomState(0)
	U = rng.randn(user_num, 4)
	V = rng.randn(item_num, 4)
	pop = rng.randn(item_num) * 0.5
	train_data, test_data = [], []
	train_mat = sp.dok_matrix((user_num, item_num), dtype=np.float32)
	for u in range(user_num):
		scores = U[u] @ V.T + pop + rng.gumbel(size=item_num)
		liked = list(np.argsort(-scores)[:per_user + 1])
		test_item = liked.pop(rng.randint(len(liked)))
		for i in liked:
			train_data.append([u, int(i)])
			train_mat[u, int(i)] = 1.0
		test_data.append([u, int(test_item)])
		negs = [j for j in rng.permutation(item_num) if j not in liked and j != test_item][:test_num_ng]
		for j in negs:
			test_data.append([u, int(j)])
	return train_data, test_data, user_num, item_num, train_mat


def main():
	np.random.seed(0)
	torch.manual_seed(0)
	lr, dropout, batch_size, epochs, top_k = 0.001, 0.0, 256, 4, 10
	factor_num, num_layers, num_ng, test_num_ng = 32, 3, 4, 99

	train_data, test_data, user_num, item_num, train_mat = load_all(test_num_ng=test_num_ng)
	train_dataset = NCFData(train_data, item_num, train_mat, num_ng, True)
	test_dataset = NCFData(test_data, item_num, train_mat, 0, False)
	train_loader = data.DataLoader(train_dataset, batch_size=batch_size, shuffle=True, num_workers=0)
	test_loader = data.DataLoader(test_dataset, batch_size=test_num_ng+1, shuffle=False, num_workers=0)

	model = NCF(user_num, item_num, factor_num, num_layers, dropout, 'NeuMF-end')
	loss_function = nn.BCEWithLogitsLoss()
	optimizer = optim.Adam(model.parameters(), lr=lr)

	model.eval()
	HR0, NDCG0 = metrics(model, test_loader, top_k)
	print("init HR: {:.3f}\tNDCG: {:.3f}".format(HR0, NDCG0))
	count, best_hr = 0, 0
	for epoch in range(epochs):
		model.train()  # Enable dropout (if have).
		start_time = time.time()
		train_loader.dataset.ng_sample()
		losses = []
		for user, item, label in train_loader:
			label = label.float()

			model.zero_grad()
			prediction = model(user, item)
			loss = loss_function(prediction, label)
			loss.backward()
			optimizer.step()
			losses.append(loss.item())
			count += 1

		model.eval()
		HR, NDCG = metrics(model, test_loader, top_k)

		elapsed_time = time.time() - start_time
		print("epoch {:03d} loss {:.4f} time {:.1f}s".format(epoch, np.mean(losses), elapsed_time))
		print("HR: {:.3f}\tNDCG: {:.3f}".format(np.mean(HR), np.mean(NDCG)))

		if HR > best_hr:
			best_hr, best_ndcg, best_epoch = HR, NDCG, epoch

	print("End. Best epoch {:03d}: HR = {:.3f}, NDCG = {:.3f}".format(best_epoch, best_hr, best_ndcg))
	print("[summary] HR@10 first={:.3f} last={:.3f} increased={}".format(HR0, HR, HR > HR0))


if __name__ == "__main__":
	main()
