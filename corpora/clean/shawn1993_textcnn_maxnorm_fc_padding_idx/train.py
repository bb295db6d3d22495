# Source: Shawn1993/cnn-text-classification-pytorch, train.py + model.py + main.py + mydatasets.py (collate_fn), commit 93415f08168a1ae60635320569f6eca0ae3a40bb
# https://github.com/Shawn1993/cnn-text-classification-pytorch
#
# Kim (2014) CNN for sentence classification: Embedding(padding_idx=0) whose pad row is zeroed through
# .data, three Conv2d(1, Co, (K, D)) branches max-pooled over time, dropout 0.5, and the paper's max-norm
# constraint applied after every optimizer step by rescaling fc1.weight rows in place under no_grad.
# Dev evaluation with reduction='sum' every test_interval steps, best-acc tracking and early stopping.
# Adaptation: the MR (movie review) download is replaced by synthetic token-id sentences (vocab 2000,
# 6-40 tokens, label given by counts of "positive" vs "negative" word ids among neutral words), padded by
# the repository's collate_fn; argparse defaults kept but epochs 256 -> 5, embed_dim 128 -> 64,
# kernel_num 100 -> 32, test_interval 100 -> 25; snapshot saving off (save_best False, save_interval large);
# the '\r' progress line is printed every 25 steps; main.py's glue is in main().
import os
import sys
from types import SimpleNamespace

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader


class CNN_Text(nn.Module):

    def __init__(self, args):
        super(CNN_Text, self).__init__()
        self.args = args

        V = args.embed_num
        D = args.embed_dim
        C = args.class_num
        Ci = 1
        Co = args.kernel_num
        Ks = args.kernel_sizes

        self.embed = nn.Embedding(V, D, padding_idx=0)
        # Kim's paper: uniform[-0.25, 0.25] initialization for random embeddings
        nn.init.uniform_(self.embed.weight, -0.25, 0.25)
        self.embed.weight.data[0].fill_(0)  # padding stays zero

        self.convs = nn.ModuleList([nn.Conv2d(Ci, Co, (K, D)) for K in Ks])
        self.dropout = nn.Dropout(args.dropout)
        self.fc1 = nn.Linear(len(Ks) * Co, C)

        if self.args.static:
            self.embed.weight.requires_grad = False

    def forward(self, x):
        x = self.embed(x)  # (N, W, D)

        x = x.unsqueeze(1)  # (N, Ci, W, D)

        x = [F.relu(conv(x)).squeeze(3) for conv in self.convs]  # [(N, Co, W), ...]*len(Ks)

        x = [F.max_pool1d(i, i.size(2)).squeeze(2) for i in x]  # [(N, Co), ...]*len(Ks)

        x = torch.cat(x, 1)

        x = self.dropout(x)  # (N, len(Ks)*Co)
        logit = self.fc1(x)  # (N, C)
        return logit


def collate_fn(batch, min_len=5):
    """Pad sequences in a batch to the same length (at least min_len for conv kernels)."""
    texts, labels = zip(*batch)
    max_len = max(max(len(t) for t in texts), min_len)
    padded = torch.zeros(len(texts), max_len, dtype=torch.long)
    for i, t in enumerate(texts):
        padded[i, :len(t)] = t
    labels = torch.stack(labels)
    return padded, labels


def synthetic_mr(n, seed, vocab=2000):
    # ids 2..41 "positive" words, 42..81 "negative" words, the rest neutral; 0 = <pad>, 1 = <unk>
    g = torch.Generator().manual_seed(seed)
    data = []
    for _ in range(n):
        label = int(torch.randint(0, 2, (1,), generator=g))
        length = int(torch.randint(6, 41, (1,), generator=g))
        toks = torch.randint(82, vocab, (length,), generator=g)
        n_sent = int(torch.randint(1, 4, (1,), generator=g))
        pos = torch.randint(0, length, (n_sent,), generator=g)
        base = 2 if label == 1 else 42
        toks[pos] = base + torch.randint(0, 40, (n_sent,), generator=g)
        if torch.rand(1, generator=g).item() < 0.3:  # one word of the other polarity
            toks[int(torch.randint(0, length, (1,), generator=g))] = (42 if label == 1 else 2) + int(torch.randint(0, 40, (1,), generator=g))
        data.append((toks, torch.tensor(label)))
    return data


