# Source: DearCaat/RRT-MIL, main.py (main, one_fold, train_loop, val_loop, test), dataloader.py (get_kflod, data_split), modules/attmil.py (DAttention), utils.py (five_scores), commit 7ecbdfb8955594b430a8b93cf880f22cfaaecacc
# Report: https://github.com/DearCaat/RRT-MIL/issues/22
# Multiple-instance learning on whole-slide images: k-fold cross-validation over slides,
# an attention-MIL (AB-MIL) head over patch features, per-epoch evaluation with AUC,
# the epoch with the best AUC is kept and the fold's test split is scored with it.
# CAMELYON16 ResNet-50 patch features become synthetic 64-d patch features (a few weak
# "tumour" patches in positive slides, 20% noisy slide labels); sklearn metrics are
# re-implemented in numpy; checkpoints are kept in memory; wandb / amp are dropped.
import copy
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset


class Args:
    datasets = "camelyon16"
    cv_fold = 3
    val_ratio = 0.
    num_epoch = 20
    lr = 2e-4
    weight_decay = 1e-5
    batch_size = 1
    seed = 2021
    input_dim = 64
    n_classes = 2
    save_best_model_stage = 0.
    fix_loader_random = True


def seed_torch(seed=2021):
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


def data_split(full_list, ratio, shuffle=True, label=None, label_balance_val=True):
    if label_balance_val and label is not None:
        _label = label[full_list]
        _label_uni = np.unique(_label)
        sublist_1 = []
        sublist_2 = []

        for _l in _label_uni:
            _list = full_list[_label == _l]
            n_total = len(_list)
            offset = int(n_total * ratio)
            if shuffle:
                random.shuffle(_list)
            sublist_1.extend(_list[:offset])
            sublist_2.extend(_list[offset:])
        return np.array(sublist_1), np.array(sublist_2)


def stratified_kfold(k, labels):
    folds = [[] for _ in range(k)]
    for c in np.unique(labels):
        idx = np.where(labels == c)[0]
        for j, i in enumerate(idx):
            folds[j % k].append(i)
    for j in range(k):
        test_index = np.sort(np.array(folds[j]))
        train_index = np.setdiff1d(np.arange(len(labels)), test_index)
        yield train_index, test_index


def get_kflod(k, patients_array, labels_array, val_ratio=False, label_balance_val=True):
    train_patients_list, train_labels_list = [], []
    test_patients_list, test_labels_list = [], []
    val_patients_list, val_labels_list = [], []
    for train_index, test_index in stratified_kfold(k, labels_array):
        if val_ratio != 0.:
            val_index, train_index = data_split(train_index, val_ratio, True, labels_array, label_balance_val)
            x_val, y_val = patients_array[val_index], labels_array[val_index]
        else:
            x_val, y_val = [], []
        x_train, x_test = patients_array[train_index], patients_array[test_index]
        y_train, y_test = labels_array[train_index], labels_array[test_index]

        train_patients_list.append(x_train)
        train_labels_list.append(y_train)
        test_patients_list.append(x_test)
        test_labels_list.append(y_test)
        val_patients_list.append(x_val)
        val_labels_list.append(y_val)
    return train_patients_list, train_labels_list, test_patients_list, test_labels_list, val_patients_list, val_labels_list


def make_slides(n, seed, dim=64, n_patch=16, label_noise=0.2):
    """Synthetic CAMELYON16-like bags: positive slides hold 2-5 weak tumour patches."""
    rng = np.random.RandomState(seed)
    tumour = rng.randn(dim).astype(np.float32)
    tumour /= np.linalg.norm(tumour)
    bags, labels = [], []
    for i in range(n):
        y = i % 2
        x = rng.randn(n_patch, dim).astype(np.float32)
        if y == 1:
            k = rng.randint(2, 6)
            x[:k] += 2.5 * tumour
        if rng.rand() < label_noise:
            y = 1 - y
        bags.append(torch.from_numpy(x))
        labels.append(y)
    return bags, np.array(labels)


class C16Dataset(Dataset):
    def __init__(self, file_name, file_label, bank):
        self.slide_name = list(file_name)
        self.slide_label = [int(v) for v in file_label]
        self.bank = bank

    def __len__(self):
        return len(self.slide_name)

    def __getitem__(self, idx):
        return self.bank[int(self.slide_name[idx])], self.slide_label[idx]


def initialize_weights(module):
    for m in module.modules():
        if isinstance(m, nn.Linear):
            nn.init.xavier_normal_(m.weight)
            if m.bias is not None:
                m.bias.data.zero_()


class DAttention(nn.Module):
    def __init__(self, input_dim, n_classes, dropout, act, rrt=None):
        super(DAttention, self).__init__()
        self.L = 512
        self.D = 128
        self.K = 1
        self.feature = [nn.Linear(input_dim, 512)]
        if act.lower() == 'gelu':
            self.feature += [nn.GELU()]
        else:
            self.feature += [nn.ReLU()]
        if dropout:
            self.feature += [nn.Dropout(0.25)]
        self.feature = nn.Sequential(*self.feature)

        self.attention = nn.Sequential(
            nn.Linear(self.L, self.D),
            nn.Tanh(),
            nn.Linear(self.D, self.K)
        )
        self.classifier = nn.Sequential(
            nn.Linear(self.L * self.K, n_classes),
        )
        self.apply(initialize_weights)

    def forward(self, x):
        feature = self.feature(x)
        feature = feature.squeeze(0)
        A = self.attention(feature)
        A = torch.transpose(A, -1, -2)  # KxN
        A = F.softmax(A, dim=-1)  # softmax over N
        M = torch.mm(A, feature)  # KxL
        Y_prob = self.classifier(M)
        return Y_prob


