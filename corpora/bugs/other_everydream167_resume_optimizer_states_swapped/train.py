# Source: victorchall/EveryDream2trainer, optimizer/optimizers.py (EveryDreamOptimizer), train.py (main training loop, get_model_prediction_and_target, __save_model), commit 841aae1bfe20dd3176272db09dbc0efa22cfb0c7
# Report: https://github.com/victorchall/EveryDream2trainer/pull/167
# EveryDream2 fine-tunes a text encoder and a UNet with two AdamW optimizers wrapped in
# EveryDreamOptimizer; checkpoints store optimizer_te.pt / optimizer_unet.pt next to the weights and a
# resumed run (resume_ckpt) reloads both through EveryDreamOptimizer.load(). Stable Diffusion is
# replaced by a token-embedding text encoder and an MLP noise predictor over 16-d "latents"
# generated from the caption, DDPMScheduler by its linear-beta add_noise; diffusers' get_scheduler
# ("constant") by the equivalent LambdaLR; AMP / bitsandbytes are off (optimizer "adamw").
# The run trains 5 epochs, saves a checkpoint, then resumes from it for 5 more epochs.
import itertools
import logging
import os
import pprint
import tempfile

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)
logging.basicConfig(level=logging.WARNING, format="%(levelname)s:%(message)s")


class _NoColor:
    LIGHTYELLOW_EX = ""
    CYAN = ""
    RESET_ALL = ""


Fore = Style = _NoColor()


def get_scheduler(name, optimizer, num_warmup_steps=None, num_training_steps=None):
    assert name == "constant"
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1, last_epoch=-1)


BETAS_DEFAULT = [0.9, 0.999]
EPSILON_DEFAULT = 1e-8
WEIGHT_DECAY_DEFAULT = 0.01
LR_DEFAULT = 1e-6
OPTIMIZER_TE_STATE_FILENAME = "optimizer_te.pt"
OPTIMIZER_UNET_STATE_FILENAME = "optimizer_unet.pt"


