# Source: msight-tech/research-ms-loss, ret_benchmark/solver/build.py, commit b68507d4e22d8a6d3d3c0e6c31be708f9dcd20ee
# Report: https://github.com/msight-tech/research-ms-loss/issues/27
import copy
import random
from bisect import bisect_right
from collections import OrderedDict, defaultdict

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset
from torch.utils.data.sampler import Sampler

torch.manual_seed(0)
np.random.seed(0)
random.seed(0)

BASE_LR = 1e-3
WEIGHT_DECAY = 0.0005
MAX_ITERS = 160
STEPS = [120]
GAMMA = 0.1
WARMUP_FACTOR = 0.01
WARMUP_ITERS = 20
TRAIN_BATCHSIZE = 80
NUM_INSTANCES = 5
VERBOSE = 80
SCALE_POS = 2.0
SCALE_NEG = 40.0
HEAD_DIM = 64

# synthetic "images": class prototypes pushed through a fixed random generator
LATENT, IN_DIM = 24, 192
gen = nn.Sequential(nn.Linear(LATENT, 128), nn.Tanh(), nn.Linear(128, IN_DIM))
for p in gen.parameters():
    p.requires_grad_(False)
protos = torch.randn(400, LATENT)


def make_split(classes, per_class):
    labels = torch.tensor(classes).repeat_interleave(per_class)
    with torch.no_grad():
        x = gen(protos[labels] + 1.4 * torch.randn(len(labels), LATENT))
    return x, labels


class BaseDataSet(Dataset):
    def __init__(self, x, labels):
        self.x, self.label_list = x, [int(v) for v in labels]
        self.label_index_dict = defaultdict(list)
        for i, lab in enumerate(self.label_list):
            self.label_index_dict[lab].append(i)

    def __len__(self):
        return len(self.label_list)

    def __getitem__(self, i):
        return self.x[i], self.label_list[i]


