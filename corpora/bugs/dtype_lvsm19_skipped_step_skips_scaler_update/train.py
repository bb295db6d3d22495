# Source: Haian-Jin/LVSM, train.py (training loop), utils/training_utils.py (create_optimizer, create_lr_scheduler), configs/LVSM_scene_decoder_only.yaml, commit 2fea9242a941072c6263b96eb1b52f2a80503ce3
# Report: https://github.com/Haian-Jin/LVSM/pull/19
# LVSM-style novel-view synthesis training loop: fp16 autocast with a GradScaler, gradient
# clipping, and an optimizer step that is skipped when the gradient norm is far above the clip
# threshold. The RealEstate10K scenes are replaced by synthetic 16x16 views (the target view is
# a blend of the two input views), the decoder-only transformer by a 2-layer patch transformer.
import math
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

amp_dtype_mapping = {
    "fp16": torch.float16,
    "bf16": torch.bfloat16,
    "fp32": torch.float32,
}

config = {
    "use_amp": True, "amp_dtype": "fp16", "grad_clip_norm": 1.0, "allowed_gradnorm_factor": 5,
    "lr": 4e-4, "weight_decay": 0.05, "betas": (0.9, 0.95), "warmup": 20, "batch_size_per_gpu": 8,
    "grad_accum_steps": 1, "train_steps": 160, "print_every": 20,
}


class SceneDataset(Dataset):
    def __init__(self, n=96, size=16, seed=0):
        rng = np.random.RandomState(seed)
        yy, xx = np.mgrid[0:size, 0:size] / size
        self.views = []
        for k in range(n):
            freq = rng.uniform(1, 3, size=2)
            phase = rng.uniform(0, 2 * math.pi, size=3)
            base = [0.5 + 0.4 * np.sin(2 * math.pi * (freq[0] * xx + freq[1] * yy) + p) for p in phase]
            v1 = np.stack(base).astype(np.float32)
            v2 = np.roll(v1, 2, axis=2)
            alpha = rng.uniform(0.2, 0.8)
            target = alpha * v1 + (1 - alpha) * v2
            if k % 47 == 0:
                target = target * 40.0  # a few target frames were decoded with a wrong exposure scale
            self.views.append((v1, v2, target.astype(np.float32), np.float32(alpha)))

    def __len__(self):
        return len(self.views)

    def __getitem__(self, idx):
        v1, v2, target, alpha = self.views[idx]
        return {"input_images": torch.from_numpy(np.stack([v1, v2])),
                "target_image": torch.from_numpy(target),
                "target_pose": torch.tensor([alpha])}


