# Source: ORNL/HydraGNN, hydragnn/train/train_validate_test.py (train_validate_test, train, validate, get_reduced_stat), hydragnn/utils/model.py (get_model_or_module), hydragnn/utils/distributed.py (get_distributed_model), hydragnn/models/Base.py (forward, loss_hpweighted), commit 1b33eab22c308d876813d25d26c324523fbb3e2b
# Report: https://github.com/ORNL/HydraGNN/pull/136
# Run: torchrun --nproc-per-node 2 train.py
# HydraGNN: a GNN stack with a graph-level head predicting a molecular property, trained with
# DistributedDataParallel on 2 gloo processes. PyG convolutions are replaced by a GIN-style
# convolution written with index_add_; QM9 by synthetic molecular graphs.
import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn import BatchNorm1d, Linear, Module, ModuleList, ReLU, Sequential
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler


class Batch:
    def __init__(self, graphs):
        xs, edges, ys, batch = [], [], [], []
        offset = 0
        for i, (x, edge_index, y) in enumerate(graphs):
            xs.append(x)
            edges.append(edge_index + offset)
            ys.append(y)
            batch.append(torch.full((x.shape[0],), i, dtype=torch.long))
            offset += x.shape[0]
        self.x = torch.cat(xs)
        self.edge_index = torch.cat(edges, 1)
        self.y = torch.stack(ys)
        self.batch = torch.cat(batch)
        self.num_graphs = len(graphs)


def global_mean_pool(x, batch):
    size = int(batch.max()) + 1
    out = torch.zeros(size, x.shape[1]).index_add_(0, batch, x)
    count = torch.zeros(size).index_add_(0, batch, torch.ones(batch.shape[0]))
    return out / count[:, None]


class GINConv(Module):
    def __init__(self, input_dim, output_dim):
        super().__init__()
        self.nn = Sequential(Linear(input_dim, output_dim), ReLU(), Linear(output_dim, output_dim))
        self.eps = 0.0

    def forward(self, x, edge_index):
        aggr = torch.zeros_like(x).index_add_(0, edge_index[1], x[edge_index[0]])
        return self.nn((1 + self.eps) * x + aggr)


class Base(Module):
    def __init__(self, input_dim, hidden_dim, output_dim, num_conv_layers=3, loss_weights=(1.0,)):
        super().__init__()
        self.num_heads = len(output_dim)
        self.loss_weights = loss_weights
        self.loss_function = F.mse_loss
        self.convs = ModuleList()
        self.batch_norms = ModuleList()
        for i in range(num_conv_layers):
            self.convs.append(GINConv(input_dim if i == 0 else hidden_dim, hidden_dim))
            self.batch_norms.append(BatchNorm1d(hidden_dim))
        self.heads_NN = ModuleList()
        for ihead in range(self.num_heads):
            self.heads_NN.append(Sequential(Linear(hidden_dim, 20), ReLU(), Linear(20, output_dim[ihead])))

    def forward(self, data):
        x, edge_index, batch = data.x, data.edge_index, data.batch
        for conv, batch_norm in zip(self.convs, self.batch_norms):
            c = conv(x=x, edge_index=edge_index)
            x = F.relu(batch_norm(c))
        x_graph = global_mean_pool(x, batch)
        outputs = []
        for headloc in self.heads_NN:
            outputs.append(headloc(x_graph))
        return outputs

    def loss(self, pred, value, head_index):
        return self.loss_hpweighted(pred, value, head_index)

    def loss_hpweighted(self, pred, value, head_index):
        tot_loss = 0
        tasks_loss = []
        for ihead in range(self.num_heads):
            head_pre = pred[ihead]
            pred_shape = head_pre.shape
            head_val = value[:, head_index[ihead]]
            value_shape = head_val.shape
            if pred_shape != value_shape:
                head_val = torch.reshape(head_val, pred_shape)
            tot_loss += self.loss_function(head_pre, head_val) * self.loss_weights[ihead]
            tasks_loss.append(self.loss_function(head_pre, head_val))
        return tot_loss, tasks_loss


def is_model_distributed(model):
    return isinstance(model, torch.nn.parallel.DistributedDataParallel)


def get_model_or_module(model):
    if is_model_distributed(model):
        return model.module
    else:
        return model


def get_distributed_model(model, verbosity=0):
    if dist.is_initialized():
        model = torch.nn.parallel.DistributedDataParallel(model)
    return model