class EveryDreamOptimizer():
    """
    Wrapper to manage optimizers
    resume_ckpt_path: path to resume checkpoint, will try to load state (.pt) files if they exist
    optimizer_config: config for the optimizers
    text_encoder: text encoder model parameters
    unet: unet model parameters
    """
    def __init__(self, args, optimizer_config, text_encoder_params, unet_params, epoch_len):
        self.epoch_len = epoch_len
        self.te_config, self.base_config = self.get_final_optimizer_configs(args, optimizer_config)

        self.grad_accum = args.grad_accum
        self.clip_grad_norm = args.clip_grad_norm
        self.text_encoder_params = list(text_encoder_params)
        self.unet_params = list(unet_params)

        self.optimizers = []
        self.optimizer_te, self.optimizer_unet = self.create_optimizers(args, self.text_encoder_params, self.unet_params)
        self.optimizers.append(self.optimizer_te) if self.optimizer_te is not None else None
        self.optimizers.append(self.optimizer_unet) if self.optimizer_unet is not None else None

        self.lr_schedulers = []
        schedulers = self.create_lr_schedulers(args, optimizer_config)
        self.lr_schedulers.extend(schedulers)

        self.load(args.resume_ckpt)

        self.scaler = torch.amp.GradScaler(
            enabled=args.amp,
            init_scale=2**17.5,
            growth_factor=2,
            backoff_factor=1.0/2,
            growth_interval=25,
        )

    def step(self, loss, step, global_step):
        self.scaler.scale(loss).backward()

        if self.clip_grad_norm is not None:
            torch.nn.utils.clip_grad_norm_(parameters=self.unet_params, max_norm=self.clip_grad_norm)
            torch.nn.utils.clip_grad_norm_(parameters=self.text_encoder_params, max_norm=self.clip_grad_norm)
        if ((global_step + 1) % self.grad_accum == 0) or (step == self.epoch_len - 1):
            for optimizer in self.optimizers:
                self.scaler.step(optimizer)

            self.scaler.update()
            self._zero_grad(set_to_none=True)

        for scheduler in self.lr_schedulers:
            scheduler.step()

    def _zero_grad(self, set_to_none=False):
        for optimizer in self.optimizers:
            optimizer.zero_grad(set_to_none=set_to_none)

    def get_unet_lr(self):
        return self.optimizer_unet.param_groups[0]['lr'] if self.optimizer_unet is not None else 0

    def get_textenc_lr(self):
        return self.optimizer_te.param_groups[0]['lr'] if self.optimizer_te is not None else 0

    def save(self, ckpt_path: str):
        """
        Saves the optimizer states to path
        """
        self._save_optimizer(self.optimizer_te, os.path.join(ckpt_path, OPTIMIZER_TE_STATE_FILENAME)) if self.optimizer_te is not None else None
        self._save_optimizer(self.optimizer_unet, os.path.join(ckpt_path, OPTIMIZER_UNET_STATE_FILENAME)) if self.optimizer_unet is not None else None

    def load(self, ckpt_path: str):
        """
        Loads the optimizer states from path
        """
        te_optimizer_state_path = os.path.join(ckpt_path, OPTIMIZER_TE_STATE_FILENAME)
        unet_optimizer_state_path = os.path.join(ckpt_path, OPTIMIZER_UNET_STATE_FILENAME)
        if os.path.exists(te_optimizer_state_path) and self.optimizer_unet is not None:
            self._load_optimizer(self.optimizer_unet, te_optimizer_state_path)
        if os.path.exists(unet_optimizer_state_path) and self.optimizer_te is not None:
            self._load_optimizer(self.optimizer_te, unet_optimizer_state_path)

    def create_optimizers(self, args, text_encoder_params, unet_params):
        """
        creates optimizers from config and args for unet and text encoder
        returns (optimizer_te, optimizer_unet)
        """

        if args.disable_textenc_training:
            optimizer_te = None
        else:
            optimizer_te = self._create_optimizer(args, self.te_config, text_encoder_params)
        if args.disable_unet_training:
            optimizer_unet = None
        else:
            optimizer_unet = self._create_optimizer(args, self.base_config, unet_params)

        return optimizer_te, optimizer_unet

    def get_final_optimizer_configs(self, args, global_optimizer_config):
        """
        defautls and overrides based on priority of 'primary cli args > base config > text encoder overrides'
        """
        base_config = global_optimizer_config.get("base")
        te_config = global_optimizer_config.get("text_encoder_overrides")

        if args.lr_decay_steps is None or args.lr_decay_steps < 1:
            args.lr_decay_steps = int(self.epoch_len * args.max_epochs * 1.5)

        if args.lr_warmup_steps is None:
            args.lr_warmup_steps = int(args.lr_decay_steps / 50)

        if args.lr is not None:
            base_config["lr"] = args.lr

        base_config["optimizer"] = base_config.get("optimizer", None) or "adamw8bit"
        base_config["lr_warmup_steps"] = base_config.get("lr_warmup_steps", None) or args.lr_warmup_steps
        base_config["lr_decay_steps"] = base_config.get("lr_decay_steps", None) or args.lr_decay_steps
        base_config["lr_scheduler"] = base_config.get("lr_scheduler", None) or args.lr_scheduler

        te_config["lr"] = te_config.get("lr", None) or base_config["lr"]
        te_config["optimizer"] = te_config.get("optimizer", None) or base_config["optimizer"]
        te_config["lr_scheduler"] = te_config.get("lr_scheduler", None) or base_config["lr_scheduler"]
        te_config["lr_warmup_steps"] = te_config.get("lr_warmup_steps", None) or base_config["lr_warmup_steps"]
        te_config["lr_decay_steps"] = te_config.get("lr_decay_steps", None) or base_config["lr_decay_steps"]
        te_config["weight_decay"] = te_config.get("weight_decay", None) or base_config["weight_decay"]
        te_config["betas"] = te_config.get("betas", None) or base_config["betas"]
        te_config["epsilon"] = te_config.get("epsilon", None) or base_config["epsilon"]

        return te_config, base_config

    def create_lr_schedulers(self, args, optimizer_config):
        unet_config = optimizer_config["base"]
        te_config = optimizer_config["text_encoder_overrides"]

        ret_val = []

        if self.optimizer_te is not None:
            lr_scheduler = get_scheduler(
                te_config.get("lr_scheduler", args.lr_scheduler),
                optimizer=self.optimizer_te,
                num_warmup_steps=te_config.get("lr_warmup_steps", None),
                num_training_steps=unet_config.get("lr_decay_steps", None) or unet_config["lr_decay_steps"]
            )
            ret_val.append(lr_scheduler)

        if self.optimizer_unet is not None:
            unet_config = optimizer_config["base"]
            lr_scheduler = get_scheduler(
                unet_config["lr_scheduler"],
                optimizer=self.optimizer_unet,
                num_warmup_steps=int(unet_config["lr_warmup_steps"]),
                num_training_steps=int(unet_config["lr_decay_steps"]),
            )
            ret_val.append(lr_scheduler)
        return ret_val

    @staticmethod
    def _save_optimizer(optimizer, path: str):
        """
        Saves the optimizer state to specific path/filename
        """
        torch.save(optimizer.state_dict(), path)

    @staticmethod
    def _load_optimizer(optimizer: torch.optim.Optimizer, path: str):
        """
        Loads the optimizer state to an Optimizer object
        optimizer: torch.optim.Optimizer
        path: .pt file
        """
        try:
            optimizer.load_state_dict(torch.load(path))
            logging.info(f" Loaded optimizer state from {path}")
        except Exception as e:
            logging.warning(f"{Fore.LIGHTYELLOW_EX}**Failed to load optimizer state from {path}, optimizer state will not be loaded, \n * Exception: {e}{Style.RESET_ALL}")
            pass

    def _create_optimizer(self, args, local_optimizer_config, parameters):
        betas = BETAS_DEFAULT
        epsilon = EPSILON_DEFAULT
        weight_decay = WEIGHT_DECAY_DEFAULT
        opt_class = None
        optimizer = None

        default_lr = 1e-6
        curr_lr = args.lr

        if local_optimizer_config is not None:
            betas = local_optimizer_config["betas"] or betas
            epsilon = local_optimizer_config["epsilon"] or epsilon
            weight_decay = local_optimizer_config["weight_decay"] or weight_decay
            optimizer_name = local_optimizer_config["optimizer"] or "adamw8bit"
            curr_lr = local_optimizer_config.get("lr", curr_lr)
            if args.lr is not None:
                curr_lr = args.lr

        if curr_lr is None:
            curr_lr = default_lr

        if optimizer_name:
            if optimizer_name == "adamw":
                opt_class = torch.optim.AdamW

        if not optimizer:
            optimizer = opt_class(
                itertools.chain(parameters),
                lr=curr_lr,
                betas=(betas[0], betas[1]),
                eps=epsilon,
                weight_decay=weight_decay,
                amsgrad=False,
            )
        return optimizer


