# Source: mlelarge/graph_neural_net, toolbox/losses.py (triplet_loss), models/siamese_net.py, models/base_model.py, models/layers.py, trainer.py, toolbox/metrics.py, commit caeba628a0f7aab89d99dcd9a22578441c314750
# Report: https://github.com/mlelarge/graph_neural_net/pull/37
# Graph alignment (QAP) with a siamese invariant/equivariant GNN: a graph and its noisy copy are
# embedded node by node, raw_scores[b, i, j] = <x1_i, x2_j>, and every node i of the first graph
# must pick node i of the second. Erdos-Renyi graphs are generated with torch instead of networkx.
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class MlpBlock(nn.Module):
    def __init__(self, in_features, out_features, depth_of_mlp, activation_fn=F.relu):
        super().__init__()
        self.activation = activation_fn
        self.depth_mlp = depth_of_mlp
        self.convs = nn.ModuleList()
        for _ in range(depth_of_mlp):
            self.convs.append(nn.Conv2d(in_features, out_features, kernel_size=1, padding=0, bias=True))
            nn.init.xavier_uniform_(self.convs[-1].weight)
            in_features = out_features

    def forward(self, inputs):
        out = inputs
        for conv_layer in self.convs:
            out = self.activation(conv_layer(out))
        return out


class RegularBlock(nn.Module):
    def __init__(self, in_features, out_features, depth_of_mlp, name=""):
        super().__init__()
        self.name = name
        self.mlp1 = MlpBlock(in_features, out_features, depth_of_mlp)
        self.mlp2 = MlpBlock(in_features, out_features, depth_of_mlp)
        self.mlp3 = MlpBlock(in_features + out_features, out_features, depth_of_mlp)
        self.last_layer = nn.Conv2d(out_features, out_features, kernel_size=1, padding=0, bias=True)
        self.bn_mult = nn.BatchNorm2d(out_features)
        self.bn_out = nn.BatchNorm2d(out_features)

    def forward(self, inputs):
        mlp1 = self.mlp1(inputs)
        mlp2 = self.mlp2(inputs)
        mult = torch.matmul(mlp1, mlp2)
        mult = self.bn_mult(mult)
        out = torch.cat((inputs, mult), dim=1)
        out = self.mlp3(out)
        out = self.last_layer(out)
        return self.bn_out(out)


class ColumnMaxPooling(nn.Module):
    def forward(self, x):
        return torch.max(x, 2)[0]


class BaseModel(nn.Module):
    def __init__(self, original_features_num, num_blocks, in_features, out_features, depth_of_mlp, **kwargs):
        super().__init__()
        self.original_features_num = original_features_num
        self.num_blocks = num_blocks
        self.in_features = in_features
        self.out_features = out_features
        self.depth_of_mlp = depth_of_mlp
        self.embedding = nn.Embedding(2, in_features)
        last_layer_features = self.in_features
        self.reg_blocks = nn.ModuleList()
        for i in range(self.num_blocks - 1):
            mlp_block = RegularBlock(last_layer_features, in_features, self.depth_of_mlp, name=f'block_{i}')
            self.reg_blocks.append(mlp_block)
        mlp_block = RegularBlock(in_features, out_features, depth_of_mlp, name=f'block_{self.num_blocks-1}')
        self.reg_blocks.append(mlp_block)

    def forward(self, x):
        x = self.embedding(x[:, :, :, 1].long())
        x = x.permute(0, 3, 1, 2)
        for block in self.reg_blocks:
            x = block(x)
        return x.permute(0, 2, 3, 1)


class Simple_Node_Embedding(nn.Module):
    def __init__(self, original_features_num, num_blocks, in_features, out_features, depth_of_mlp, **kwargs):
        super().__init__()
        self.base_model = BaseModel(original_features_num, num_blocks, in_features, out_features, depth_of_mlp)
        self.suffix = ColumnMaxPooling()

    def forward(self, x):
        x = self.base_model(x)
        x = self.suffix(x)
        return x


