# Source: intel/e2eAIOK, modelzoo/unet/nnunet.patch (nnunet/network_architecture/DA/CAC_UNet.py, DDP trainer), commit d4ca77054f67803527bc92effb7c516761c8eebe
# Report: https://github.com/intel/e2eAIOK/issues/197
# Run: torchrun --nproc-per-node 2 train.py
# Model Adapter domain adaptation (DANN-style): a backbone (segmentation net, here a small conv net
# predicting per-pixel classes) trained on labelled source images, plus an adversarial adapter
# (domain discriminator behind a gradient reversal layer) on source + unlabelled target features.
# The two are combined in one network, wrapped in DistributedDataParallel, and the trainer calls the
# combined network through get_network(). Synthetic 1x16x16 images; the target domain is shifted.
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP


def get_network(network):
    return network.module if isinstance(network, DDP) else network


class GradientReverseFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, coeff=1.0):
        ctx.coeff = coeff
        return input * 1.0

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output.neg() * ctx.coeff, None


class Backbone(nn.Module):
    def __init__(self, num_classes=3):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(),
                                     nn.Conv2d(16, 16, 3, padding=1), nn.ReLU())
        self.seg_head = nn.Conv2d(16, num_classes, 1)
        self.loss = nn.CrossEntropyLoss()

    def forward(self, x):
        feat = self.encoder(x)
        return self.seg_head(feat), feat


class DANNAdapter(nn.Module):
    def __init__(self, in_feature=16, hidden_size=32):
        super().__init__()
        self.discriminator = nn.Sequential(nn.Linear(in_feature, hidden_size), nn.ReLU(),
                                           nn.Linear(hidden_size, 1))

    def forward(self, source_feat, target_feat):
        feat = torch.cat([source_feat, target_feat]).mean((2, 3))
        logits = self.discriminator(GradientReverseFunction.apply(feat, 1.0)).squeeze(1)
        domain = torch.cat([torch.ones(len(source_feat)), torch.zeros(len(target_feat))])
        return F.binary_cross_entropy_with_logits(logits, domain)


class CACUNet(nn.Module):
    def __init__(self, backbone, adapter, source_loss_weight=1.0, target_loss_weight=0.0):
        super().__init__()
        self.backbone = backbone
        self.adapter = adapter
        self.source_loss_weight = source_loss_weight
        self.target_loss_weight = target_loss_weight
        self.backbone_loss = backbone.loss

    def forward(self, input, label):
        source_data, data = input
        source_label, target = label
        output, feat = self.backbone(torch.cat([source_data, data]))
        source_output, output = output[:len(source_data)], output[len(source_data):]
        source_feat, target_feat = feat[:len(source_data)], feat[len(source_data):]
        source_loss = self.backbone_loss(source_output, source_label)
        adv_loss = self.adapter(source_feat, target_feat)
        return self.source_loss_weight * source_loss + adv_loss, source_loss, adv_loss


def make_images(g, n, shift):
    label = (torch.rand(n, 16, 16, generator=g) * 3).long()
    img = label.float()[:, None] + 0.6 * torch.randn(n, 1, 16, 16, generator=g)
    return img * (1.0 + shift) + 2.0 * shift, label


class NetworkTrainer:
    def __init__(self, distributed):
        self.network = CACUNet(Backbone(), DANNAdapter())
        if distributed:
            self.network = DDP(self.network, find_unused_parameters=True)
        self.optimizer = torch.optim.SGD(self.network.parameters(), lr=0.05, momentum=0.9)

    def run_iteration(self, data, target):
        self.optimizer.zero_grad()
        l, source_loss, adv_loss = get_network(self.network)(data, target)
        l.backward()
        self.optimizer.step()
        return source_loss.item(), adv_loss.item()


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    trainer = NetworkTrainer(distributed=True)
    g = torch.Generator().manual_seed(10 + rank)
    for epoch in range(4):
        for it in range(25):
            source_data, source_label = make_images(g, 8, shift=0.0)
            data, target = make_images(g, 8, shift=0.5)
            source_loss, adv_loss = trainer.run_iteration((source_data, data), (source_label, target))
        w = torch.cat([p.detach().flatten() for p in get_network(trainer.network).parameters()])
        other = w.clone()
        dist.broadcast(other, src=1)
        if rank == 0:
            print(f"epoch {epoch} source loss {source_loss:.4f} adv loss {adv_loss:.4f} "
                  f"max |network rank0 - rank1| {(w - other).abs().max().item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
