# Source: maxjiang93/ugscnn, experiments/exp3_2d3ds/train.py (iou_score, accuracy, train, test, main), commit 89cdd512e21a2d0cbb884e52ee75645c39ad6ed7
# Report: https://github.com/maxjiang93/ugscnn/pull/5
# UGSCNN 2D-3D-S semantic segmentation on the sphere: a spherical U-Net predicts one of 15
# classes per mesh vertex from RGB-D; weighted cross-entropy (classes "unknown" and "invalid"
# weighted 0), per-epoch validation with mean IoU and mean class accuracy over the 13 kept
# classes, best-mIoU checkpointing. The mesh convolutions (MeshConv on an icosahedral mesh)
# and the Stanford 2D-3D-S panoramas are replaced by 1-D convolutions over 642 vertices of
# synthetic RGB-D "rooms"; checkpoints are kept in memory instead of files.
import numpy as np; np.set_printoptions(precision=4)
import copy

import torch
import torch.nn.functional as F
import torch.optim as optim
import torch.nn as nn
from torch.utils.data import Dataset, DataLoader

classes = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14]
class_names = ["unknown", "beam", "board", "bookcase", "ceiling", "chair", "clutter", "column",
               "door", "floor", "sofa", "table", "wall", "window", "invalid"]
drop = [0, 14]
keep = np.setdiff1d(classes, drop)
label_ratio = [0.04233976974675504, 0.014504436907968913, 0.017173225930738712,
               0.048004778186652164, 0.17384037404789865, 0.028626771620973622,
               0.087541966989014, 0.019508096683310605, 0.08321331842901526,
               0.17002664771895903, 0.002515611224467519, 0.020731298851232174,
               0.2625963729249342, 0.016994731594287146, 0.012382599143792165]
# label_weight = 1/np.array(label_ratio)/np.sum((1/np.array(label_ratio))[keep])
label_weight = 1 / np.log(1.02 + np.array(label_ratio))
label_weight[drop] = 0
label_weight = label_weight.astype(np.float32)


def iou_score(pred_cls, true_cls, nclass=15, drop=drop):
    """
    compute the intersection-over-union score
    both inputs should be categorical (as opposed to one-hot)
    """
    intersect_ = []
    union_ = []
    for i in range(nclass):
        if i not in drop:
            intersect = ((pred_cls == i) + (true_cls == i)).eq(2).sum().item()
            union = ((pred_cls == i) + (true_cls == i)).ge(1).sum().item()
            intersect_.append(intersect)
            union_.append(union)
    return np.array(intersect_), np.array(union_)

def accuracy(pred_cls, true_cls, nclass=15, drop=drop):
    positive = torch.histc(true_cls.cpu().float(), bins=nclass, min=0, max=nclass, out=None)
    per_cls_counts = []
    tpos = []
    for i in range(nclass):
        if i not in drop:
            true_positive = ((pred_cls == i) + (true_cls == i)).eq(2).sum().item()
            tpos.append(true_positive)
            per_cls_counts.append(positive[i].item())
    return np.array(tpos), np.array(per_cls_counts)


class SphericalUNet(nn.Module):
    """Stand-in for the mesh-convolution U-Net: 1-D convolutions over the vertex list."""
    def __init__(self, in_ch=4, out_ch=15, fdim=16):
        super().__init__()
        self.down = nn.Sequential(nn.Conv1d(in_ch, fdim, 3, padding=1), nn.BatchNorm1d(fdim), nn.ReLU(),
                                  nn.Conv1d(fdim, fdim, 3, padding=1), nn.BatchNorm1d(fdim), nn.ReLU())
        self.pool = nn.MaxPool1d(2)
        self.mid = nn.Sequential(nn.Conv1d(fdim, 2 * fdim, 3, padding=1), nn.BatchNorm1d(2 * fdim), nn.ReLU())
        self.up = nn.Sequential(nn.Conv1d(3 * fdim, fdim, 3, padding=1), nn.BatchNorm1d(fdim), nn.ReLU(),
                                nn.Conv1d(fdim, out_ch, 1))

    def forward(self, x):
        d = self.down(x)
        m = F.interpolate(self.mid(self.pool(d)), size=d.shape[-1])
        return self.up(torch.cat([d, m], 1))