class Siamese_Model(nn.Module):
    def __init__(self, original_features_num, num_blocks, in_features, out_features, depth_of_mlp, embedding_class=Simple_Node_Embedding):
        super().__init__()
        self.node_embedder = embedding_class(original_features_num, num_blocks, in_features, out_features, depth_of_mlp)

    def forward(self, x):
        assert x.shape[1] == 2, f"Data given is not of the shape (x1,x2) => data.shape={x.shape}"
        x = x.permute(1, 0, 2, 3, 4)
        x1 = x[0]
        x2 = x[1]
        x1 = self.node_embedder(x1)
        x2 = self.node_embedder(x2)
        raw_scores = torch.matmul(x1, torch.transpose(x2, 1, 2))
        return raw_scores


class triplet_loss(nn.Module):
    def __init__(self, loss_reduction='mean', loss=nn.CrossEntropyLoss(reduction='sum')):
        super(triplet_loss, self).__init__()
        self.loss = loss
        if loss_reduction == 'mean':
            self.increments = lambda new_loss, n_vertices: (new_loss, n_vertices)
        elif loss_reduction == 'mean_of_mean':
            self.increments = lambda new_loss, n_vertices: (new_loss / n_vertices, 1)
        else:
            raise ValueError('Unknown loss_reduction parameters {}'.format(loss_reduction))

    def forward(self, raw_scores, target_dummy):
        """
        outputs is the output of siamese network (bs,n_vertices,n_vertices)
        """
        device = raw_scores.device
        loss = 0
        total = 0
        outputs = torch.softmax(raw_scores, -1)
        for out in outputs:
            n_vertices = out.shape[0]
            ide = torch.arange(n_vertices)
            target = ide.to(device)
            incrs = self.increments(self.loss(out, target), n_vertices)
            loss += incrs[0]
            total += incrs[1]
        return loss / total


def accuracy_max(weights, dummy_target, labels=None, aggregate_score=True):
    acc = 0
    total_n_vertices = 0
    for i, weight in enumerate(weights):
        label = np.arange(len(weight))
        weight = weight.cpu().detach().numpy()
        preds = np.argmax(weight, 1)
        acc += np.sum(preds == label)
        total_n_vertices += len(weight)
    return acc, total_n_vertices


def erdos_renyi(p, n, gen):
    upper = torch.triu((torch.rand(n, n, generator=gen) < p).float(), diagonal=1)
    return upper + upper.t()


def adjacency_matrix_to_tensor_representation(W):
    degrees = W.sum(1)
    B = torch.zeros((len(W), len(W), 2))
    B[:, :, 1] = W
    indices = torch.arange(len(W))
    B[indices, indices, 0] = degrees
    return B


def compute_example(gen, n_vertices=16, edge_density=0.2, noise=0.05):
    W = erdos_renyi(edge_density, n_vertices, gen)
    noise1 = erdos_renyi(noise, n_vertices, gen)
    noise2 = erdos_renyi(edge_density * noise / (1 - edge_density), n_vertices, gen)
    W_noise = W * (1 - noise1) + (1 - W) * noise2
    B = adjacency_matrix_to_tensor_representation(W)
    B_noise = adjacency_matrix_to_tensor_representation(W_noise)
    return torch.cat((B.unsqueeze(0), B_noise.unsqueeze(0))), torch.empty(0)


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    train = [compute_example(gen) for _ in range(256)]
    val = [compute_example(gen) for _ in range(64)]
    batch_size = 16
    model = Siamese_Model(original_features_num=2, num_blocks=2, in_features=16, out_features=16, depth_of_mlp=2)
    criterion = triplet_loss()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(6):
        model.train()
        end = time.time()
        for i in range(0, len(train), batch_size):
            data = torch.stack([d for d, _ in train[i:i + batch_size]])
            target = torch.stack([t for _, t in train[i:i + batch_size]])
            raw_scores = model(data)
            loss = criterion(raw_scores, target)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        model.eval()
        with torch.no_grad():
            data = torch.stack([d for d, _ in val])
            raw_scores = model(data)
            val_loss = criterion(raw_scores, None)
            acc, n = accuracy_max(raw_scores, None)
        print('Epoch: [{0}]\tTime {1:.2f}\ttrain loss {2:.4f}\tval loss {3:.4f}\tval acc {4:.4f}'.format(
            epoch, time.time() - end, loss.item(), val_loss.item(), acc / n))


if __name__ == "__main__":
    main()