def get_reduced_stat(total_error, tasks_error):
    if dist.get_world_size() > 1:
        dist.all_reduce(total_error, op=dist.ReduceOp.SUM)
        total_error = total_error / dist.get_world_size()
        dist.all_reduce(tasks_error, op=dist.ReduceOp.SUM)
        tasks_error = tasks_error / dist.get_world_size()
    return total_error, tasks_error


def train(loader, model, opt, verbosity):
    total_error = 0
    tasks_error = torch.zeros(get_model_or_module(model).num_heads)
    num_samples_local = 0
    model.train()
    for data in loader:
        opt.zero_grad()
        head_index = list(range(get_model_or_module(model).num_heads))
        pred = model(data)
        loss, tasks_loss = get_model_or_module(model).loss(pred, data.y, head_index)
        loss.backward()
        opt.step()
        with torch.no_grad():
            total_error += loss * data.num_graphs
            num_samples_local += data.num_graphs
            for itask in range(len(tasks_loss)):
                tasks_error[itask] += tasks_loss[itask] * data.num_graphs
    train_error = total_error / num_samples_local
    tasks_error = tasks_error / num_samples_local
    return train_error, tasks_error


@torch.no_grad()
def validate(loader, model, verbosity, reduce_gpus=True):
    total_error = 0
    tasks_error = torch.zeros(get_model_or_module(model).num_heads)
    num_samples_local = 0
    model.eval()
    for data in loader:
        head_index = list(range(get_model_or_module(model).num_heads))
        pred = model(data)
        error, tasks_loss = get_model_or_module(model).loss(pred, data.y, head_index)
        total_error += error * data.num_graphs
        num_samples_local += data.num_graphs
        for itask in range(len(tasks_loss)):
            tasks_error[itask] += tasks_loss[itask] * data.num_graphs
    val_error = total_error / num_samples_local
    tasks_error = tasks_error / num_samples_local
    if reduce_gpus:
        val_error, tasks_error = get_reduced_stat(val_error, tasks_error)
    return val_error, tasks_error


def train_validate_test(model, optimizer, train_loader, val_loader, scheduler, config, verbosity=0):
    num_epoch = config["Training"]["num_epoch"]
    model = get_model_or_module(model)

    for epoch in range(0, num_epoch):
        for dataloader in [train_loader, val_loader]:
            if getattr(dataloader.sampler, "set_epoch", None) is not None:
                dataloader.sampler.set_epoch(epoch)
        train_loss, train_taskserr = train(train_loader, model, optimizer, verbosity)
        val_loss, val_taskserr = validate(val_loader, model, verbosity)
        scheduler.step(val_loss)
        if dist.get_rank() == 0:
            print(f"Epoch: {epoch:02d}, Train Loss: {train_loss:.8f}, Val Loss: {val_loss:.8f}")


def make_graph(gen):
    n = int(torch.randint(5, 13, (1,), generator=gen))
    atom = torch.randint(0, 5, (n,), generator=gen)
    x = F.one_hot(atom, 5).float()
    src = torch.arange(n - 1)
    extra = torch.randint(0, n, (2, n // 3), generator=gen)
    edge_index = torch.cat([torch.stack([src, src + 1]), extra], 1)
    edge_index = torch.cat([edge_index, edge_index.flip(0)], 1)
    deg = torch.zeros(n).index_add_(0, edge_index[0], torch.ones(edge_index.shape[1]))
    y = (torch.tensor([0.5, -1.0, 2.0, 0.0, 1.0])[atom] * deg).mean(0, keepdim=True)
    return x, edge_index, y


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    gen = torch.Generator().manual_seed(0)
    trainset = [make_graph(gen) for _ in range(256)]
    valset = [make_graph(gen) for _ in range(64)]
    torch.manual_seed(0)
    model = Base(input_dim=5, hidden_dim=32, output_dim=[1])
    model = get_distributed_model(model)
    train_loader = DataLoader(trainset, batch_size=16, sampler=DistributedSampler(trainset), collate_fn=Batch)
    val_loader = DataLoader(valset, batch_size=16, sampler=DistributedSampler(valset), collate_fn=Batch)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, mode="min", factor=0.5, patience=5, min_lr=1e-5)
    config = {"Training": {"num_epoch": 6}}
    train_validate_test(model, optimizer, train_loader, val_loader, scheduler, config)

    flat = torch.cat([p.detach().flatten() for p in model.parameters()])
    gathered = [torch.zeros_like(flat) for _ in range(dist.get_world_size())]
    dist.all_gather(gathered, flat)
    if rank == 0:
        print("max |param(rank 0) - param(rank 1)| after training: %.6f" % (gathered[0] - gathered[1]).abs().max().item())
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