def roc_auc_score(labels, scores):
    labels, scores = np.asarray(labels), np.asarray(scores, dtype=np.float64)
    order = np.argsort(scores, kind="mergesort")
    ranks = np.empty(len(scores))
    ranks[order] = np.arange(1, len(scores) + 1)
    for s in np.unique(scores):
        tie = scores == s
        ranks[tie] = ranks[tie].mean()
    n_pos, n_neg = labels.sum(), len(labels) - labels.sum()
    return float((ranks[labels == 1].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def five_scores(bag_labels, bag_predictions):
    auc_value = roc_auc_score(bag_labels, bag_predictions)
    accuracy = float(np.mean((np.asarray(bag_predictions) >= 0.5) == np.asarray(bag_labels)))
    return accuracy, auc_value


def train_loop(args, model, loader, optimizer, device, criterion):
    model.train()
    train_loss_log = 0.
    for i, data in enumerate(loader):
        optimizer.zero_grad()
        bag = data[0].to(device)
        batch_size = bag.size(0)
        label = data[1].to(device)
        train_logits = model(bag)
        train_loss = criterion(train_logits.view(batch_size, -1), label)
        train_loss.backward()
        optimizer.step()
        train_loss_log = train_loss_log + train_loss.item()
    return train_loss_log / len(loader)


def val_loop(args, model, loader, device, criterion):
    model.eval()
    bag_logit, bag_labels = [], []
    loss_sum = 0.
    with torch.no_grad():
        for i, data in enumerate(loader):
            bag_labels.append(data[1].item())
            bag = data[0].to(device)
            batch_size = bag.size(0)
            label = data[1].to(device)
            test_logits = model(bag)
            loss_sum += criterion(test_logits.view(batch_size, -1), label).item()
            bag_logit.append(torch.softmax(test_logits, dim=-1)[:, 1].cpu().squeeze().numpy())
    accuracy, auc_value = five_scores(bag_labels, bag_logit)
    return accuracy, auc_value, loss_sum / len(loader)


def one_fold(args, k, bank, train_p, train_l, test_p, test_l, val_p, val_l, external_loader):
    seed_torch(args.seed)
    device = torch.device('cpu')

    train_set = C16Dataset(train_p[k], train_l[k], bank)
    test_set = C16Dataset(test_p[k], test_l[k], bank)
    if args.val_ratio != 0.:
        val_set = C16Dataset(val_p[k], val_l[k], bank)
    else:
        val_set = test_set

    generator = torch.Generator()
    generator.manual_seed(7784414403328510413)
    train_loader = DataLoader(train_set, batch_size=args.batch_size, shuffle=True, generator=generator)
    val_loader = DataLoader(val_set, batch_size=args.batch_size, shuffle=False)
    test_loader = DataLoader(test_set, batch_size=args.batch_size, shuffle=False)

    model = DAttention(args.input_dim, args.n_classes, dropout=True, act='relu').to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, args.num_epoch, 0)

    opt_auc, opt_epoch, best_pt = 0., 0, None
    for epoch in range(args.num_epoch):
        train_loss = train_loop(args, model, train_loader, optimizer, device, criterion)
        scheduler.step()
        accuracy, auc_value, val_loss = val_loop(args, model, val_loader, device, criterion)
        if auc_value > opt_auc and epoch >= args.save_best_model_stage * args.num_epoch:
            opt_auc, opt_epoch = auc_value, epoch
            best_pt = {'model': copy.deepcopy(model.state_dict())}

    model.load_state_dict(best_pt['model'])
    accuracy, auc_value, _ = val_loop(args, model, test_loader, device, criterion)
    _, ext_auc, _ = val_loop(args, model, external_loader, device, criterion)
    print('fold %d: best epoch %d (selection AUC %.4f), test accuracy %.4f, test AUC %.4f, external AUC %.4f'
          % (k, opt_epoch + 1, opt_auc, accuracy, auc_value, ext_auc))
    return accuracy, auc_value, ext_auc


def main(args):
    t0 = time.time()
    seed_torch(args.seed)
    torch.set_num_threads(1)
    bags, labels = make_slides(90, seed=1)
    ext_bags, ext_labels = make_slides(200, seed=2)
    bank = {i: b for i, b in enumerate(bags)}
    ext_bank = {i: b for i, b in enumerate(ext_bags)}
    external_loader = DataLoader(C16Dataset(np.arange(len(ext_bags)), ext_labels, ext_bank), batch_size=1, shuffle=False)
    p = np.arange(len(bags))
    train_p, train_l, test_p, test_l, val_p, val_l = get_kflod(args.cv_fold, p, labels, args.val_ratio)

    acs, aucs, ext = [], [], []
    for k in range(args.cv_fold):
        a, u, e = one_fold(args, k, bank, train_p, train_l, test_p, test_l, val_p, val_l, external_loader)
        acs.append(a)
        aucs.append(u)
        ext.append(e)
    print('Cross-validation test accuracy mean: %.4f, std %.4f' % (np.mean(acs), np.std(acs)))
    print('Cross-validation test AUC mean: %.4f, std %.4f' % (np.mean(aucs), np.std(aucs)))
    print('External cohort AUC of the same checkpoints: %.4f' % np.mean(ext))
    print('done in %.1fs' % (time.time() - t0))


if __name__ == "__main__":
    main(Args())