class Args:
    lr = None
    lr_scheduler = "constant"
    lr_decay_steps = None
    lr_warmup_steps = None
    max_epochs = 10
    grad_accum = 1
    clip_grad_norm = None
    amp = False
    disable_textenc_training = False
    disable_unet_training = False
    batch_size = 32
    resume_ckpt = ""


def optimizer_config():
    return {
        "base": {"optimizer": "adamw", "lr": 2e-3, "lr_scheduler": "constant", "betas": [0.9, 0.999],
                 "epsilon": 1e-8, "weight_decay": 0.010},
        "text_encoder_overrides": {"lr": 5e-4, "betas": None, "epsilon": None, "weight_decay": None},
    }


class TextEncoder(nn.Module):
    def __init__(self, vocab=48, dim=64):
        super().__init__()
        self.embed = nn.Embedding(vocab, dim)
        self.proj = nn.Sequential(nn.Linear(dim, dim), nn.GELU(), nn.Linear(dim, dim))

    def forward(self, tokens):
        return self.proj(self.embed(tokens).mean(1))


class UNet(nn.Module):
    def __init__(self, d=16, cond=64, hidden=256):
        super().__init__()
        self.t_embed = nn.Embedding(1000, 32)
        self.net = nn.Sequential(nn.Linear(d + 32 + cond, hidden), nn.SiLU(), nn.Linear(hidden, hidden), nn.SiLU(),
                                 nn.Linear(hidden, d))

    def forward(self, x, t, encoder_hidden_states):
        return self.net(torch.cat([x, self.t_embed(t), encoder_hidden_states], dim=1))


