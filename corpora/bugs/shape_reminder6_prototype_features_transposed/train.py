# Source: hieuvmphan/REMINDER, train.py (compute_prototype, Trainer.train / update_prototypes), commit 8bb1b903ed9b2ed217e8f586d76364fabeb158e1
# Report: https://github.com/hieuvmphan/REMINDER/issues/6
# REMINDER (class-incremental semantic segmentation): after each learning step the trainer
# computes per-class prototypes (mean pre-logit feature of the pixels of each class, running
# average over the training set); the next step uses them to weight the distillation by
# class similarity. Here: step 0 trains a small DeepLab-like segmenter on synthetic square
# 32x32 scenes (background + 4 object classes with their own textures), then
# update_prototypes runs over the training set, and the prototypes are checked by
# nearest-prototype pixel classification on validation scenes and by their class similarity.
import torch
import torch.nn as nn
from torch.nn import functional as F


def compute_prototype(seg,features,classes):
    max_class = max(classes)
    out = torch.zeros((max_class+1,features.size(1))).to(seg.device)
    B,H,W = seg.shape
    features = F.interpolate(features, size=(H, W), mode='bilinear', align_corners=True)
    seg = seg.view(-1)
    features = features.transpose(1, 3).contiguous().view(B*H*W, -1)
    for c in classes:
        selected_features = features[seg==c]
        if len(selected_features) > 0:
            out[c] = selected_features.mean(dim=0)
    return out


class IncrementalSegmentationModule(nn.Module):
    def __init__(self, num_classes, feat_dim=32):
        super().__init__()
        self.body = nn.Sequential(nn.Conv2d(3, 32, 3, 1, 1), nn.BatchNorm2d(32), nn.ReLU(),
                                  nn.Conv2d(32, 64, 3, 2, 1), nn.BatchNorm2d(64), nn.ReLU(),
                                  nn.Conv2d(64, 64, 3, 1, 2, dilation=2), nn.BatchNorm2d(64), nn.ReLU())
        self.head = nn.Sequential(nn.Conv2d(64, feat_dim, 3, 1, 1), nn.BatchNorm2d(feat_dim), nn.ReLU())
        self.cls = nn.Conv2d(feat_dim, num_classes, 1)

    def forward(self, x, ret_intermediate=False):
        body = self.body(x)
        pre_logits = self.head(body)
        out = F.interpolate(self.cls(pre_logits), size=x.shape[-2:], mode='bilinear', align_corners=False)
        if ret_intermediate:
            return out, {'body': body, 'pre_logits': pre_logits}
        return out, {}


def make_scenes(n, g):
    """Square 32x32 scenes: textured background + 1-3 objects (rectangles of 4 classes), each
    class a colour and stripe orientation."""
    colours = torch.tensor([[0.2, 0.2, 0.2], [0.9, 0.2, 0.2], [0.2, 0.9, 0.2], [0.2, 0.2, 0.9], [0.9, 0.9, 0.2]])
    yy, xx = torch.meshgrid(torch.arange(32.), torch.arange(32.), indexing="ij")
    stripes = [torch.zeros(32, 32), torch.sin(xx), torch.sin(yy), torch.sin(xx + yy), torch.sin(xx - yy)]
    images, labels = torch.zeros(n, 3, 32, 32), torch.zeros(n, 32, 32, dtype=torch.long)
    for i in range(n):
        seg = torch.zeros(32, 32, dtype=torch.long)
        for _ in range(int(torch.randint(1, 4, (1,), generator=g))):
            c = int(torch.randint(1, 5, (1,), generator=g))
            y0, x0 = torch.randint(0, 22, (2,), generator=g).tolist()
            h, w = torch.randint(5, 11, (2,), generator=g).tolist()
            seg[y0:y0 + h, x0:x0 + w] = c
        img = colours[seg].permute(2, 0, 1) + 0.3 * torch.stack(stripes)[seg, yy.long(), xx.long()].unsqueeze(0)
        images[i] = img + 0.1 * torch.randn(3, 32, 32, generator=g)
        labels[i] = seg
    return images, labels


