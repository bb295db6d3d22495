# Source: Graylab/DL4Proteins-notebooks, notebooks/WS07_GNNsForProteins.ipynb (GCNGraphLevel, TRAIN and EVAL cells), commit 8d3c4fa4e19acd5aa538bfd323eafbdd28f67829
# Report: https://github.com/Graylab/DL4Proteins-notebooks/issues/11
# Workshop 7 (GNNs for proteins): a two-layer GCN with global max pooling classifies protein
# graphs by motion type; the TRAIN cell trains for N epochs, the EVAL cell reports the loss
# and accuracy on the test graphs for 10 epochs. The graphein / PDB pipeline is replaced by
# synthetic residue graphs with 4 node features, torch_geometric's GCNConv,
# global_max_pool and DataLoader by small plain-torch equivalents; plots and log files
# are removed.
import random

import numpy as np
import torch
import torch.nn.functional as F


class Data:
    def __init__(self, x, edge_index, graph_y, batch=None):
        self.x, self.edge_index, self.graph_y, self.batch = x, edge_index, graph_y, batch


class DataLoader:
    def __init__(self, dataset, batch_size=1, shuffle=False):
        self.dataset, self.batch_size, self.shuffle = dataset, batch_size, shuffle

    def __len__(self):
        return (len(self.dataset) + self.batch_size - 1) // self.batch_size

    def __iter__(self):
        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.shuffle(order)
        for s in range(0, len(order), self.batch_size):
            graphs = [self.dataset[i] for i in order[s:s + self.batch_size]]
            xs, edges, batch, offset = [], [], [], 0
            for k, g in enumerate(graphs):
                xs.append(g.x)
                edges.append(g.edge_index + offset)
                batch.append(torch.full((g.x.shape[0],), k, dtype=torch.long))
                offset += g.x.shape[0]
            yield Data(torch.cat(xs), torch.cat(edges, dim=1), torch.stack([g.graph_y for g in graphs]),
                       torch.cat(batch))


class GCNConv(torch.nn.Module):
    def __init__(self, in_channels, out_channels):
        super().__init__()
        self.lin = torch.nn.Linear(in_channels, out_channels, bias=False)
        self.bias = torch.nn.Parameter(torch.zeros(out_channels))

    def forward(self, x, edge_index):
        n = x.shape[0]
        loops = torch.arange(n)
        row = torch.cat([edge_index[0], loops])
        col = torch.cat([edge_index[1], loops])
        deg = torch.zeros(n).index_add_(0, col, torch.ones(col.shape[0]))
        norm = deg[row].rsqrt() * deg[col].rsqrt()
        h = self.lin(x)
        out = torch.zeros_like(h).index_add_(0, col, h[row] * norm[:, None])
        return out + self.bias


def global_max_pool(x, batch):
    size = int(batch.max()) + 1
    return torch.stack([x[batch == b].max(dim=0).values for b in range(size)])


class GCNGraphLevel(torch.nn.Module):
    def __init__(self, in_channels, hidden_channels, out_channels):
        super(GCNGraphLevel, self).__init__()
        self.conv1 = GCNConv(in_channels, hidden_channels)
        self.conv2 = GCNConv(hidden_channels, hidden_channels)
        self.lin = torch.nn.Linear(hidden_channels, out_channels)

    def forward(self, data):
        x, edge_index, batch = data.x, data.edge_index, data.batch

        x = self.conv1(x, edge_index)
        x = F.relu(x)
        x = self.conv2(x, edge_index)

        x = global_max_pool(x, batch)  # Need to pool node features to graph level for graph level tasks

        out = self.lin(x)

        return out


def make_protein_graphs(n, rng):
    graphs = []
    for _ in range(n):
        label = rng.randint(0, 3)
        nodes = rng.randint(12, 30)
        x = rng.normal(0, 1, (nodes, 4)).astype(np.float32)
        x[:, label] += 0.6
        src = np.arange(nodes - 1)
        extra = rng.randint(0, nodes, (2, nodes // 2))
        ei = np.concatenate([np.stack([src, src + 1]), extra], axis=1)
        ei = np.concatenate([ei, ei[::-1]], axis=1)
        graphs.append(Data(torch.from_numpy(x), torch.from_numpy(ei).long(), torch.tensor(label)))
    return graphs


motion_type_to_label = {'hinge': 0, 'shear': 1, 'other': 2}
rng = np.random.RandomState(0)
random.seed(0)
torch.manual_seed(0)
train_pyg_data_list = make_protein_graphs(240, rng)
test_pyg_data_list = make_protein_graphs(120, rng)


def main():
    # TRAIN
    # Create DataLoader
    train_loader = DataLoader(train_pyg_data_list, batch_size=32, shuffle=True)

    # Initialize model, loss, and optimizer
    model = GCNGraphLevel(in_channels=4, hidden_channels=16, out_channels=len(motion_type_to_label))
    optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
    criterion = torch.nn.CrossEntropyLoss()

    optimizer_steps = 0

    for epoch in range(30):
        model.train()
        total_train_loss = 0
        correct_train = 0
        for data in train_loader:
            optimizer.zero_grad()
            out = model(data)
            loss = criterion(out, data.graph_y)
            loss.backward()
            optimizer.step()

            total_train_loss += loss.item()
            pred = out.argmax(dim=1)
            correct_train += (pred == data.graph_y).sum().item()
            optimizer_steps += 1

        train_loss = total_train_loss / len(train_loader)
        train_accuracy = correct_train / len(train_loader.dataset)
        if epoch % 10 == 9:
            print(f'Epoch {epoch}, Train Loss: {train_loss:.4f}, Train Accuracy: {train_accuracy:.4f}')

    # EVAL
    # Create DataLoader
    test_loader = DataLoader(test_pyg_data_list, batch_size=32)

    optimizer_steps = 0

    for epoch in range(10):
        model.eval()
        total_eval_loss = 0
        correct_eval = 0
        for data in test_loader:
            optimizer.zero_grad()
            out = model(data)
            loss = criterion(out, data.graph_y)
            loss.backward()
            optimizer.step()

            total_eval_loss += loss.item()
            pred = out.argmax(dim=1)
            correct_eval += (pred == data.graph_y).sum().item()
            optimizer_steps += 1

        eval_loss = total_eval_loss / len(test_loader)
        eval_accuracy = correct_eval / len(test_loader.dataset)

        print(f'Epoch {epoch}, Eval Loss: {eval_loss:.4f}, Eval Accuracy: {eval_accuracy:.4f}')


if __name__ == '__main__':
    main()
