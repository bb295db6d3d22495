# Source: tier4/Diffusion-Planner, diffusion_planner/diffusion_planner/train.py, diffusion_planner/diffusion_planner/utils/train_utils.py (resume_model), diffusion_planner/valid_predictor.py, commit 8314659a6d9e4ac6d8220aae161120dbee1817b9
# Report: https://github.com/tier4/Diffusion-Planner/pull/230
# Run: torchrun --nproc-per-node 2 train.py
# Diffusion-Planner: a denoising model for the ego trajectory is trained with DDP (+ timm-style
# ModelEma) and saved to latest.pth; afterwards the single-process validation entry point
# (valid_predictor.py with --ddp false) loads that checkpoint into a bare model. The planner network
# is replaced by an MLP denoiser, the nuPlan/tier4 scenes by synthetic ego histories.
import os
import tempfile
from copy import deepcopy

import torch
import torch.distributed as dist
import torch.nn as nn
from torch.nn.parallel import DistributedDataParallel as DDP


class ModelEma:
    def __init__(self, model, decay=0.9999, device=''):
        self.ema = deepcopy(model)
        self.ema.eval()
        self.decay = decay
        for p in self.ema.parameters():
            p.requires_grad_(False)

    def update(self, model):
        with torch.no_grad():
            msd = model.state_dict()
            for k, ema_v in self.ema.state_dict().items():
                ema_v.copy_(ema_v * self.decay + (1. - self.decay) * msd[k].detach())


class Diffusion_Planner(nn.Module):
    def __init__(self, hist_len=10, fut_len=16, hidden=128):
        super().__init__()
        self.fut_len = fut_len
        self.encoder = nn.Sequential(nn.Linear(hist_len * 4, hidden), nn.GELU(), nn.Linear(hidden, hidden))
        self.t_embed = nn.Linear(1, hidden)
        self.decoder = nn.Sequential(nn.Linear(hidden + fut_len * 2, hidden), nn.GELU(), nn.Linear(hidden, fut_len * 2))

    def forward(self, ego_history, noisy_future, t):
        h = self.encoder(ego_history.flatten(1)) + self.t_embed(t[:, None])
        return self.decoder(torch.cat([h, noisy_future.flatten(1)], -1)).view(-1, self.fut_len, 2)


def diffusion_loss(model, ego_history, future):
    t = torch.rand(future.shape[0])
    alpha = torch.cos(t * torch.pi / 2)[:, None, None]
    sigma = torch.sin(t * torch.pi / 2)[:, None, None]
    noise = torch.randn_like(future)
    pred = model(ego_history, alpha * future + sigma * noise, t)
    return ((pred - future) ** 2).mean()


def resume_model(path: str, model, optimizer, scheduler, ema, device):
    """
    load ckpt from path
    """
    ckpt = torch.load(path, map_location=device)

    # load model
    try:
        model.load_state_dict(ckpt["model"])
    except:
        model.load_state_dict(ckpt)
    print("Model load done")

    # load optimizer
    try:
        optimizer.load_state_dict(ckpt["optimizer"])
        print("Optimizer load done")
    except:
        print("no pretrained optimizer found")

    # load schedule
    try:
        scheduler.load_state_dict(ckpt["schedule"])
        print("Schedule load done")
    except:
        print("no schedule found,")

    # load step
    try:
        init_epoch = ckpt["epoch"]
        print("Step load done")
    except:
        init_epoch = 0

    try:
        ema.ema.load_state_dict(ckpt["ema_state_dict"])
        ema.ema.eval()
        for p in ema.ema.parameters():
            p.requires_grad_(False)
        print("ema load done")
    except:
        print("no ema shadow found")

    return model, optimizer, scheduler, init_epoch, None, ema


def make_scenes(gen, n, hist_len=10, fut_len=16):
    speed = torch.rand(n, generator=gen) * 10 + 2
    yaw_rate = (torch.rand(n, generator=gen) - 0.5) * 0.4
    steps = torch.arange(-hist_len + 1, fut_len + 1, dtype=torch.float32) * 0.1
    heading = yaw_rate[:, None] * steps[None]
    x = torch.cumsum(speed[:, None] * torch.cos(heading) * 0.1, 1)
    y = torch.cumsum(speed[:, None] * torch.sin(heading) * 0.1, 1)
    traj = torch.stack([x - x[:, hist_len - 1:hist_len], y - y[:, hist_len - 1:hist_len]], -1) / 10
    hist = torch.cat([traj[:, :hist_len], torch.stack([speed / 10, yaw_rate], -1)[:, None].expand(-1, hist_len, -1)], -1)
    return hist, traj[:, hist_len:]


def train(save_path, rank, world):
    gen = torch.Generator().manual_seed(100 + rank)
    hist, fut = make_scenes(gen, 512)
    torch.manual_seed(0)
    diffusion_planner = Diffusion_Planner()
    diffusion_planner = DDP(diffusion_planner, find_unused_parameters=True)
    model_ema = ModelEma(diffusion_planner, decay=0.99)
    optimizer = torch.optim.AdamW([{"params": diffusion_planner.module.parameters(), "lr": 1e-3}])
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, 8)
    for epoch in range(8):
        total = 0.0
        for i in range(0, 512, 64):
            loss = diffusion_loss(diffusion_planner, hist[i:i + 64], fut[i:i + 64])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            model_ema.update(diffusion_planner)
            total += loss.item() / 8
        scheduler.step()
        if rank == 0:
            print("epoch %d train loss %.4f" % (epoch, total))
            model_dict = {
                "epoch": epoch + 1,
                "model": diffusion_planner.state_dict(),
                "ema_state_dict": model_ema.ema.state_dict(),
                "optimizer": optimizer.state_dict(),
                "schedule": scheduler.state_dict(),
                "wandb_id": None,
            }
            torch.save(model_dict, f"{save_path}/latest.pth")


def valid_predictor(resume_model_path):
    diffusion_planner = Diffusion_Planner()
    params = [{"params": diffusion_planner.parameters(), "lr": 0.0}]
    optimizer = torch.optim.AdamW(params)
    print(f"Model loaded from {resume_model_path}")
    model_ema = ModelEma(diffusion_planner, decay=0.999, device="cpu")
    diffusion_planner, _, _, _, _, _ = resume_model(resume_model_path, diffusion_planner, optimizer, None, model_ema, "cpu")
    hist, fut = make_scenes(torch.Generator().manual_seed(7), 256)
    diffusion_planner.eval()
    with torch.no_grad():
        torch.manual_seed(1)
        print("valid denoising loss %.4f" % diffusion_loss(diffusion_planner, hist, fut).item())


def main():
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    save_path = tempfile.gettempdir() + "/diffusion_planner_run_%s" % os.environ.get("TORCHELASTIC_RUN_ID", "0")
    os.makedirs(save_path, exist_ok=True)
    train(save_path, rank, world)
    dist.barrier()
    if rank == 0:
        valid_predictor(f"{save_path}/latest.pth")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
