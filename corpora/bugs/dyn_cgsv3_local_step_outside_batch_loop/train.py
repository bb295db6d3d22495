# Source: XinyiYS/Gradient-Driven-Rewards-to-Guarantee-Fairness-in-Collaborative-Machine-Learning, utils/utils.py (train_model, evaluate, gradient helpers), main.py (CML/FL loop), utils/Data_Prepper.py (powerlaw), utils/defined_models.py (CNN_Net), commit 1073afd5de61d71ef2a254c7a0ad619905aa5647
# Report: https://github.com/XinyiYS/Gradient-Driven-Rewards-to-Guarantee-Fairness-in-Collaborative-Machine-Learning/pull/3
# Cosine-gradient-Shapley collaborative learning (NeurIPS'21): each agent trains a copy of the
# model locally for E epochs, sends its normalized update, the server aggregates by
# reputation and rewards each agent with a masked share of the aggregate. MNIST becomes a
# synthetic 10-class 32x32 dataset, CNN_Net keeps its layers with 8 / 16 channels, 5 agents
# with a power-law split, 12 rounds.
import copy
import math
import random

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.linalg import norm
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset


class CNN_Net(nn.Module):

	def __init__(self, device=None):
		super(CNN_Net, self).__init__()
		self.conv1 = nn.Conv2d(1, 8, 3, 1)
		self.conv2 = nn.Conv2d(8, 16, 7, 1)
		self.fc1 = nn.Linear(4 * 4 * 16, 200)
		self.fc2 = nn.Linear(200, 10)

	def forward(self, x):
		x = x.view(-1, 1, 32, 32)
		x = torch.tanh(self.conv1(x))
		x = F.max_pool2d(x, 2, 2)
		x = torch.tanh(self.conv2(x))
		x = F.max_pool2d(x, 2, 2)
		x = x.view(-1, 4 * 4 * 16)
		x = torch.tanh(self.fc1(x))
		x = self.fc2(x)
		return F.log_softmax(x, dim=1)


def compute_grad_update(old_model, new_model, device=None):
	return [(new_param.data - old_param.data) for old_param, new_param in zip(old_model.parameters(), new_model.parameters())]

def add_update_to_model(model, update, weight=1.0, device=None):
	if not update: return model
	for param_model, param_update in zip(model.parameters(), update):
		param_model.data += weight * param_update.data
	return model

def add_gradient_updates(grad_update_1, grad_update_2, weight = 1.0):
	assert len(grad_update_1) == len(
		grad_update_2), "Lengths of the two grad_updates not equal"
	for param_1, param_2 in zip(grad_update_1, grad_update_2):
		param_1.data += param_2.data * weight

def flatten(grad_update):
	return torch.cat([update.data.view(-1) for update in grad_update])

def unflatten(flattened, normal_shape):
	grad_update = []
	for param in normal_shape:
		n_params = len(param.view(-1))
		grad_update.append(torch.as_tensor(flattened[:n_params]).reshape(param.size())  )
		flattened = flattened[n_params:]
	return grad_update

def evaluate(model, eval_loader, device, loss_fn=None, verbose=False):
	model.eval()
	correct = 0
	total = 0
	loss = 0
	with torch.no_grad():
		for i, batch in enumerate(eval_loader):
			batch_data, batch_target = batch[0], batch[1]
			outputs = model(batch_data)
			if loss_fn:
				loss += loss_fn(outputs, batch_target) * len(batch_target)
			correct += (torch.max(outputs, 1)[1].view(batch_target.size()).data == batch_target.data).sum()
			total += len(batch_target)
		accuracy =  correct.float() / total
		if loss_fn:
			loss /= total
	return loss, accuracy

def train_model(model, loader, loss_fn, optimizer, device, E=1, **kwargs):

	model.train()
	for e in range(E):
		# running local epochs
		for _, batch in enumerate(loader):
			data, label = batch[0], batch[1]

		data, label = data.to(device), label.to(device)

		optimizer.zero_grad()
		pred = model(data)
		loss_fn(pred, label).backward()

		optimizer.step()

	if 'scheduler' in kwargs: kwargs['scheduler'].step()

	return model

def mask_grad_update_by_order(grad_update, mask_order=None, mask_percentile=None, mode='layer'):
	grad_update = copy.deepcopy(grad_update)
	mask_percentile = max(0, mask_percentile)
	for i, layer in enumerate(grad_update):
		layer_mod = layer.data.view(-1).abs()
		if mask_percentile is not None:
			mask_order = math.ceil(len(layer_mod) * mask_percentile)
		if mask_order == 0:
			grad_update[i].data = torch.zeros(layer.data.shape, device=layer.device)
		else:
			topk, indices = torch.topk(layer_mod, min(mask_order, len(layer_mod)-1))
			grad_update[i].data[layer.data.abs() < topk[-1]] = 0
	return grad_update

