# Source: ZijiaLewisLu/CVPR2024-FACT, train.py (__main__, evaluate), utils/evaluate.py (Checkpoint, f_score), utils/utils.py (parse_label), commit 897666bb273b323703cbc0b1e611c9161dd8efa3
# Report: https://github.com/ZijiaLewisLu/CVPR2024-FACT/issues/9
# FACT temporal action segmentation training loop: Adam over the network, clip_grad_norm_, periodic
# evaluation on the test videos with the repository's Checkpoint metrics (frame accuracy,
# segmental F1@{0.10,0.25,0.50}), best-checkpoint selection by F1@0.50, a step learning-rate decay,
# and the final report of the best checkpoint. The FACT frame/action transformer is replaced by a
# small dilated temporal convolution network over synthetic frame features; wandb, CUDA and file
# saving are removed.
from collections import OrderedDict, namedtuple

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim

np.random.seed(1)
torch.manual_seed(1)
torch.set_num_threads(1)

Segment = namedtuple("Segment", ["action", "start", "end"])


def parse_label(label):
    if not isinstance(label, np.ndarray):
        label = np.array(label)
    loc = label[:-1] != label[1:]
    loc = np.where(loc)[0]
    segs = []
    if len(loc) == 0:
        return [Segment(label[0], 0, len(label) - 1)]
    for i, l in enumerate(loc):
        if i == 0:
            start = 0
            end = l
        else:
            start = loc[i - 1] + 1
            end = l
        segs.append(Segment(label[start], start, end))
    segs.append(Segment(label[loc[-1] + 1], loc[-1] + 1, len(label) - 1))
    return segs


def segs_to_labels_start_end_time(seg_list, bg_class):
    seg_list = [s for s in seg_list if s.action not in bg_class]
    labels = [p.action for p in seg_list]
    start = [p.start for p in seg_list]
    end = [p.end + 1 for p in seg_list]
    return labels, start, end


def f_score(pred_segs, gt_segs, overlap, bg_class=["background"]):
    p_label, p_start, p_end = segs_to_labels_start_end_time(pred_segs, bg_class)
    y_label, y_start, y_end = segs_to_labels_start_end_time(gt_segs, bg_class)
    tp = 0
    fp = 0
    hits = np.zeros(len(y_label))
    for j in range(len(p_label)):
        intersection = np.minimum(p_end[j], y_end) - np.maximum(p_start[j], y_start)
        union = np.maximum(p_end[j], y_end) - np.minimum(p_start[j], y_start)
        IoU = (1.0 * intersection / union) * ([p_label[j] == y_label[x] for x in range(len(y_label))])
        idx = np.array(IoU).argmax()
        if IoU[idx] >= overlap and not hits[idx]:
            tp += 1
            hits[idx] = 1
        else:
            fp += 1
    fn = len(y_label) - sum(hits)
    return float(tp), float(fp), float(fn)


class Checkpoint():
    def __init__(self, iteration, bg_class=[], eval_edit=True):
        self.iteration = iteration
        self.videos = {}
        self.bg_class = bg_class
        self.eval_edit = eval_edit

    def add_video(self, vname, gt_label, pred):
        self.videos[vname] = (gt_label, pred)

    def compute_metrics(self):
        gt_list = [g for g, _ in self.videos.values()]
        pred_list = [p for _, p in self.videos.values()]
        M = OrderedDict()
        gt_ = np.concatenate(gt_list)
        pred_ = np.concatenate(pred_list)
        correct = (gt_ == pred_)
        M['Acc'] = correct.mean() * 100
        overlap = [.1, .25, .5]
        tp, fp, fn = np.zeros(3), np.zeros(3), np.zeros(3)
        for gt, pred in zip(gt_list, pred_list):
            gt_segs = parse_label(gt)
            pred_segs = parse_label(pred)
            for s in range(len(overlap)):
                tp1, fp1, fn1 = f_score(pred_segs, gt_segs, overlap[s], bg_class=self.bg_class)
                tp[s] += tp1
                fp[s] += fp1
                fn[s] += fn1
        for s in range(len(overlap)):
            precision = tp[s] / float(tp[s] + fp[s] + 1e-5)
            recall = tp[s] / float(tp[s] + fn[s] + 1e-5)
            f1 = 2.0 * (precision * recall) / (precision + recall + 1e-5)
            f1 = np.nan_to_num(f1) * 100
            M['F1@%0.2f' % overlap[s]] = f1
        self.metrics = M
        return M


