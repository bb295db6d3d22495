# Source: openai/guided-diffusion, scripts/classifier_train.py + guided_diffusion/{fp16_util,train_util,resample,
# gaussian_diffusion,nn,unet,dist_util}.py, commit 22e0df8183507e13a7813f8d38d51b072ca1e67c
# https://github.com/openai/guided-diffusion
#
# Training the noised classifier used for classifier guidance: images are diffused with q_sample at a uniformly
# sampled timestep and the classifier gets the timestep; the batch is split into microbatches whose mean losses are
# scaled by len(sub_batch)/len(batch) and accumulated (zero_grad only for the first microbatch); the optimizer
# steps through MixedPrecisionTrainer (fp16 off: grad/param norms logged with .item(), then opt.step()); the LR
# is annealed linearly to 0 by hand; the model is wrapped in DDP (gloo, one process here) and validation reuses the
# SAME forward_backward_log under th.no_grad() and model.no_sync() (backward is skipped because loss.requires_grad
# is False); the ResBlocks' output convs and the final 1x1 head are zero_module()s, so the first logits are all 0.
# Adaptation: ImageNet/blobfile/MPI are unavailable: a synthetic 10-class 16x16 image stream replaces load_data,
# dist_util.setup_dist is reproduced without MPI (RANK 0, WORLD_SIZE 1, a free port), the EncoderUNetModel is
# reduced to a few timestep-conditioned ResBlocks (scale-shift norm, zero-initialised out convs) with the
# "adaptive" pool head; the logger keeps logkv/logkv_mean/dumpkvs and prints one line; iterations 150000 -> 200,
# lr 3e-4 -> 1e-3, batch_size 4 -> 32 with microbatch 8, anneal_lr True, log_interval 10 -> 40; no checkpoints.
import math
import os
import socket

import numpy as np
import torch as th
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel.distributed import DistributedDataParallel as DDP
from torch.optim import AdamW


# ----------------------------------------------------------------------------------------------- logger.py
class logger:
    name2val, name2cnt = {}, {}

    @staticmethod
    def log(*args):
        print(*args)

    @staticmethod
    def logkv(key, val):
        logger.name2val[key] = val

    @staticmethod
    def logkv_mean(key, val):
        oldval, cnt = logger.name2val.get(key, 0.0), logger.name2cnt.get(key, 0)
        logger.name2val[key] = oldval * cnt / (cnt + 1) + val / (cnt + 1)
        logger.name2cnt[key] = cnt + 1

    @staticmethod
    def dumpkvs():
        d = dict(logger.name2val)
        keys = ["step", "train_loss", "train_acc@1", "val_loss", "val_acc@1", "grad_norm"]
        print(" | ".join(f"{k} {float(d[k]):.4g}" for k in keys if k in d))
        logger.name2val.clear()
        logger.name2cnt.clear()
        return d


# -------------------------------------------------------------------------------------------- dist_util.py
def _find_free_port():
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        s.bind(("", 0))
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        return s.getsockname()[1]
    finally:
        s.close()


def setup_dist():
    if dist.is_initialized():
        return
    backend = "gloo" if not th.cuda.is_available() else "nccl"
    os.environ["MASTER_ADDR"] = "localhost"
    os.environ["RANK"] = "0"
    os.environ["WORLD_SIZE"] = "1"
    os.environ["MASTER_PORT"] = str(_find_free_port())
    dist.init_process_group(backend=backend, init_method="env://")


def dev():
    if th.cuda.is_available():
        return th.device("cuda")
    return th.device("cpu")


# ---------------------------------------------------------------------------------- gaussian_diffusion.py
def get_named_beta_schedule(schedule_name, num_diffusion_timesteps):
    if schedule_name == "linear":
        # Linear schedule from Ho et al, extended to work for any number of
        # diffusion steps.
        scale = 1000 / num_diffusion_timesteps
        beta_start = scale * 0.0001
        beta_end = scale * 0.02
        return np.linspace(
            beta_start, beta_end, num_diffusion_timesteps, dtype=np.float64
        )
    raise NotImplementedError(f"unknown beta schedule: {schedule_name}")


