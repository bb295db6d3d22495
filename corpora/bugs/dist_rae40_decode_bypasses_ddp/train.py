# Report: https://github.com/bytetriper/RAE/issues/40
# Run: torchrun --nproc-per-node 2 train.py
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler


class RAE(nn.Module):
    def __init__(self, image_dim=48, latent_dim=16):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(image_dim, 64), nn.GELU(), nn.Linear(64, latent_dim))
        self.encoder.requires_grad_(False)
        self.decoder = nn.Sequential(nn.Linear(latent_dim, 64), nn.GELU(), nn.Linear(64, image_dim))

    @torch.no_grad()
    def encode(self, x):
        return self.encoder(x)

    def decode(self, z):
        return self.decoder(z)

    def forward(self, x):
        return self.decode(self.encode(x))


def main():
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    images = torch.randn(512, 48)
    dataset = TensorDataset(images)
    sampler = DistributedSampler(dataset, shuffle=True, seed=0)
    loader = DataLoader(dataset, batch_size=32, sampler=sampler, drop_last=True)

    rae = RAE()
    ddp = DDP(rae)
    model_woddp = ddp.module
    optimizer = torch.optim.AdamW([p for p in ddp.parameters() if p.requires_grad], lr=2e-3)

    train_steps = 0
    for epoch in range(3):
        sampler.set_epoch(epoch)
        for (x,) in loader:
            with torch.no_grad():
                z = model_woddp.encode(x)
            recon = model_woddp.decode(z)
            loss = F.mse_loss(recon, x)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            train_steps += 1
        w = torch.cat([p.detach().flatten() for p in model_woddp.decoder.parameters()])
        other = w.clone()
        dist.broadcast(other, src=1)
        if rank == 0:
            print(f"epoch {epoch} step {train_steps} loss {loss.item():.4f} "
                  f"max |decoder rank0 - decoder rank1| {(w - other).abs().max().item():.6f}")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