class DDPMScheduler:
    def __init__(self, num_train_timesteps=1000):
        self.num_train_timesteps = num_train_timesteps
        betas = torch.linspace(0.0001, 0.02, num_train_timesteps)
        self.alphas_cumprod = torch.cumprod(1.0 - betas, dim=0)

    def add_noise(self, latents, noise, timesteps):
        a = self.alphas_cumprod[timesteps].sqrt().unsqueeze(1)
        s = (1 - self.alphas_cumprod[timesteps]).sqrt().unsqueeze(1)
        return a * latents + s * noise


def make_data(n, g):
    table = torch.randn(48, 16, generator=g)
    tokens = torch.randint(0, 48, (n, 6), generator=g)
    latents = torch.tanh(table[tokens].sum(1) / 2.0) * 2.0 + 0.05 * torch.randn(n, 16, generator=g)
    return tokens, latents


def run(args, start_epoch, end_epoch, ckpt_dir, data, val):
    text_encoder, unet = TextEncoder(), UNet()
    if args.resume_ckpt:
        text_encoder.load_state_dict(torch.load(os.path.join(args.resume_ckpt, "text_encoder.pt")))
        unet.load_state_dict(torch.load(os.path.join(args.resume_ckpt, "unet.pt")))
    noise_scheduler = DDPMScheduler()
    tokens, latents = data
    epoch_len = len(tokens) // args.batch_size
    ed_optimizer = EveryDreamOptimizer(args, optimizer_config(), text_encoder.parameters(), unet.parameters(), epoch_len)
    g = torch.Generator().manual_seed(100 + start_epoch)
    if args.resume_ckpt:
        steps = [max((s.get("step", 0) for s in o.state.values()), default=0) for o in ed_optimizer.optimizers]
        steps = [int(s) for s in steps]
        print(f"resumed optimizers: te {len(ed_optimizer.optimizer_te.state)} states (step {steps[0]}), "
              f"unet {len(ed_optimizer.optimizer_unet.state)} states (step {steps[1]})")

    def get_model_prediction_and_target(latents, tokens, gen):
        noise = torch.randn(latents.shape, generator=gen)
        bsz = latents.shape[0]
        timesteps = torch.randint(0, noise_scheduler.num_train_timesteps, (bsz,), generator=gen)
        noisy_latents = noise_scheduler.add_noise(latents, noise, timesteps)
        encoder_hidden_states = text_encoder(tokens)
        target = noise
        model_pred = unet(noisy_latents, timesteps, encoder_hidden_states)
        return model_pred, target

    def validate():
        with torch.no_grad():
            vg = torch.Generator().manual_seed(7)
            pred, target = get_model_prediction_and_target(val[1], val[0], vg)
            return F.mse_loss(pred, target).item()

    global_step = start_epoch * epoch_len
    for epoch in range(start_epoch, end_epoch):
        perm = torch.randperm(len(tokens), generator=g)
        losses = []
        for step in range(epoch_len):
            b = perm[step * args.batch_size:(step + 1) * args.batch_size]
            model_pred, target = get_model_prediction_and_target(latents[b], tokens[b], g)
            loss = F.mse_loss(model_pred.float(), target.float(), reduction="mean")
            ed_optimizer.step(loss, step, global_step)
            losses.append(loss.item())
            global_step += 1
        first = f"  first 20 steps {np.mean(losses[:20]):.4f}" if epoch == start_epoch else ""
        print(f"epoch {epoch}: train loss {np.mean(losses):.4f}{first}  val loss {validate():.4f}  "
              f"lr unet {ed_optimizer.get_unet_lr():.1e} te {ed_optimizer.get_textenc_lr():.1e}")

    torch.save(text_encoder.state_dict(), os.path.join(ckpt_dir, "text_encoder.pt"))
    torch.save(unet.state_dict(), os.path.join(ckpt_dir, "unet.pt"))
    ed_optimizer.save(ckpt_dir)
    return validate()


def main():
    g = torch.Generator().manual_seed(0)
    data = make_data(2048, g)
    val = make_data(512, torch.Generator().manual_seed(1))
    val = (val[0][:512], val[1][:512])
    with tempfile.TemporaryDirectory() as ckpt:
        args = Args()
        run(args, 0, 5, ckpt, data, val)
        print("saved checkpoint, resuming from it")
        args = Args()
        args.resume_ckpt = ckpt
        final = run(args, 5, 10, ckpt, data, val)
    print(f"final val loss {final:.4f}")


if __name__ == "__main__":
    main()