def train(train_iter, dev_iter, model, args):
    if args.cuda:
        model.cuda()

    if getattr(args, 'optimizer', 'adam') == 'adadelta':
        optimizer = torch.optim.Adadelta(model.parameters(), lr=args.lr, rho=0.95)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)

    steps = 0
    best_acc = 0
    last_step = 0
    model.train()
    for epoch in range(1, args.epochs+1):
        for batch in train_iter:
            model.train()
            feature, target = batch
            if args.cuda:
                feature, target = feature.cuda(), target.cuda()

            optimizer.zero_grad()
            logit = model(feature)
            loss = F.cross_entropy(logit, target)
            loss.backward()
            optimizer.step()

            # Kim's paper: L2 weight constraint on fc layer (rescale if norm > max_norm)
            with torch.no_grad():
                for name, param in model.named_parameters():
                    if 'fc1.weight' in name:
                        norms = param.norm(2, dim=-1, keepdim=True)
                        desired = torch.clamp(norms, max=args.max_norm)
                        param.mul_(desired / (norms + 1e-8))

            steps += 1
            if steps % args.log_interval == 0:
                corrects = (torch.max(logit, 1)[1] == target).sum()
                accuracy = 100.0 * corrects / feature.size(0)
                sys.stdout.write(
                    'Batch[{}] - loss: {:.6f}  acc: {:.4f}%({}/{})\n'.format(steps,
                                                                             loss.item(),
                                                                             accuracy.item(),
                                                                             corrects.item(),
                                                                             feature.size(0)))
            if steps % args.test_interval == 0:
                dev_acc = eval(dev_iter, model, args)
                if dev_acc > best_acc:
                    best_acc = dev_acc
                    last_step = steps
                    if args.save_best:
                        save(model, args.save_dir, 'best', steps)
                else:
                    if steps - last_step >= args.early_stop:
                        print('early stop by {} steps, best acc: {:.4f}%'.format(
                            args.early_stop, best_acc))
                        return best_acc
            elif steps % args.save_interval == 0:
                save(model, args.save_dir, 'snapshot', steps)

    return best_acc


def eval(data_iter, model, args):
    model.eval()
    corrects, avg_loss = 0, 0
    total = 0
    with torch.no_grad():
        for batch in data_iter:
            feature, target = batch
            if args.cuda:
                feature, target = feature.cuda(), target.cuda()

            logit = model(feature)
            loss = F.cross_entropy(logit, target, reduction='sum')

            avg_loss += loss.item()
            corrects += (torch.max(logit, 1)[1] == target).sum().item()
            total += target.size(0)

    avg_loss /= total
    accuracy = 100.0 * corrects / total
    print('\nEvaluation - loss: {:.6f}  acc: {:.4f}%({}/{}) \n'.format(avg_loss,
                                                                       accuracy,
                                                                       corrects,
                                                                       total))
    return accuracy


def save(model, save_dir, save_prefix, steps):
    if not os.path.isdir(save_dir):
        os.makedirs(save_dir)
    save_prefix = os.path.join(save_dir, save_prefix)
    save_path = '{}_steps_{}.pt'.format(save_prefix, steps)
    torch.save(model.state_dict(), save_path)


def main():
    torch.manual_seed(0)
    args = SimpleNamespace(lr=0.001, epochs=5, batch_size=64, log_interval=25, test_interval=25,
                           save_interval=10**9, save_dir='snapshot', early_stop=1000, save_best=False,
                           dropout=0.5, max_norm=3.0, embed_dim=64, kernel_num=32, kernel_sizes='3,4,5',
                           static=False, optimizer='adam', no_cuda=True)

    print("\nLoading data...")
    train_dataset, dev_dataset = synthetic_mr(1200, seed=1), synthetic_mr(300, seed=2)
    train_iter = DataLoader(train_dataset, batch_size=args.batch_size,
                            shuffle=True, collate_fn=collate_fn)
    dev_iter = DataLoader(dev_dataset, batch_size=len(dev_dataset),
                          shuffle=False, collate_fn=collate_fn)

    args.embed_num = 2000
    args.class_num = 2
    args.cuda = (not args.no_cuda) and torch.cuda.is_available(); del args.no_cuda
    args.kernel_sizes = [int(k) for k in args.kernel_sizes.split(',')]

    cnn = CNN_Text(args)
    best_acc = train(train_iter, dev_iter, cnn, args)
    print('best dev acc: {:.4f}%'.format(best_acc))


if __name__ == '__main__':
    main()