class GaussianDiffusion:
    def __init__(self, *, betas):
        betas = np.array(betas, dtype=np.float64)
        self.betas = betas
        self.num_timesteps = int(betas.shape[0])
        alphas = 1.0 - betas
        self.alphas_cumprod = np.cumprod(alphas, axis=0)
        self.sqrt_alphas_cumprod = np.sqrt(self.alphas_cumprod)
        self.sqrt_one_minus_alphas_cumprod = np.sqrt(1.0 - self.alphas_cumprod)

    def q_sample(self, x_start, t, noise=None):
        if noise is None:
            noise = th.randn_like(x_start)
        assert noise.shape == x_start.shape
        return (
            _extract_into_tensor(self.sqrt_alphas_cumprod, t, x_start.shape) * x_start
            + _extract_into_tensor(self.sqrt_one_minus_alphas_cumprod, t, x_start.shape)
            * noise
        )


def _extract_into_tensor(arr, timesteps, broadcast_shape):
    res = th.from_numpy(arr).to(device=timesteps.device)[timesteps].float()
    while len(res.shape) < len(broadcast_shape):
        res = res[..., None]
    return res.expand(broadcast_shape)


# -------------------------------------------------------------------------------------------- resample.py
class UniformSampler:
    def __init__(self, diffusion):
        self.diffusion = diffusion
        self._weights = np.ones([diffusion.num_timesteps])

    def weights(self):
        return self._weights

    def sample(self, batch_size, device):
        w = self.weights()
        p = w / np.sum(w)
        indices_np = np.random.choice(len(p), size=(batch_size,), p=p)
        indices = th.from_numpy(indices_np).long().to(device)
        weights_np = 1 / (len(p) * p[indices_np])
        weights = th.from_numpy(weights_np).float().to(device)
        return indices, weights


# -------------------------------------------------------------------------------------------------- nn.py
def zero_module(module):
    """
    Zero out the parameters of a module and return it.
    """
    for p in module.parameters():
        p.detach().zero_()
    return module


def normalization(channels):
    return nn.GroupNorm(8, channels)


def timestep_embedding(timesteps, dim, max_period=10000):
    half = dim // 2
    freqs = th.exp(
        -math.log(max_period) * th.arange(start=0, end=half, dtype=th.float32) / half
    ).to(device=timesteps.device)
    args = timesteps[:, None].float() * freqs[None]
    embedding = th.cat([th.cos(args), th.sin(args)], dim=-1)
    if dim % 2:
        embedding = th.cat([embedding, th.zeros_like(embedding[:, :1])], dim=-1)
    return embedding


# ------------------------------------------------------------------------------------------------ unet.py
class ResBlock(nn.Module):
    """unet.ResBlock with use_scale_shift_norm=True and optional downsampling (resblock_updown)."""

    def __init__(self, channels, emb_channels, out_channels=None, down=False):
        super().__init__()
        self.out_channels = out_channels or channels
        self.in_layers = nn.Sequential(normalization(channels), nn.SiLU(),
                                       nn.Conv2d(channels, self.out_channels, 3, padding=1))
        self.down = down
        self.emb_layers = nn.Sequential(nn.SiLU(), nn.Linear(emb_channels, 2 * self.out_channels))
        self.out_layers = nn.Sequential(normalization(self.out_channels), nn.SiLU(), nn.Dropout(p=0.0),
                                        zero_module(nn.Conv2d(self.out_channels, self.out_channels, 3, padding=1)))
        self.skip_connection = (nn.Identity() if self.out_channels == channels
                                else nn.Conv2d(channels, self.out_channels, 1))

    def forward(self, x, emb):
        if self.down:
            x = F.avg_pool2d(x, 2)
        h = self.in_layers(x)
        emb_out = self.emb_layers(emb).type(h.dtype)
        while len(emb_out.shape) < len(h.shape):
            emb_out = emb_out[..., None]
        out_norm, out_rest = self.out_layers[0], self.out_layers[1:]
        scale, shift = th.chunk(emb_out, 2, dim=1)
        h = out_norm(h) * (1 + scale) + shift
        h = out_rest(h)
        return self.skip_connection(x) + h