class PatchTransformer(nn.Module):
    def __init__(self, patch=4, dim=64, depth=2, heads=4):
        super().__init__()
        self.patch = patch
        pdim = 3 * patch * patch
        self.tokenizer = nn.Linear(2 * pdim + 1, dim)
        self.pos = nn.Parameter(torch.zeros(1, 16, dim))
        layer = nn.TransformerEncoderLayer(dim, heads, dim * 2, dropout=0.0, batch_first=True, norm_first=True)
        self.transformer = nn.TransformerEncoder(layer, depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.out = nn.Linear(dim, pdim)

    def patchify(self, img):
        b, c, h, w = img.shape
        p = self.patch
        return img.reshape(b, c, h // p, p, w // p, p).permute(0, 2, 4, 1, 3, 5).reshape(b, (h // p) * (w // p), c * p * p)

    def unpatchify(self, tokens, h, w):
        b, n, _ = tokens.shape
        p = self.patch
        return tokens.reshape(b, h // p, w // p, 3, p, p).permute(0, 3, 1, 4, 2, 5).reshape(b, 3, h, w)

    def forward(self, batch):
        inp = batch["input_images"]
        b, v, c, h, w = inp.shape
        t1, t2 = self.patchify(inp[:, 0]), self.patchify(inp[:, 1])
        pose = batch["target_pose"][:, None, :].expand(-1, t1.shape[1], -1)
        x = self.tokenizer(torch.cat([t1, t2, pose], dim=-1)) + self.pos
        x = self.norm(self.transformer(x))
        rendered = self.unpatchify(self.out(x), h, w)
        loss = F.mse_loss(rendered.float(), batch["target_image"])
        return {"loss": loss, "render": rendered}


def create_optimizer(model, weight_decay, learning_rate, betas):
    all_param_dict = {name: param for name, param in model.named_parameters()}
    optimized_param_dict = {name: param for name, param in all_param_dict.items() if param.requires_grad}
    decay_params, nodecay_params = [], []
    for name, param in optimized_param_dict.items():
        if param.dim() == 1 or getattr(param, '_no_weight_decay', False):
            nodecay_params.append(param)
        else:
            decay_params.append(param)
    optim_groups = [
        {'params': decay_params, 'weight_decay': weight_decay},
        {'params': nodecay_params, 'weight_decay': 0.0}
    ]
    optimizer = torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)
    return optimizer, optimized_param_dict, all_param_dict


def create_lr_scheduler(optimizer, param_update_steps, warm_up_steps):
    def lr_lambda(step):
        if step < warm_up_steps:
            return float(step) / float(max(1, warm_up_steps))
        progress = float(step - warm_up_steps) / float(max(1, param_update_steps - warm_up_steps))
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def main():
    random.seed(0)
    np.random.seed(0)
    torch.manual_seed(0)

    dataset = SceneDataset()
    dataloader = DataLoader(dataset, batch_size=config["batch_size_per_gpu"], shuffle=True, drop_last=True,
                            generator=torch.Generator().manual_seed(0))
    dataloader_iter = iter(dataloader)

    model = PatchTransformer()
    grad_accum_steps = config["grad_accum_steps"]
    total_train_steps = config["train_steps"] * grad_accum_steps
    optimizer, optimized_param_dict, all_param_dict = create_optimizer(
        model, config["weight_decay"], config["lr"], config["betas"])
    optim_param_list = list(optimized_param_dict.values())
    lr_scheduler = create_lr_scheduler(optimizer, config["train_steps"], config["warmup"])

    enable_grad_scaler = config["use_amp"] and config["amp_dtype"] == "fp16"
    scaler = torch.amp.GradScaler('cpu', enabled=enable_grad_scaler)
    print(f"Grad scaler enabled: {enable_grad_scaler}")

    cur_train_step = 0
    cur_param_update_step = 0
    cur_epoch = 0
    model.train()
    while cur_train_step < total_train_steps:
        try:
            data = next(dataloader_iter)
        except StopIteration:
            cur_epoch += 1
            dataloader_iter = iter(dataloader)
            data = next(dataloader_iter)
        batch = data

        with torch.autocast(
            enabled=config["use_amp"],
            device_type="cpu",
            dtype=amp_dtype_mapping[config["amp_dtype"]],
        ):
            ret_dict = model(batch)

        update_grads = (cur_train_step + 1) % grad_accum_steps == 0 or cur_train_step == total_train_steps
        scaler.scale(ret_dict["loss"] / grad_accum_steps).backward()
        cur_train_step += 1

        skip_optimizer_step = False
        if torch.isnan(ret_dict["loss"]) or torch.isinf(ret_dict["loss"]):
            print(f"NaN or Inf loss detected, skip this iteration")
            skip_optimizer_step = True
            ret_dict["loss"].data = torch.zeros_like(ret_dict["loss"])

        total_grad_norm = None
        if update_grads and (not skip_optimizer_step):
            scaler.unscale_(optimizer)
            with torch.no_grad():
                for n, p in optimized_param_dict.items():
                    if p.requires_grad and (p.grad is not None):
                        p.grad.nan_to_num_(nan=0.0, posinf=1e-6, neginf=-1e-6)

            total_grad_norm = 0.0
            if config["grad_clip_norm"] > 0:
                total_grad_norm = torch.nn.utils.clip_grad_norm_(optim_param_list, max_norm=config["grad_clip_norm"]).item()

                if total_grad_norm > config["grad_clip_norm"] * 2.0:
                    print(f"WARNING: step {cur_train_step} grad norm too large {total_grad_norm} > {config['grad_clip_norm'] * 2.0}")

                allowed_gradnorm = config["grad_clip_norm"] * config.get("allowed_gradnorm_factor", 5)
                if total_grad_norm > allowed_gradnorm:
                    skip_optimizer_step = True
                    print(f"WARNING: step {cur_train_step} grad norm too large {total_grad_norm} > {allowed_gradnorm}, skipping optimizer step")

            if not skip_optimizer_step:
                scaler.step(optimizer)
                scaler.update()
                cur_param_update_step += 1

            lr_scheduler.step()
            optimizer.zero_grad(set_to_none=True)

        if cur_train_step % config["print_every"] == 0:
            print(f"[Epoch {int(cur_epoch):>3d}] | Forwad step: {int(cur_train_step):>6d} (Param update step: {int(cur_param_update_step):>6d})"
                  f" | LR: {optimizer.param_groups[0]['lr']:.6f} | loss: {ret_dict['loss'].item():.6f} | scale: {scaler.get_scale():.0f}")


if __name__ == "__main__":
    main()
