"""MoCo: a query encoder and a momentum key encoder (requires_grad=False, updated in place under
no_grad before each key forward), keys computed under no_grad with a batch shuffle / unshuffle for
batch norm (in train() mode on purpose), positive / negative logits by einsum against a queue
buffer, InfoNCE as CrossEntropyLoss with all-zero labels, the queue updated in place, accuracy
top-1 / top-5 on the logits; SGD over model.parameters() (the frozen key encoder included).

Source: facebookresearch/moco, moco/builder.py and main_moco.py, commit 4397a04ed63a95c4a157f017a71883944003b615.
Reduced: a toy-width ResNet (_nets.py) as base_encoder, dim 8, K 32, 16x16 images, batch 8,
3 steps; the DDP shuffle becomes a single-process permutation.
"""

import torch
import torch.nn as nn

from corpus._nets import resnet


class MoCo(nn.Module):
    def __init__(self, base_encoder, dim=8, K=32, m=0.999, T=0.07):
        super(MoCo, self).__init__()
        self.K, self.m, self.T = K, m, T
        self.encoder_q = base_encoder(num_classes=dim)
        self.encoder_k = base_encoder(num_classes=dim)
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.data.copy_(param_q.data)
            param_k.requires_grad = False
        self.register_buffer("queue", torch.randn(dim, K))
        self.queue = nn.functional.normalize(self.queue, dim=0)
        self.register_buffer("queue_ptr", torch.zeros(1, dtype=torch.long))

    @torch.no_grad()
    def _momentum_update_key_encoder(self):
        for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
            param_k.mul_(self.m).add_(param_q.mul(1.0 - self.m))

    @torch.no_grad()
    def _dequeue_and_enqueue(self, keys):
        batch_size = keys.shape[0]
        ptr = int(self.queue_ptr)
        self.queue[:, ptr:ptr + batch_size] = keys.T
        ptr = (ptr + batch_size) % self.K
        self.queue_ptr[0] = ptr

    @torch.no_grad()
    def _batch_shuffle(self, x):
        idx_shuffle = torch.randperm(x.shape[0])
        idx_unshuffle = torch.argsort(idx_shuffle)
        return x[idx_shuffle], idx_unshuffle

    def forward(self, im_q, im_k):
        q = self.encoder_q(im_q)
        q = nn.functional.normalize(q, dim=1)
        with torch.no_grad():
            self._momentum_update_key_encoder()
            im_k, idx_unshuffle = self._batch_shuffle(im_k)
            k = self.encoder_k(im_k)
            k = nn.functional.normalize(k, dim=1)
            k = k[idx_unshuffle]
        l_pos = torch.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
        l_neg = torch.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
        logits = torch.cat([l_pos, l_neg], dim=1)
        logits /= self.T
        labels = torch.zeros(logits.shape[0], dtype=torch.long)
        self._dequeue_and_enqueue(k)
        return logits, labels


def accuracy(output, target, topk=(1,)):
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        return [correct[:k].reshape(-1).float().sum(0, keepdim=True).mul_(100.0 / batch_size) for k in topk]


def build():
    torch.manual_seed(0)
    model = MoCo(resnet)
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), 0.03, momentum=0.9, weight_decay=1e-4)
    train_loader = [(torch.randn(8, 3, 16, 16), torch.randn(8, 3, 16, 16)) for _ in range(3)]

    def train():
        model.train()
        for i, images in enumerate(train_loader):
            output, target = model(im_q=images[0], im_k=images[1])
            loss = criterion(output, target)
            acc1, acc5 = accuracy(output, target, topk=(1, 5))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            print(loss.item(), acc1[0].item(), acc5[0].item())

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