class S2D3DSegLoader(Dataset):
    """Synthetic RGB-D rooms: each vertex belongs to a class region and its colour / depth is the
    class prototype plus noise."""
    def __init__(self, n, partition, seed, nv=642):
        self.partition = partition
        g = np.random.RandomState(seed)
        proto = np.random.RandomState(5).normal(0, 1, (15, 4)).astype(np.float32)
        p = np.array(label_ratio) / np.sum(label_ratio)
        self.data, self.labels = [], []
        for _ in range(n):
            lab = np.repeat(g.choice(15, size=nv // 6 + 1, p=p), 6)[:nv]
            x = proto[lab].T + 0.8 * g.normal(0, 1, (4, nv)).astype(np.float32)
            self.data.append(torch.from_numpy(x))
            self.labels.append(torch.from_numpy(lab).long())

    def __len__(self):
        return len(self.data)

    def __getitem__(self, idx):
        return self.data[idx], self.labels[idx]


def train(args, model, train_loader, optimizer, epoch, device, keep_id=None):
    w = torch.tensor(label_weight).to(device)
    model.train()
    tot_loss = 0
    count = 0
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        if keep_id is not None:
            output = output[:, :, keep_id]
            target = target[:, keep_id]

        loss = F.cross_entropy(output, target, weight=w)
        loss.backward()
        optimizer.step()
        tot_loss += loss.item()
        count += data.size()[0]
    tot_loss /= count
    return tot_loss

def test(args, model, test_loader, epoch, device, keep_id=None):
    w = torch.tensor(label_weight).to(device)
    model.eval()
    test_loss = 0
    ints_ = np.zeros(len(classes)-len(drop))
    unis_ = np.zeros(len(classes)-len(drop))
    per_cls_counts = np.zeros(len(classes)-len(drop))
    accs = np.zeros(len(classes)-len(drop))
    count = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            n_data = data.size()[0]

            if keep_id is not None:
                output = output[:, :, keep_id]
                target = target[:, keep_id]

            test_loss += F.cross_entropy(output, target, weight=w).item() # sum up batch loss
            pred = output.max(dim=1, keepdim=False)[1] # get the index of the max log-probability
            int_, uni_ = iou_score(pred, target)
            tpos, pcc = accuracy(pred, target)
            ints_ += int_
            unis_ += uni_
            accs += tpos
            per_cls_counts += pcc
            count += n_data
            correct += (pred == target).sum().item()
    ious = ints_ / unis_
    accs /= per_cls_counts
    test_loss /= count

    print('[Epoch {} {} stats]: MIoU: {:.4f}; Mean Accuracy: {:.4f}; Avg loss: {:.4f}; vertex accuracy: {:.4f}'.format(
        epoch, test_loader.dataset.partition, np.mean(ious), np.mean(accs), test_loss,
        correct / (count * test_loader.dataset.data[0].shape[-1])))
    return np.mean(np.mean(ious))

def main():
    class Args:
        batch_size = 16
        lr = 1e-2
        epochs = 6
        seed = 1
        decay = True
    args = Args()
    device = torch.device("cpu")
    torch.manual_seed(args.seed)

    trainset = S2D3DSegLoader(256, "train", seed=1)
    valset = S2D3DSegLoader(64, "test", seed=2)
    train_loader = DataLoader(trainset, batch_size=args.batch_size, shuffle=True, drop_last=True)
    val_loader = DataLoader(valset, batch_size=args.batch_size, shuffle=True, drop_last=False)

    model = SphericalUNet(in_ch=4, out_ch=len(classes), fdim=16)
    model.to(device)
    keep_id = None

    start_ep = 0
    best_miou = 0
    best_epoch = None
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
    if args.decay:
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=20, gamma=0.9)

    # training loop
    for epoch in range(start_ep + 1, args.epochs + 1):
        loss = train(args, model, train_loader, optimizer, epoch, device, keep_id)
        if args.decay:
            scheduler.step()
        miou = test(args, model, val_loader, epoch, device, keep_id)
        if miou > best_miou:
            best_miou = miou
            is_best = True
        else:
            is_best = False
        if is_best:
            best_state = copy.deepcopy(model.state_dict())
            best_epoch = epoch
        print(f"  train loss {loss:.4f}  is_best {is_best}  best_miou {best_miou:.4f}")
    print("best checkpoint saved from epoch:", best_epoch)

if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