def powerlaw(sample_indices, n_agents, alpha=1.65911332899):
	party_size = int(len(sample_indices) / n_agents)
	b = np.linspace(0.01 ** (1 / alpha), 0.99 ** (1 / alpha), n_agents)
	shard_sizes = list(map(math.ceil, b/sum(b)*party_size*n_agents))
	indices_list = []
	accessed = 0
	for agent_id in range(n_agents):
		indices_list.append(sample_indices[accessed:accessed + shard_sizes[agent_id]])
		accessed += shard_sizes[agent_id]
	return indices_list


def make_digits(n, g, protos):
	y = torch.randint(0, 10, (n,), generator=g)
	x = protos[y] + 3.0 * torch.randn(n, 1, 32, 32, generator=g)
	return x, y


def main():
    torch.manual_seed(0)
    random.seed(0)
    np.random.seed(0)
    device = torch.device('cpu')
    args = {'batch_size': 32, 'alpha': 0.95, 'Gamma': 0.5, 'beta': 1, 'optimizer_fn': optim.SGD,
            'loss_fn': nn.NLLLoss(), 'lr': 1e-3, 'lr_decay': 0.955, 'iterations': 12, 'E': 3}
    N, E = 5, args['E']
    loss_fn = args['loss_fn']

    g = torch.Generator().manual_seed(0)
    protos = F.avg_pool2d(torch.randn(10, 1, 32, 32, generator=g), 5, 1, 2) * 3
    train_x, train_y = make_digits(1000, g, protos)
    test_x, test_y = make_digits(400, g, protos)
    train_dataset = TensorDataset(train_x, train_y)
    indices_list = powerlaw(list(range(len(train_dataset))), N)
    shard_sizes = [len(indices) for indices in indices_list]
    train_loaders = [DataLoader(train_dataset, batch_size=args['batch_size'], sampler=SubsetRandomSampler(indices)) for indices in indices_list]
    test_loader = DataLoader(TensorDataset(test_x, test_y), batch_size=200)

    shard_sizes = torch.tensor(shard_sizes).float()
    print("Shard sizes are: ", shard_sizes.tolist())

    server_model = CNN_Net().to(device)

    agent_models, agent_optimizers, agent_schedulers = [], [], []
    for i in range(N):
        model = copy.deepcopy(server_model)
        optimizer = args['optimizer_fn'](model.parameters(), lr=args['lr'])
        scheduler = torch.optim.lr_scheduler.ExponentialLR(optimizer, gamma = args['lr_decay'])
        agent_models.append(model)
        agent_optimizers.append(optimizer)
        agent_schedulers.append(scheduler)

    rs = torch.zeros(N, device=device)

    for iteration in range(args['iterations']):

        gradients = []
        for i in range(N):
            loader = train_loaders[i]
            model = agent_models[i]
            optimizer = agent_optimizers[i]
            scheduler = agent_schedulers[i]

            model.train()
            backup = copy.deepcopy(model)

            model = train_model(model, loader, loss_fn, optimizer, device=device, E=E, scheduler=scheduler)

            gradient = compute_grad_update(old_model=backup, new_model=model, device=device)

            # SUPPOSE DO NOT TOP UP WITH OWN GRADIENTS
            model.load_state_dict(backup.state_dict())

            flattened = flatten(gradient)
            norm_value = norm(flattened) + 1e-7 # to prevent division by zero
            gradient = unflatten(torch.multiply(torch.tensor(args['Gamma']), torch.div(flattened,  norm_value)), gradient)
            gradients.append(gradient)

        # ---- Server Aggregate ----
        aggregated_gradient =  [torch.zeros(param.shape).to(device) for param in server_model.parameters()]

        if iteration == 0:
            weights = torch.div(shard_sizes, torch.sum(shard_sizes))
        else:
            weights = rs

        for gradient, weight in zip(gradients, weights):
            add_gradient_updates(aggregated_gradient, gradient, weight=weight)

        add_update_to_model(server_model, aggregated_gradient)

        flat_aggre_grad = flatten(aggregated_gradient)
        phis = torch.tensor([F.cosine_similarity(flatten(gradient), flat_aggre_grad, 0, 1e-10) for gradient in gradients], device=device)

        rs = args['alpha'] * rs + (1 - args['alpha']) * phis
        rs = torch.clamp(rs, min=1e-3)
        rs = torch.div(rs, rs.sum())

        q_ratios = torch.tanh(args['beta'] * rs)
        q_ratios = torch.div(q_ratios, torch.max(q_ratios))

        for i in range(N):
            reward_gradient = mask_grad_update_by_order(aggregated_gradient, mask_percentile=q_ratios[i], mode='layer')
            add_update_to_model(agent_models[i], reward_gradient)

        loss, accuracy = evaluate(server_model, test_loader, loss_fn=loss_fn, device=device)
        agent_accs = [evaluate(m, test_loader, device=device)[1].item() for m in agent_models]
        print(f"iteration {iteration + 1:2d}: server test loss {loss.item():.4f} accuracy {accuracy.item():.4f} | "
              f"agents' test accuracy {' '.join(f'{a:.3f}' for a in agent_accs)} | "
              f"agent 0 lr {agent_optimizers[0].param_groups[0]['lr']:.2e}")


if __name__ == '__main__':
    main()
