# Report: https://github.com/microsoft/nni/issues/4521
# NNI pruning workflow: build the model and its optimizer, compute L1-norm channel masks,
# then "speed up" the model (pruned Conv2d/BatchNorm2d/Linear layers are replaced by smaller
# new modules holding the kept weights) and fine-tune. NNI's L1NormPruner and ModelSpeedup
# are reduced to the two functions below; data is a synthetic 10-class image task.
import torch
import torch.nn as nn
import torch.nn.functional as F


class NaiveModel(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3, 1, 1)
        self.bn1 = nn.BatchNorm2d(16)
        self.conv2 = nn.Conv2d(16, 32, 3, 1, 1)
        self.bn2 = nn.BatchNorm2d(32)
        self.fc1 = nn.Linear(32 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        x = x.flatten(1)
        return self.fc2(F.relu(self.fc1(x)))


def l1_norm_masks(model, sparsity):
    masks = {}
    for name in ('conv1', 'conv2'):
        w = getattr(model, name).weight.detach()
        norms = w.abs().sum(dim=(1, 2, 3))
        keep = int(round(w.size(0) * (1 - sparsity)))
        masks[name] = torch.argsort(norms, descending=True)[:keep].sort().values
    return masks


@torch.no_grad()
def speedup_model(model, masks):
    k1, k2 = masks['conv1'], masks['conv2']
    conv1 = nn.Conv2d(1, len(k1), 3, 1, 1)
    conv1.weight.copy_(model.conv1.weight[k1]); conv1.bias.copy_(model.conv1.bias[k1])
    bn1 = nn.BatchNorm2d(len(k1))
    bn1.weight.copy_(model.bn1.weight[k1]); bn1.bias.copy_(model.bn1.bias[k1])
    conv2 = nn.Conv2d(len(k1), len(k2), 3, 1, 1)
    conv2.weight.copy_(model.conv2.weight[k2][:, k1]); conv2.bias.copy_(model.conv2.bias[k2])
    bn2 = nn.BatchNorm2d(len(k2))
    bn2.weight.copy_(model.bn2.weight[k2]); bn2.bias.copy_(model.bn2.bias[k2])
    cols = (k2[:, None] * 16 + torch.arange(16)[None, :]).flatten()
    fc1 = nn.Linear(len(cols), 64)
    fc1.weight.copy_(model.fc1.weight[:, cols]); fc1.bias.copy_(model.fc1.bias)
    model.conv1, model.bn1, model.conv2, model.bn2, model.fc1 = conv1, bn1, conv2, bn2, fc1


def make_data(n, gen):
    y = torch.randint(0, 10, (n,), generator=gen)
    protos = torch.randn(10, 1, 16, 16, generator=torch.Generator().manual_seed(123))
    x = protos[y] + 2.5 * torch.randn(n, 1, 16, 16, generator=gen)
    return x, y


def evaluate(model, x, y):
    model.eval()
    with torch.no_grad():
        acc = (model(x).argmax(1) == y).float().mean().item()
    model.train()
    return acc


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x_train, y_train = make_data(2000, gen)
    x_test, y_test = make_data(500, gen)
    model = NaiveModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

    masks = l1_norm_masks(model, sparsity=0.5)
    speedup_model(model, masks)
    print("pruned model:", model)

    for epoch in range(5):
        for i in range(0, 2000, 50):
            optimizer.zero_grad()
            loss = F.cross_entropy(model(x_train[i:i + 50]), y_train[i:i + 50])
            loss.backward()
            optimizer.step()
        print("finetune epoch %d loss %.4f test acc %.3f" % (epoch, loss.item(), evaluate(model, x_test, y_test)))


if __name__ == "__main__":
    main()
