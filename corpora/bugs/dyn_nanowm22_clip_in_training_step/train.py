# Source: simchowitzlabpublic/nano-world-model, src/experiments/train_experiment.py (NanoWMTrainingModule.training_step, configure_optimizers), src/utils/nanowm_utils.py (clip_grad_norm_), src/configs/experiment/default.yaml, commit 2ee3c355a6e44d2254eba8a8c29f199adddf4a3e
# Report: https://github.com/simchowitzlabpublic/nano-world-model/pull/22
# Nano world model training: a LightningModule trains an action-conditioned video denoiser
# with diffusion forcing (one timestep per frame) on VAE latents, AdamW with a constant
# schedule, gradient clipping with a start step and a logged gradient norm. The DiT is
# reduced to a small per-frame MLP denoiser, the SD-VAE latent codec is skipped (synthetic
# latents of a moving blob driven by the action), hydra config -> Namespace; steps scaled down.
import logging
import sys
import warnings
from math import inf
from types import SimpleNamespace as NS

import torch
import torch.nn as nn
from pytorch_lightning import LightningModule, Trainer
from torch.utils.data import DataLoader, Dataset


def clip_grad_norm_(parameters, max_norm: float, norm_type: float = 2.0,
                    error_if_nonfinite: bool = False, clip_grad=True) -> torch.Tensor:
    r"""
    Copy from torch.nn.utils.clip_grad_norm_
    """
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    params_list = list(parameters)
    grads = [p.grad for p in params_list if p.grad is not None]
    max_norm = float(max_norm)
    norm_type = float(norm_type)
    if len(grads) == 0:
        device = params_list[0].device if params_list else torch.device("cpu")
        return torch.tensor(0., device=device)
    device = grads[0].device
    if norm_type == inf:
        norms = [g.detach().abs().max().to(device) for g in grads]
        total_norm = norms[0] if len(norms) == 1 else torch.max(torch.stack(norms))
    else:
        total_norm = torch.norm(torch.stack([torch.norm(g.detach(), norm_type).to(device) for g in grads]), norm_type)

    if clip_grad:
        clip_coef = max_norm / (total_norm + 1e-6)
        clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
        for g in grads:
            g.detach().mul_(clip_coef_clamped.to(g.device))
    return total_norm


class GaussianDiffusion:
    def __init__(self, diffusion_steps=100):
        self.num_timesteps = diffusion_steps
        betas = torch.linspace(1e-4, 0.02, diffusion_steps)
        self.alphas_cumprod = torch.cumprod(1.0 - betas, 0)

    def training_losses(self, model, x_start, t, model_kwargs):
        noise = torch.randn_like(x_start)
        a = self.alphas_cumprod.to(x_start.device)[t].view(*t.shape, *([1] * (x_start.dim() - t.dim())))
        x_t = a.sqrt() * x_start + (1 - a).sqrt() * noise
        eps = model(x_t, t, **model_kwargs)
        return {"loss": ((eps - noise) ** 2).mean(dim=tuple(range(1, x_start.dim())))}


class FrameDenoiser(nn.Module):
    def __init__(self, latent_dim, action_dim, hidden=256, num_timesteps=100):
        super().__init__()
        self.t_embed = nn.Embedding(num_timesteps, hidden)
        self.a_embed = nn.Linear(action_dim, hidden)
        self.inp = nn.Linear(latent_dim * 2, hidden)
        self.net = nn.Sequential(nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(), nn.Linear(hidden, latent_dim))

    def forward(self, x, t, y=None, action=None):
        b, f = x.shape[:2]
        flat = x.reshape(b, f, -1)
        prev = torch.cat([flat[:, :1], flat[:, :-1]], 1)
        h = self.inp(torch.cat([flat, prev], -1)) + self.t_embed(t) + self.a_embed(action)
        return self.net(h).reshape(x.shape)


class BlobVideos(Dataset):
    def __init__(self, n, frames=6, size=8, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.action = torch.randn(n, frames, 2, generator=g) * 0.8
        pos = torch.cumsum(self.action, 1) + 4
        yy, xx = torch.meshgrid(torch.arange(size).float(), torch.arange(size).float(), indexing="ij")
        d = (yy - pos[..., 0, None, None]) ** 2 + (xx - pos[..., 1, None, None]) ** 2
        self.video = (3 * torch.exp(-d / 3.0)).unsqueeze(2).repeat(1, 1, 4, 1, 1)

    def __len__(self):
        return len(self.video)

    def __getitem__(self, i):
        return {"video": self.video[i], "action": self.action[i], "video_name": i}


class NanoWMTrainingModule(LightningModule):
    def __init__(self, args):
        super(NanoWMTrainingModule, self).__init__()
        self.args = args
        self.logger_instance = logging.getLogger("nanowm")
        self.model = FrameDenoiser(4 * 8 * 8, 2, num_timesteps=args.experiment.diffusion.diffusion_steps)
        self.logger_instance.info(f"Model Parameters: {sum(p.numel() for p in self.model.parameters()):,}")
        self.diffusion = GaussianDiffusion(args.experiment.diffusion.diffusion_steps)
        self.opt = torch.optim.AdamW(
            self.model.parameters(),
            lr=args.experiment.training.optimizer.lr,
            weight_decay=args.experiment.training.optimizer.weight_decay,
        )
        self.model.train()

    def training_step(self, batch, batch_idx):
        x = batch["video"].to(self.device)
        action = batch["action"].to(self.device)
        model_kwargs = dict(y=None)
        model_kwargs["action"] = action

        t_shape = (x.shape[0], x.shape[1])
        t = torch.randint(0, self.diffusion.num_timesteps, t_shape, device=self.device)

        loss_dict = self.diffusion.training_losses(self.model, x, t, model_kwargs)
        loss = loss_dict["loss"].mean()

        if self.global_step < self.args.experiment.training.gradient_clip_start_step:
            gradient_norm = clip_grad_norm_(self.model.parameters(), self.args.experiment.training.gradient_clip_norm, clip_grad=False)
        else:
            gradient_norm = clip_grad_norm_(self.model.parameters(), self.args.experiment.training.gradient_clip_norm, clip_grad=True)

        self.log("train_loss", loss, prog_bar=True, logger=True, batch_size=x.shape[0])
        self.log("gradient_norm", gradient_norm, logger=True, batch_size=x.shape[0])

        if (self.global_step + 1) % self.args.experiment.training.log_every == 0:
            self.logger_instance.info(
                f"(step={self.global_step+1:07d}/epoch={self.current_epoch:04d}) Train Loss: {loss:.4f}, Gradient Norm: {gradient_norm:.4f}"
            )
        return loss

    def configure_optimizers(self):
        self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(self.opt, lambda step: 1.0)
        return [self.opt], [self.lr_scheduler]


def main():
    torch.manual_seed(0)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stdout)
    logging.getLogger("pytorch_lightning").setLevel(logging.ERROR)
    logging.getLogger("lightning").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore")
    args = NS(experiment=NS(
        diffusion=NS(diffusion_steps=100),
        training=NS(max_steps=60, gradient_clip_norm=0.02, gradient_clip_start_step=10, log_every=10,
                    optimizer=NS(lr=1e-3, weight_decay=0.0))))
    module = NanoWMTrainingModule(args)
    loader = DataLoader(BlobVideos(256), batch_size=16, shuffle=True)
    trainer = Trainer(max_steps=args.experiment.training.max_steps, accelerator="cpu", devices=1, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(module, loader)


if __name__ == "__main__":
    main()