class TemporalNet(nn.Module):
    def __init__(self, in_dim, nclasses, hid=64, layers=5):
        super().__init__()
        self.inp = nn.Conv1d(in_dim, hid, 1)
        self.layers = nn.ModuleList([nn.Conv1d(hid, hid, 3, padding=2 ** i, dilation=2 ** i) for i in range(layers)])
        self.out = nn.Conv1d(hid, nclasses, 1)

    def forward(self, seq_list, label_list, compute_loss=False):
        x = torch.stack(seq_list).transpose(1, 2)
        h = self.inp(x)
        for conv in self.layers:
            h = h + F.relu(conv(h))
        logits = self.out(h).transpose(1, 2)
        preds = [lg.argmax(-1).numpy() for lg in logits.detach()]
        if compute_loss:
            y = torch.stack(label_list)
            loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
            return loss, preds
        return preds


def make_videos(n, nclasses, T, dim, protos, label_noise, rng):
    videos = []
    for i in range(n):
        bounds = np.sort(rng.choice(np.arange(10, T - 10), size=5, replace=False))
        seg_classes = rng.permutation(nclasses)[:6]
        label = np.zeros(T, dtype=np.int64)
        start = 0
        for k, b in enumerate(list(bounds) + [T]):
            label[start:b] = seg_classes[k]
            start = b
        feat = protos[label] + 1.6 * rng.randn(T, dim)
        train_label = label.copy()
        if label_noise > 0:
            flip = rng.rand(T) < label_noise
            train_label[flip] = rng.randint(0, nclasses, size=flip.sum())
        videos.append(("video%03d" % i, torch.tensor(feat, dtype=torch.float32),
                       torch.tensor(train_label), label))
    return videos


def batches(videos, batch_size, shuffle, rng):
    idx = rng.permutation(len(videos)) if shuffle else np.arange(len(videos))
    for s in range(0, len(idx), batch_size):
        chunk = [videos[i] for i in idx[s:s + batch_size]]
        yield ([v[0] for v in chunk], [v[1] for v in chunk], [v[2] for v in chunk], [v[3] for v in chunk])


def evaluate(global_step, net, test_videos, rng):
    print("TESTING" + "~" * 10)
    ckpt = Checkpoint(global_step + 1, bg_class=[])
    net.eval()
    with torch.no_grad():
        for vnames, seq_list, train_label_list, eval_label_list in batches(test_videos, 8, False, rng):
            preds = net(seq_list, train_label_list)
            for v, g, p in zip(vnames, eval_label_list, preds):
                ckpt.add_video(v, g, p)
    net.train()
    ckpt.compute_metrics()
    string = ""
    for k, v in ckpt.metrics.items():
        string += "%s:%.1f, " % (k, v)
    print(string)
    return ckpt


if __name__ == '__main__':
    nclasses, T, dim = 8, 160, 24
    rng = np.random.RandomState(0)
    protos = rng.randn(nclasses, dim)
    train_videos = make_videos(10, nclasses, T, dim, protos, 0.3, rng)
    test_videos = make_videos(24, nclasses, T, dim, protos, 0.0, rng)

    cfg_lr, cfg_epoch, cfg_lr_decay, clip_grad_norm, eval_every, batch_size = 1e-3, 40, 30, 10.0, 25, 2
    net = TemporalNet(dim, nclasses)
    optimizer = optim.Adam(net.parameters(), lr=cfg_lr, weight_decay=0.0)

    global_step = 0
    best_ckpt, best_metric = None, 0
    for eidx in range(cfg_epoch):
        for batch_idx, (vnames, seq_list, train_label_list, eval_label_list) in enumerate(
                batches(train_videos, batch_size, True, rng)):
            optimizer.zero_grad()
            loss, preds = net(seq_list, train_label_list, compute_loss=True)
            loss.backward()
            if clip_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(net.parameters(), clip_grad_norm)
            optimizer.step()

            # test and save model every x iterations
            if global_step != 0 and (global_step + 1) % eval_every == 0:
                print("Iter%d, loss:%.3f" % (global_step + 1, loss.item()))
                test_ckpt = evaluate(global_step, net, test_videos, rng)
                if test_ckpt.metrics['F1@0.50'] >= best_metric:
                    best_ckpt = test_ckpt

            global_step += 1

        if cfg_lr_decay > 0 and (eidx + 1) % cfg_lr_decay == 0:
            for g in optimizer.param_groups:
                g['lr'] = cfg_lr * 0.1
            print('------------------------------------Update Learning rate--------------------------------')

    print(f'Best Checkpoint: {best_ckpt.iteration}')
    best_ckpt.compute_metrics()
    print("Best checkpoint metrics: " + ", ".join("%s:%.1f" % (k, v) for k, v in best_ckpt.metrics.items()))