class EncoderUNetModel(nn.Module):
    def __init__(self, in_channels=3, model_channels=32, out_channels=10, channel_mult=(1, 2), pool="adaptive"):
        super().__init__()
        self.model_channels = model_channels
        time_embed_dim = model_channels * 4
        self.time_embed = nn.Sequential(nn.Linear(model_channels, time_embed_dim), nn.SiLU(),
                                        nn.Linear(time_embed_dim, time_embed_dim))
        self.input_conv = nn.Conv2d(in_channels, model_channels, 3, padding=1)
        blocks, ch = [], model_channels
        for level, mult in enumerate(channel_mult):
            blocks.append(ResBlock(ch, time_embed_dim, mult * model_channels, down=level > 0))
            ch = mult * model_channels
        self.input_blocks = nn.ModuleList(blocks)
        self.middle_block = ResBlock(ch, time_embed_dim)
        assert pool == "adaptive"
        self.out = nn.Sequential(
            normalization(ch),
            nn.SiLU(),
            nn.AdaptiveAvgPool2d((1, 1)),
            zero_module(nn.Conv2d(ch, out_channels, 1)),
            nn.Flatten(),
        )

    def forward(self, x, timesteps):
        emb = self.time_embed(timestep_embedding(timesteps, self.model_channels))
        h = self.input_conv(x)
        for module in self.input_blocks:
            h = module(h, emb)
        h = self.middle_block(h, emb)
        return self.out(h)


# --------------------------------------------------------------------------------------------- fp16_util.py
class MixedPrecisionTrainer:
    def __init__(self, *, model, use_fp16=False, fp16_scale_growth=1e-3, initial_lg_loss_scale=20.0):
        self.model = model
        self.use_fp16 = use_fp16
        self.fp16_scale_growth = fp16_scale_growth

        self.model_params = list(self.model.parameters())
        self.master_params = self.model_params
        self.param_groups_and_shapes = None
        self.lg_loss_scale = initial_lg_loss_scale
        assert not self.use_fp16

    def zero_grad(self):
        for param in self.model_params:
            # Taken from https://pytorch.org/docs/stable/_modules/torch/optim/optimizer.html#Optimizer.add_param_group
            if param.grad is not None:
                param.grad.detach_()
                param.grad.zero_()

    def backward(self, loss: th.Tensor):
        if self.use_fp16:
            loss_scale = 2 ** self.lg_loss_scale
            (loss * loss_scale).backward()
        else:
            loss.backward()

    def optimize(self, opt: th.optim.Optimizer):
        return self._optimize_normal(opt)

    def _optimize_normal(self, opt: th.optim.Optimizer):
        grad_norm, param_norm = self._compute_norms()
        logger.logkv_mean("grad_norm", grad_norm)
        logger.logkv_mean("param_norm", param_norm)
        opt.step()
        return True

    def _compute_norms(self, grad_scale=1.0):
        grad_norm = 0.0
        param_norm = 0.0
        for p in self.master_params:
            with th.no_grad():
                param_norm += th.norm(p, p=2, dtype=th.float32).item() ** 2
                if p.grad is not None:
                    grad_norm += th.norm(p.grad, p=2, dtype=th.float32).item() ** 2
        return np.sqrt(grad_norm) / grad_scale, np.sqrt(param_norm)


# -------------------------------------------------------------------------------------------- train_util.py
def log_loss_dict(diffusion, ts, losses):
    for key, values in losses.items():
        logger.logkv_mean(key, values.mean().item())
        # Log the quantiles (four quartiles, in particular).
        for sub_t, sub_loss in zip(ts.cpu().numpy(), values.detach().cpu().numpy()):
            quartile = int(4 * sub_t / diffusion.num_timesteps)
            logger.logkv_mean(f"{key}_q{quartile}", sub_loss)


# ---------------------------------------------------------------------------------------- image_datasets.py
def load_data(*, batch_size, image_size, class_cond=False, seed=0):
    """Infinite generator of (images in [-1, 1], {"y": labels}) like image_datasets.load_data."""
    g = th.Generator().manual_seed(1234)
    protos = F.interpolate(th.rand(10, 3, 4, 4, generator=g) * 2 - 1, size=image_size, mode="bilinear",
                           align_corners=False)
    g = th.Generator().manual_seed(seed)
    while True:
        y = th.randint(0, 10, (batch_size,), generator=g)
        x = (protos[y] + 0.3 * th.randn(batch_size, 3, image_size, image_size, generator=g)).clamp(-1, 1)
        yield x, {"y": y}