class RandomIdentitySampler(Sampler):
    def __init__(self, dataset, batch_size, num_instances, max_iters):
        self.label_index_dict = dataset.label_index_dict
        self.batch_size = batch_size
        self.K = num_instances
        self.num_labels_per_batch = self.batch_size // self.K
        self.max_iters = max_iters
        self.labels = list(self.label_index_dict.keys())

    def __len__(self):
        return self.max_iters

    def _prepare_batch(self):
        batch_idxs_dict = defaultdict(list)
        for label in self.labels:
            idxs = copy.deepcopy(self.label_index_dict[label])
            if len(idxs) < self.K:
                idxs.extend(np.random.choice(idxs, size=self.K - len(idxs), replace=True))
            random.shuffle(idxs)
            batch_idxs_dict[label] = [idxs[i * self.K: (i + 1) * self.K] for i in range(len(idxs) // self.K)]
        avai_labels = copy.deepcopy(self.labels)
        return batch_idxs_dict, avai_labels

    def __iter__(self):
        batch_idxs_dict, avai_labels = self._prepare_batch()
        for _ in range(self.max_iters):
            batch = []
            if len(avai_labels) < self.num_labels_per_batch:
                batch_idxs_dict, avai_labels = self._prepare_batch()
            selected_labels = random.sample(avai_labels, self.num_labels_per_batch)
            for label in selected_labels:
                batch_idxs = batch_idxs_dict[label].pop(0)
                batch.extend(batch_idxs)
                if len(batch_idxs_dict[label]) == 0:
                    avai_labels.remove(label)
            yield batch


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(IN_DIM, 256)
        self.bn1 = nn.BatchNorm1d(256)
        self.fc2 = nn.Linear(256, 256)
        self.bn2 = nn.BatchNorm1d(256)

    def forward(self, x):
        x = torch.relu(self.bn1(self.fc1(x)))
        return torch.relu(self.bn2(self.fc2(x)))


class LinearNorm(nn.Module):
    def __init__(self, in_channels):
        super().__init__()
        self.fc = nn.Linear(in_channels, HEAD_DIM)
        nn.init.kaiming_normal_(self.fc.weight, a=0, mode='fan_out')
        nn.init.constant_(self.fc.bias, 0.0)

    def forward(self, x):
        x = self.fc(x)
        x = nn.functional.normalize(x, p=2, dim=1)
        return x


class MultiSimilarityLoss(nn.Module):
    def __init__(self):
        super().__init__()
        self.thresh = 0.5
        self.margin = 0.1
        self.scale_pos = SCALE_POS
        self.scale_neg = SCALE_NEG

    def forward(self, feats, labels):
        batch_size = feats.size(0)
        sim_mat = torch.matmul(feats, torch.t(feats))
        epsilon = 1e-5
        loss = list()
        for i in range(batch_size):
            pos_pair_ = sim_mat[i][labels == labels[i]]
            pos_pair_ = pos_pair_[pos_pair_ < 1 - epsilon]
            neg_pair_ = sim_mat[i][labels != labels[i]]
            neg_pair = neg_pair_[neg_pair_ + self.margin > min(pos_pair_)]
            pos_pair = pos_pair_[pos_pair_ - self.margin < max(neg_pair_)]
            if len(neg_pair) < 1 or len(pos_pair) < 1:
                continue
            pos_loss = 1.0 / self.scale_pos * torch.log(
                1 + torch.sum(torch.exp(-self.scale_pos * (pos_pair - self.thresh))))
            neg_loss = 1.0 / self.scale_neg * torch.log(
                1 + torch.sum(torch.exp(self.scale_neg * (neg_pair - self.thresh))))
            loss.append(pos_loss + neg_loss)
        if len(loss) == 0:
            return torch.zeros([], requires_grad=True)
        loss = sum(loss) / batch_size
        return loss


class WarmupMultiStepLR(torch.optim.lr_scheduler.LRScheduler):
    def __init__(self, optimizer, milestones, gamma=0.1, warmup_factor=1.0 / 3,
                 warmup_iters=500, warmup_method="linear", last_epoch=-1):
        self.milestones = milestones
        self.gamma = gamma
        self.warmup_factor = warmup_factor
        self.warmup_iters = warmup_iters
        self.warmup_method = warmup_method
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        warmup_factor = 1
        if self.last_epoch < self.warmup_iters:
            alpha = float(self.last_epoch) / self.warmup_iters
            warmup_factor = self.warmup_factor * (1 - alpha) + alpha
        return [base_lr * warmup_factor * self.gamma ** bisect_right(self.milestones, self.last_epoch)
                for base_lr in self.base_lrs]


def build_optimizer(model):
    params = []
    for key, value in model.named_parameters():
        if not value.requires_grad:
            continue
        lr_mul = 1.0
        if "backbone" in key:
            lr_mul = 0.1
        params += [{"params": [value], "lr_mul": lr_mul}]
    optimizer = torch.optim.Adam(params, lr=BASE_LR, weight_decay=WEIGHT_DECAY)
    return optimizer


def set_bn_eval(m):
    classname = m.__class__.__name__
    if classname.find('BatchNorm') != -1:
        m.eval()


def recall_k(feats, labels, k=1):
    sim_mat = np.matmul(feats, np.transpose(feats))
    match_counter = 0
    for i in range(len(sim_mat)):
        pos_sim = sim_mat[i][labels == labels[i]]
        neg_sim = sim_mat[i][labels != labels[i]]
        thresh = np.sort(pos_sim)[-2]
        if np.sum(neg_sim > thresh) < k:
            match_counter += 1
    return float(match_counter) / len(sim_mat)


@torch.no_grad()
def feat_extractor(model, loader):
    return torch.cat([model(x) for x, _ in loader]).numpy()


def main():
    # "ImageNet" pre-training of the backbone on disjoint classes 200..399
    backbone = Backbone()
    pre_head = nn.Linear(256, 200)
    pre_x, pre_y = make_split(list(range(200, 400)), 20)
    pre_opt = torch.optim.Adam(list(backbone.parameters()) + list(pre_head.parameters()), lr=2e-3)
    for it in range(200):
        idx = torch.randint(0, len(pre_y), (256,))
        pre_loss = nn.functional.cross_entropy(pre_head(backbone(pre_x[idx])), pre_y[idx] - 200)
        pre_opt.zero_grad()
        pre_loss.backward()
        pre_opt.step()
    print(f"backbone pre-training loss {pre_loss.item():.4f}")

    # CUB-style protocol: train on classes 0..49, retrieve on unseen classes 50..99
    train_set = BaseDataSet(*make_split(list(range(0, 50)), 30))
    val_set = BaseDataSet(*make_split(list(range(50, 100)), 30))
    train_loader = DataLoader(train_set, batch_sampler=RandomIdentitySampler(
        train_set, TRAIN_BATCHSIZE, NUM_INSTANCES, MAX_ITERS))
    val_loader = DataLoader(val_set, batch_size=256, shuffle=False)

    model = nn.Sequential(OrderedDict([('backbone', backbone), ('head', LinearNorm(256))]))
    pretrained = {k: v.detach().clone() for k, v in model.backbone.state_dict().items() if 'weight' in k}
    criterion = MultiSimilarityLoss()
    optimizer = build_optimizer(model)
    scheduler = WarmupMultiStepLR(optimizer, STEPS, GAMMA, warmup_factor=WARMUP_FACTOR,
                                  warmup_iters=WARMUP_ITERS, warmup_method='linear')

    best_recall, best_iteration = 0, -1
    val_labels = np.array(val_set.label_list)
    for iteration, (images, targets) in enumerate(train_loader):
        if iteration % VERBOSE == 0:
            model.eval()
            recall_curr = recall_k(feat_extractor(model, val_loader), val_labels)
            if recall_curr > best_recall:
                best_recall, best_iteration = recall_curr, iteration
            print(f"Recall@1 at iteration {iteration:06d}: {recall_curr:.3f}")
        model.train()
        model.apply(set_bn_eval)
        iteration = iteration + 1

        feats = model(images)
        loss = criterion(feats, targets)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        scheduler.step()

        if iteration % 40 == 0:
            drift = np.mean([((model.backbone.state_dict()[k] - v).norm() / v.norm()).item()
                             for k, v in pretrained.items()])
            lrs = sorted({round(g["lr"], 8) for g in optimizer.param_groups})
            print(f"iter: {iteration}  loss: {loss.item():.4f}  lr: {lrs}  backbone drift from pretrained: {drift:.4f}")

    model.eval()
    recall_curr = recall_k(feat_extractor(model, val_loader), val_labels)
    if recall_curr > best_recall:
        best_recall, best_iteration = recall_curr, MAX_ITERS
    print(f"Recall@1 at iteration {MAX_ITERS:06d}: {recall_curr:.3f}")
    print(f"Best iteration: {best_iteration:06d} | best recall {best_recall:.3f}")


if __name__ == "__main__":
    main()
