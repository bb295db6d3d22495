# Source: burlachenkok/flpytorch, fl_pytorch/utils/algorithms.py (evaluateSgd), fl_pytorch/utils/model_funcs.py (get_train_inputs, compute_loss, get_training_elements), commit 5ee3140febee72c6082cc3ecb8ea48df041308e0
# Report: https://github.com/burlachenkok/flpytorch/issues/12
# FL_PyTorch simulation of FedAvg: every round a few clients compute local SGD steps with
# evaluateSgd on their own shard (iterated mini-batches), the server averages the client models.
# The client-state bookkeeping, logging and the GUI are reduced; CIFAR/EMNIST shards are replaced by
# synthetic 10-class feature vectors split non-IID over 8 clients.
import math
import time

import numpy as np
import torch
import torch.nn as nn


def get_train_inputs(data, label, model, batch_size, device, is_rnn):
    if not is_rnn:
        input = (data,)
    else:
        hidden = model.init_hidden(batch_size, device)
        input = (data, hidden)
        label = label.reshape(-1)
    return input, label


def compute_loss(model, criterion, output, label):
    if type(criterion) is torch.nn.MSELoss and not label.is_floating_point():
        label = label.float()

    if type(criterion) is torch.nn.BCELoss and not label.is_floating_point():
        label = label.float()

    if type(output) == list and len(output) > 1:
        loss = sum([criterion(out, label) for out in output])
    else:
        loss = criterion(output, label)

    return loss


def evaluateSgd(client_state, model, dataloader, criterion, is_rnn, update_statistics=True, evaluate_function=False,
                device=None, args=None):
    model.train(True)
    for p in model.parameters():
        p.grad = None

    if device is None:
        device = client_state["device"]

    total_number_of_samples = len(dataloader.dataset)
    function_value = None

    if evaluate_function:
        function_value = torch.Tensor([0.0]).to(device=device, dtype=model.fl_dtype)

    indicies = client_state['iterated-minibatch-indicies']
    indicies = torch.from_numpy(indicies)
    batch_size_ds = dataloader.batch_size
    iterations = math.ceil(len(indicies) / float(batch_size_ds))

    sampled_samples = len(indicies)

    for i in range(iterations):
        data = []
        label = []
        for j in range(batch_size_ds):
            index = i * batch_size_ds + j
            if index >= sampled_samples:
                break

            d, t = dataloader.dataset[indicies[index]]

            data.append(d.unsqueeze(0))

            if not torch.is_tensor(t):
                if type(criterion) is torch.nn.MSELoss:
                    label.append(torch.Tensor([t]))
                else:
                    label.append(torch.LongTensor([t]))
            else:
                label.append(t.unsqueeze(0))

        data = torch.cat(data)
        label = torch.cat(label)

        start_ts = time.time()
        batch_size = data.shape[0]
        if str(data.device) != device or str(
                label.device) != device or data.dtype != model.fl_dtype or label.dtype != model.fl_dtype:
            data, label = data.to(device=device, dtype=model.fl_dtype), label.to(device=device, dtype=model.fl_dtype)

        if update_statistics:
            client_state["stats"]["dataload_duration"] += (time.time() - start_ts)
            client_state['stats']['full_gradient_oracles'] += float(batch_size) / total_number_of_samples
            client_state['stats']['samples_gradient_oracles'] += batch_size

        input, label = get_train_inputs(data, label, model, batch_size, device, is_rnn)

        outputs = model(*input)
        output = outputs

        loss = compute_loss(model, criterion, output, label)
        loss = loss * (1.0 / sampled_samples)

        if evaluate_function:
            function_value += loss

        loss.backward()

    if evaluate_function:
        return function_value.item()
    else:
        return None


class FeatureDataset(torch.utils.data.Dataset):
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return self.x[i], int(self.y[i])


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    num_clients, num_classes, dim = 8, 10, 32
    centers = rng.randn(num_classes, dim) * 1.5
    clients = []
    for c in range(num_clients):
        probs = rng.dirichlet(np.full(num_classes, 0.5))
        y = rng.choice(num_classes, size=200, p=probs)
        x = centers[y] + rng.randn(200, dim)
        loader = torch.utils.data.DataLoader(FeatureDataset(torch.tensor(x, dtype=torch.float32), y), batch_size=20)
        clients.append(loader)
    yt = rng.randint(0, num_classes, 500)
    xt = torch.tensor(centers[yt] + rng.randn(500, dim), dtype=torch.float32)

    model = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, num_classes))
    model.fl_dtype = torch.float32
    criterion = nn.CrossEntropyLoss(reduction='sum')
    local_lr, local_iters, clients_per_round = 0.1, 5, 4

    for rnd in range(15):
        selected = rng.choice(num_clients, clients_per_round, replace=False)
        global_params = [p.detach().clone() for p in model.parameters()]
        new_params = [torch.zeros_like(p) for p in global_params]
        round_loss = 0.0
        for c in selected:
            with torch.no_grad():
                for p, g in zip(model.parameters(), global_params):
                    p.copy_(g)
            client_state = {"device": "cpu", "stats": {"dataload_duration": 0.0, "full_gradient_oracles": 0.0,
                                                       "samples_gradient_oracles": 0}}
            for it in range(local_iters):
                client_state['iterated-minibatch-indicies'] = rng.choice(len(clients[c].dataset), 20, replace=False)
                f = evaluateSgd(client_state, model, clients[c], criterion, is_rnn=False, evaluate_function=True)
                with torch.no_grad():
                    for p in model.parameters():
                        p -= local_lr * p.grad
            round_loss += f
            with torch.no_grad():
                for acc, p in zip(new_params, model.parameters()):
                    acc += p / clients_per_round
        with torch.no_grad():
            for p, n in zip(model.parameters(), new_params):
                p.copy_(n)
            acc = (model(xt).argmax(1).numpy() == yt).mean()
        print("round %2d  local loss %.4f  global test acc %.3f" % (rnd, round_loss / clients_per_round, acc))


if __name__ == "__main__":
    main()
