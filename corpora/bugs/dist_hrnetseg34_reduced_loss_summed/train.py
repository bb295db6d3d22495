# Source: HRNet/HRNet-Semantic-Segmentation, lib/core/function.py (reduce_tensor, train) and lib/utils/utils.py (AverageMeter), commit 06142dc1c7026e256a7561c3e875b06622b5670f
# Report: https://github.com/HRNet/HRNet-Semantic-Segmentation/issues/34
# Run: torchrun --nproc-per-node 2 train.py
import logging

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


class AverageMeter(object):
    """Computes and stores the average and current value"""

    def __init__(self):
        self.initialized = False
        self.val = None
        self.avg = None
        self.sum = None
        self.count = None

    def initialize(self, val, weight):
        self.val = val
        self.avg = val
        self.sum = val * weight
        self.count = weight
        self.initialized = True

    def update(self, val, weight=1):
        if not self.initialized:
            self.initialize(val, weight)
        else:
            self.add(val, weight)

    def add(self, val, weight):
        self.val = val
        self.sum += val * weight
        self.count += weight
        self.avg = self.sum / self.count

    def average(self):
        return self.avg


def reduce_tensor(inp):
    """
    Reduce the loss from all processes so that
    process with rank 0 has the averaged results.
    """
    world_size = dist.get_world_size()
    if world_size < 2:
        return inp
    with torch.no_grad():
        reduced_inp = inp
        dist.reduce(reduced_inp, dst=0)
    return reduced_inp


class FullModel(nn.Module):
    def __init__(self, model, loss):
        super(FullModel, self).__init__()
        self.model = model
        self.loss = loss

    def forward(self, inputs, labels):
        outputs = self.model(inputs)
        loss = self.loss(outputs, labels)
        return torch.unsqueeze(loss, 0), outputs


def train(epoch, num_epoch, epoch_iters, base_lr, num_iters, trainloader, optimizer, model, rank):
    model.train()
    ave_loss = AverageMeter()
    for i_iter, batch in enumerate(trainloader):
        images, labels = batch
        losses, _ = model(images, labels)
        loss = losses.mean()
        model.zero_grad()
        loss.backward()
        optimizer.step()
        # update average loss
        reduced_loss = reduce_tensor(loss)
        ave_loss.update(reduced_loss.item())
    if rank == 0:
        print('Epoch: [{}/{}] lr: {:.6f}, Loss: {:.6f}'.format(epoch, num_epoch, base_lr, ave_loss.average()))


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    seg = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 4, 1))
    model = DDP(FullModel(seg, nn.CrossEntropyLoss(ignore_index=255)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator().manual_seed(100 + rank)
    trainloader = []
    for _ in range(10):
        labels = torch.randint(0, 4, (4, 16, 16), generator=g)
        images = F.one_hot(labels, 4)[..., :3].permute(0, 3, 1, 2).float() + 0.5 * torch.randn(4, 3, 16, 16, generator=g)
        trainloader.append((images, labels))
    for epoch in range(4):
        train(epoch, 4, len(trainloader), 0.05, 40, trainloader, optimizer, model, rank)
    with torch.no_grad():
        local = torch.stack([model(x, y)[0].squeeze() for x, y in trainloader]).mean()
        gathered = [torch.zeros(()) for _ in range(world)]
        dist.all_gather(gathered, local)
    if rank == 0:
        print('mean training loss over all processes after training: {:.6f}'.format(torch.stack(gathered).mean().item()))
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