# -------------------------------------------------------------------------------------- classifier_train.py
def main():
    class args:
        noised = True
        iterations = 200
        lr = 1e-3
        weight_decay = 0.0
        anneal_lr = True
        batch_size = 32
        microbatch = 8
        schedule_sampler = "uniform"
        log_interval = 40
        eval_interval = 5
        image_size = 16
        classifier_use_fp16 = False
        diffusion_steps = 1000

    th.manual_seed(0)
    np.random.seed(0)
    setup_dist()

    logger.log("creating model and diffusion...")
    model = EncoderUNetModel(in_channels=3, model_channels=32, out_channels=10)
    diffusion = GaussianDiffusion(betas=get_named_beta_schedule("linear", args.diffusion_steps))
    model.to(dev())
    if args.noised:
        schedule_sampler = UniformSampler(diffusion)

    resume_step = 0

    mp_trainer = MixedPrecisionTrainer(
        model=model, use_fp16=args.classifier_use_fp16, initial_lg_loss_scale=16.0
    )

    model = DDP(
        model,
        device_ids=None,
        output_device=None,
        broadcast_buffers=False,
        bucket_cap_mb=128,
        find_unused_parameters=False,
    )

    logger.log("creating data loader...")
    data = load_data(batch_size=args.batch_size, image_size=args.image_size, class_cond=True, seed=0)
    val_data = load_data(batch_size=args.batch_size, image_size=args.image_size, class_cond=True, seed=1)

    logger.log("creating optimizer...")
    opt = AdamW(mp_trainer.master_params, lr=args.lr, weight_decay=args.weight_decay)

    logger.log("training classifier model...")

    def forward_backward_log(data_loader, prefix="train"):
        batch, extra = next(data_loader)
        labels = extra["y"].to(dev())

        batch = batch.to(dev())
        # Noisy images
        if args.noised:
            t, _ = schedule_sampler.sample(batch.shape[0], dev())
            batch = diffusion.q_sample(batch, t)
        else:
            t = th.zeros(batch.shape[0], dtype=th.long, device=dev())

        for i, (sub_batch, sub_labels, sub_t) in enumerate(
            split_microbatches(args.microbatch, batch, labels, t)
        ):
            logits = model(sub_batch, timesteps=sub_t)
            loss = F.cross_entropy(logits, sub_labels, reduction="none")

            losses = {}
            losses[f"{prefix}_loss"] = loss.detach()
            losses[f"{prefix}_acc@1"] = compute_top_k(
                logits, sub_labels, k=1, reduction="none"
            )
            losses[f"{prefix}_acc@5"] = compute_top_k(
                logits, sub_labels, k=5, reduction="none"
            )
            log_loss_dict(diffusion, sub_t, losses)
            del losses
            loss = loss.mean()
            if loss.requires_grad:
                if i == 0:
                    mp_trainer.zero_grad()
                mp_trainer.backward(loss * len(sub_batch) / len(batch))

    history = []
    for step in range(args.iterations - resume_step):
        logger.logkv("step", step + resume_step)
        logger.logkv(
            "samples",
            (step + resume_step + 1) * args.batch_size * dist.get_world_size(),
        )
        if args.anneal_lr:
            set_annealed_lr(opt, args.lr, (step + resume_step) / args.iterations)
        forward_backward_log(data)
        mp_trainer.optimize(opt)
        if val_data is not None and not step % args.eval_interval:
            with th.no_grad():
                with model.no_sync():
                    model.eval()
                    forward_backward_log(val_data, prefix="val")
                    model.train()
        if not step % args.log_interval or step == args.iterations - 1:
            history.append(logger.dumpkvs())

    dist.destroy_process_group()
    first, last = history[0]["val_loss"], history[-1]["val_loss"]
    print(f"[summary] val_loss (noised, all t) first={first:.4f} last={last:.4f} decreased={last < first}; "
          f"val_acc@1 last={history[-1]['val_acc@1']:.4f}")


def set_annealed_lr(opt, base_lr, frac_done):
    lr = base_lr * (1 - frac_done)
    for param_group in opt.param_groups:
        param_group["lr"] = lr


def compute_top_k(logits, labels, k, reduction="mean"):
    _, top_ks = th.topk(logits, k, dim=-1)
    if reduction == "mean":
        return (top_ks == labels[:, None]).float().sum(dim=-1).mean().item()
    elif reduction == "none":
        return (top_ks == labels[:, None]).float().sum(dim=-1)


def split_microbatches(microbatch, *args):
    bs = len(args[0])
    if microbatch == -1 or microbatch >= bs:
        yield tuple(args)
    else:
        for i in range(0, bs, microbatch):
            yield tuple(x[i : i + microbatch] if x is not None else None for x in args)


if __name__ == "__main__":
    main()