class Trainer:
    def __init__(self, model, device, nb_current_classes, old_classes=0):
        self.model = model
        self.device = device
        self.old_classes = old_classes
        self.nb_current_classes = nb_current_classes
        self.dataset = 'voc'
        self.criterion = nn.CrossEntropyLoss(ignore_index=255, reduction='none')
        self.current_prototypes = torch.zeros((self.nb_current_classes, 32)).to(device)
        self.proto_count = torch.zeros(self.nb_current_classes).to(device)

    def train(self, cur_epoch, optim, train_loader):
        model = self.model
        model.train()
        epoch_loss = 0.0
        for cur_step, (images, labels) in enumerate(train_loader):
            images = images.to(self.device, dtype=torch.float32)
            labels = labels.to(self.device, dtype=torch.long)
            optim.zero_grad()
            outputs, features = model(images, ret_intermediate=True)
            loss = self.criterion(outputs, labels).mean()
            loss.backward()
            optim.step()
            epoch_loss += loss.item()
        return epoch_loss / len(train_loader)

    def update_prototypes(self, train_loader):
        device = self.device
        with torch.no_grad():
            for cur_step, (images, labels) in enumerate(train_loader):
                images = images.to(device, dtype=torch.float32)
                labels = labels.to(device, dtype=torch.long)
                _, features = self.model(images, ret_intermediate=True)
                exist_label = labels[labels != 255].unique()
                pre_logits = features['pre_logits']
                if 'cityscapes' in self.dataset:
                    cur_classes = list(range(self.nb_current_classes))
                else:
                    cur_classes = list(range(self.old_classes, self.nb_current_classes))
                batch_prototypes = compute_prototype(labels, pre_logits, cur_classes)

                self.proto_count[exist_label] += 1
                self.current_prototypes[exist_label] = (1 / self.proto_count[exist_label]).unsqueeze(1) * (
                        (self.proto_count[exist_label] - 1).unsqueeze(1) * self.current_prototypes[exist_label] + batch_prototypes[exist_label])


def batches(images, labels, bs, g=None):
    order = torch.randperm(len(images), generator=g) if g is not None else torch.arange(len(images))
    return [(images[order[i:i + bs]], labels[order[i:i + bs]]) for i in range(0, len(images), bs)]


def main():
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    device = torch.device('cpu')
    train_images, train_labels = make_scenes(192, g)
    val_images, val_labels = make_scenes(64, g)
    model = IncrementalSegmentationModule(num_classes=5).to(device)
    trainer = Trainer(model, device, nb_current_classes=5)
    optim = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=1e-4)
    for epoch in range(6):
        loss = trainer.train(epoch, optim, batches(train_images, train_labels, 16, g))
        model.eval()
        with torch.no_grad():
            acc = (model(val_images)[0].argmax(1) == val_labels).float().mean().item()
        print(f"epoch {epoch}: loss {loss:.4f} val pixel acc {acc:.4f}")

    model.eval()
    trainer.update_prototypes(batches(train_images, train_labels, 16))
    protos = F.normalize(trainer.current_prototypes, dim=1)
    with torch.no_grad():
        _, feats = model(val_images, ret_intermediate=True)
        f = F.interpolate(feats['pre_logits'], size=(32, 32), mode='bilinear', align_corners=True)
        pred = torch.einsum('bchw,kc->bkhw', F.normalize(f, dim=1), protos).argmax(1)
    sim = protos @ protos.T
    off = sim[~torch.eye(5, dtype=torch.bool)]
    print(f"prototype counts {trainer.proto_count.int().tolist()}")
    print(f"nearest-prototype val pixel acc {(pred == val_labels).float().mean().item():.4f}")
    for c in range(1, 5):
        m = val_labels == c
        print(f"  class {c}: nearest-prototype acc {(pred[m] == c).float().mean().item():.4f}")
    print(f"prototype cosine similarity between classes: mean {off.mean().item():.4f} max {off.max().item():.4f}")


if __name__ == '__main__':
    main()
