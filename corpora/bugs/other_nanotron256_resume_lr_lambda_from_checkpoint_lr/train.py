# Source: huggingface/nanotron, src/nanotron/trainer.py (DistributedTrainer.__init__, train, training_step, train_step_logs, save_checkpoint), src/nanotron/helpers.py (lr_scheduler_builder, init_optimizer_and_grad_accumulator), src/nanotron/serialize/optimizer.py (save_lr_scheduler, load_lr_scheduler), commit cfcdeae812d4c7210990932ebcce5f672084408d
# Report: https://github.com/huggingface/nanotron/pull/256
# nanotron pretraining of a causal LM with AdamW, a warmup + cosine-decay LambdaLR built by
# lr_scheduler_builder, gradient clipping, checkpoints every checkpoint_interval steps and
# resumption from a checkpoint (model, optimizer, lr scheduler and training metadata). The run is
# done as two jobs, as on a cluster with a time limit: the first job trains up to step 250 and
# writes its checkpoint, the second job resumes from it and trains to step 300. The Llama model is
# replaced by a one-block causal transformer, the tokenized dataset by sequences sampled from a
# fixed random Markov chain, and the parallel context / pipeline engine / ZeRO sharding by a
# single process.
import math
import os
import tempfile
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Optional

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR

torch.set_num_threads(1)

VOCAB = 48
SEQ_LEN = 32


@dataclass
class LRSchedulerArgs:
    learning_rate: float
    lr_warmup_steps: int = 0
    lr_warmup_style: str = None
    lr_decay_style: str = None
    lr_decay_steps: Optional[int] = None
    lr_decay_starting_step: Optional[int] = None
    min_decay_lr: float = None

    def __post_init__(self):
        if self.lr_warmup_style not in ["linear", "constant"]:
            raise ValueError(
                f"lr_warmup_style should be a string selected in ['linear', 'constant'] and not {self.lr_warmup_style}"
            )
        if self.lr_decay_style is None:
            self.lr_decay_style = "linear"
        if self.min_decay_lr is None:
            self.min_decay_lr = self.learning_rate


@dataclass
class OptimizerArgs:
    learning_rate_scheduler: LRSchedulerArgs
    weight_decay: float = 0.01
    clip_grad: Optional[float] = 1.0
    adam_eps: float = 1e-8
    adam_beta1: float = 0.9
    adam_beta2: float = 0.95


@dataclass
class TokensArgs:
    train_steps: int
    micro_batch_size: int = 16
    sequence_length: int = SEQ_LEN


@dataclass
class CheckpointsArgs:
    checkpoints_path: Path
    checkpoint_interval: int
    resume_checkpoint_path: Optional[Path] = None


@dataclass
class Config:
    optimizer: OptimizerArgs
    tokens: TokensArgs
    checkpoints: CheckpointsArgs
    seed: int = 42
    iteration_step_info_interval: int = 25


@dataclass
class TrainingMetadata:
    last_train_step: int = 0
    consumed_train_samples: int = 0
    extra: dict = field(default_factory=dict)


class CausalBlock(nn.Module):
    def __init__(self, d, n_heads):
        super().__init__()
        self.input_layernorm = nn.LayerNorm(d)
        self.attn = nn.MultiheadAttention(d, n_heads, batch_first=True)
        self.post_attention_layernorm = nn.LayerNorm(d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.SiLU(), nn.Linear(4 * d, d))

    def forward(self, x, mask):
        h = self.input_layernorm(x)
        x = x + self.attn(h, h, h, attn_mask=mask, need_weights=False)[0]
        return x + self.mlp(self.post_attention_layernorm(x))


class TinyLlamaForTraining(nn.Module):
    def __init__(self, vocab=VOCAB, d=64, n_heads=4):
        super().__init__()
        self.token_embedding = nn.Embedding(vocab, d)
        self.position_embedding = nn.Embedding(SEQ_LEN, d)
        self.block = CausalBlock(d, n_heads)
        self.final_layer_norm = nn.LayerNorm(d)
        self.lm_head = nn.Linear(d, vocab, bias=False)

    def forward(self, input_ids, label_ids, label_mask):
        T = input_ids.size(1)
        mask = torch.triu(torch.full((T, T), float("-inf")), diagonal=1)
        x = self.token_embedding(input_ids) + self.position_embedding(torch.arange(T))
        logits = self.lm_head(self.final_layer_norm(self.block(x, mask)))
        loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), label_ids.reshape(-1), reduction="none")
        loss = (loss * label_mask.reshape(-1)).sum() / label_mask.sum()
        return {"loss": loss}


class MarkovTokens:
    """Stands in for the tokenized dataset: batch i is a deterministic function of i, so a resumed
    job sees the samples an uninterrupted one would."""

    def __init__(self, seed=0):
        g = np.random.default_rng(seed)
        logits = g.normal(size=(VOCAB, VOCAB)) * 2.0
        p = np.exp(logits - logits.max(1, keepdims=True))
        self.trans = p / p.sum(1, keepdims=True)
        self.cum = np.cumsum(self.trans, 1)

    def sample(self, n, seed):
        g = np.random.default_rng(seed)
        out = np.zeros((n, SEQ_LEN + 1), dtype=np.int64)
        out[:, 0] = g.integers(0, VOCAB, n)
        u = g.random((n, SEQ_LEN))
        for t in range(SEQ_LEN):
            out[:, t + 1] = np.minimum((self.cum[out[:, t]] < u[:, t:t + 1]).sum(1), VOCAB - 1)
        ids = torch.from_numpy(out)
        return {"input_ids": ids[:, :-1], "label_ids": ids[:, 1:], "label_mask": torch.ones(n, SEQ_LEN)}


class NamedOptimizer:
    def __init__(self, named_params_or_groups, optimizer_builder):
        self.names = [[n for n, _ in g["named_params"]] for g in named_params_or_groups]
        groups = [{**{k: v for k, v in g.items() if k != "named_params"},
                   "params": [p for _, p in g["named_params"]]} for g in named_params_or_groups]
        self.optimizer = optimizer_builder(groups)

    def get_base_optimizer(self):
        return self.optimizer

    @property
    def param_groups(self):
        return self.optimizer.param_groups

    def step(self):
        self.optimizer.step()

    def zero_grad(self):
        self.optimizer.zero_grad()

    def state_dict(self):
        return {**self.optimizer.state_dict(), "names": self.names}

    def load_state_dict(self, state_dict):
        state_dict = {k: v for k, v in state_dict.items() if k != "names"}
        self.optimizer.load_state_dict(state_dict)


def init_optimizer_and_grad_accumulator(model, optimizer_args):
    named_parameters = list(model.named_parameters())
    decay = [(n, p) for n, p in named_parameters if p.ndim >= 2 and "embedding" not in n]
    no_decay = [(n, p) for n, p in named_parameters if not (p.ndim >= 2 and "embedding" not in n)]
    named_param_groups = [
        {"named_params": decay, "weight_decay": optimizer_args.weight_decay},
        {"named_params": no_decay, "weight_decay": 0.0},
    ]

    def optimizer(param_groups):
        return torch.optim.AdamW(
            param_groups,
            lr=optimizer_args.learning_rate_scheduler.learning_rate,
            weight_decay=optimizer_args.weight_decay,
            eps=optimizer_args.adam_eps,
            betas=(optimizer_args.adam_beta1, optimizer_args.adam_beta2),
        )

    return NamedOptimizer(named_params_or_groups=named_param_groups, optimizer_builder=optimizer), None


def lr_scheduler_builder(optimizer, lr_scheduler_args: LRSchedulerArgs, total_training_steps: int):
    if lr_scheduler_args.lr_decay_steps is None:
        lr_decay_steps = total_training_steps
        if lr_scheduler_args.lr_warmup_steps is not None:
            lr_decay_steps -= lr_scheduler_args.lr_warmup_steps
        if lr_scheduler_args.lr_decay_starting_step is not None:
            lr_decay_steps -= lr_scheduler_args.lr_decay_starting_step
    else:
        lr_decay_steps = lr_scheduler_args.lr_decay_steps

    if lr_scheduler_args.lr_decay_starting_step is None:
        if lr_scheduler_args.lr_warmup_steps is not None:
            lr_decay_starting_step = lr_scheduler_args.lr_warmup_steps
        else:
            lr_decay_starting_step = 0
    else:
        lr_decay_starting_step = lr_scheduler_args.lr_decay_starting_step

    def lr_lambda(current_step: int, initial_lr: float):
        # No warmup or decay
        if lr_scheduler_args.lr_warmup_steps == 0 and lr_decay_steps == 0:
            return initial_lr

        # Warmup phase
        elif lr_scheduler_args.lr_warmup_style is not None and current_step <= lr_scheduler_args.lr_warmup_steps:
            if lr_scheduler_args.lr_warmup_style == "linear":
                lmbda = initial_lr * current_step / max(lr_scheduler_args.lr_warmup_steps, 1)
            elif lr_scheduler_args.lr_warmup_style == "constant":
                lmbda = lr_scheduler_args.learning_rate
            else:
                raise ValueError(f"Unknown warmup style {lr_scheduler_args.lr_warmup_style}")

        # Optional constant phase at learning_rate
        elif current_step < lr_decay_starting_step:
            lmbda = initial_lr

        # Decay phase
        elif lr_scheduler_args.lr_decay_style is not None and current_step < lr_decay_starting_step + lr_decay_steps:
            if lr_scheduler_args.lr_decay_style == "cosine":
                lmbda = (
                    lr_scheduler_args.min_decay_lr
                    + (initial_lr - lr_scheduler_args.min_decay_lr)
                    * (1 + math.cos(math.pi * (current_step - lr_decay_starting_step) / lr_decay_steps))
                    / 2
                )
            elif lr_scheduler_args.lr_decay_style == "linear":
                lmbda = (
                    lr_scheduler_args.min_decay_lr
                    + (initial_lr - lr_scheduler_args.min_decay_lr)
                    * (lr_decay_steps - (current_step - lr_decay_starting_step))
                    / lr_decay_steps
                )
            else:
                raise ValueError(f"Unknown decay style {lr_scheduler_args.lr_decay_style}")

        # Optional constant phase at min_decay_lr
        else:
            lmbda = lr_scheduler_args.min_decay_lr

        lmbda /= initial_lr  # Normalization for pytorch
        return lmbda

    def get_lr_lambda_for_param_group(lr: float):
        return partial(lr_lambda, initial_lr=lr)

    # NOTE: get learning rate scheduler for each param group
    lr_lambdas = []
    for param_group in optimizer.get_base_optimizer().param_groups:
        lr_lambdas.append(get_lr_lambda_for_param_group(lr=param_group["lr"]))

    assert len(lr_lambdas) == len(
        optimizer.get_base_optimizer().param_groups
    ), "Custom learning rate functions dont match the number of param groups"

    lr_scheduler = LambdaLR(optimizer.get_base_optimizer(), lr_lambda=lr_lambdas)
    return lr_scheduler


def save(model, optimizer, lr_scheduler, root_folder: Path, training_metadata: TrainingMetadata):
    (root_folder / "lr_scheduler").mkdir(parents=True, exist_ok=True)
    torch.save(model.state_dict(), root_folder / "model.pt")
    torch.save(optimizer.state_dict(), root_folder / "optimizer.pt")
    torch.save(lr_scheduler.state_dict(), root_folder / "lr_scheduler" / "lr_scheduler.pt")
    torch.save(vars(training_metadata), root_folder / "checkpoint_metadata.pt")


def load_weights(model, root_folder: Path):
    model.load_state_dict(torch.load(root_folder / "model.pt"))


def load_optimizer(optimizer, root_folder: Path, map_location="cpu"):
    optimizer.load_state_dict(torch.load(root_folder / "optimizer.pt", map_location=map_location))


def load_lr_scheduler(lr_scheduler, root_folder: Path):
    root_folder = root_folder / "lr_scheduler"

    state_dict = torch.load(root_folder / "lr_scheduler.pt")
    lr_scheduler.load_state_dict(state_dict)
    lr_scheduler._initial_step()  # NOTE: this is required to set the initial learning rate


def load_meta(root_folder: Path) -> TrainingMetadata:
    return TrainingMetadata(**torch.load(root_folder / "checkpoint_metadata.pt"))


class DistributedTrainer:
    def __init__(self, config: Config):
        self.config = config
        self.init_checkpoint_path = config.checkpoints.resume_checkpoint_path

        # Set random states
        torch.manual_seed(self.config.seed)

        # Init model
        self.model = TinyLlamaForTraining()
        self.unwrapped_model = self.model
        if self.init_checkpoint_path is not None:
            load_weights(self.unwrapped_model, root_folder=self.init_checkpoint_path)

        # Init optimizer
        self.optimizer, self.grad_accumulator = init_optimizer_and_grad_accumulator(
            model=self.model,
            optimizer_args=self.config.optimizer,
        )
        if self.init_checkpoint_path is not None:
            load_optimizer(
                optimizer=self.optimizer,
                root_folder=self.init_checkpoint_path,
                map_location="cpu",
            )

        # Init learning rate scheduler
        self.lr_scheduler = lr_scheduler_builder(
            optimizer=self.optimizer,
            lr_scheduler_args=self.config.optimizer.learning_rate_scheduler,
            total_training_steps=self.config.tokens.train_steps,
        )
        if self.init_checkpoint_path is not None:
            load_lr_scheduler(
                lr_scheduler=self.lr_scheduler,
                root_folder=self.init_checkpoint_path,
            )

        # Define iteration start state
        if self.init_checkpoint_path is not None:
            self.metadata: TrainingMetadata = load_meta(root_folder=self.init_checkpoint_path)
            print(f"Resuming from {self.init_checkpoint_path} (last_train_step={self.metadata.last_train_step})")
            assert (
                self.config.tokens.train_steps > self.metadata.last_train_step
            ), f"Loaded checkpoint has already trained {self.metadata.last_train_step} batches, you need to specify a higher `config.tokens.train_steps`"
        else:
            self.metadata = TrainingMetadata(consumed_train_samples=0, last_train_step=0)

        self.micro_batch_size = self.config.tokens.micro_batch_size
        self.global_batch_size = self.micro_batch_size
        self.iteration_step = self.metadata.last_train_step

    def train(self, dataset: MarkovTokens):
        self.model.train()
        self.initial_iter_step = self.metadata.last_train_step + 1
        self.last_iter_step = self.config.tokens.train_steps

        for self.iteration_step in range(self.initial_iter_step, self.last_iter_step + 1):
            batch = dataset.sample(self.micro_batch_size, seed=1000 + self.iteration_step)

            # Training step
            outputs, loss_avg = self.training_step(batch)

            self.metadata.consumed_train_samples += self.global_batch_size
            self.metadata.last_train_step = self.iteration_step

            if (self.iteration_step - 1) % self.config.iteration_step_info_interval == 0:
                self.train_step_logs(outputs=outputs, loss_avg=loss_avg)

            # Checkpoint
            if self.iteration_step % self.config.checkpoints.checkpoint_interval == 0:
                self.save_checkpoint()

    def training_step(self, batch):
        outputs = [self.model(**batch)]
        outputs[0]["loss"].backward()

        # Clip gradients
        if self.config.optimizer.clip_grad is not None:
            self.grad_norm_unclipped = torch.nn.utils.clip_grad_norm_(
                self.model.parameters(), max_norm=self.config.optimizer.clip_grad
            )

        loss_avg = torch.stack([output["loss"].detach() for output in outputs]).sum()

        # Apply gradient
        self.optimizer.step()
        self.optimizer.zero_grad()

        # Update the learning rate
        self.lr_scheduler.step()

        return outputs, loss_avg

    def train_step_logs(self, outputs, loss_avg):
        lr = self.lr_scheduler.get_last_lr()[0]
        print(
            f"iteration: {self.iteration_step} / {self.config.tokens.train_steps} | "
            f"consumed_tokens: {self.metadata.consumed_train_samples * self.config.tokens.sequence_length} | "
            f"lm_loss: {loss_avg.item():.4f} | lr: {lr:.3e} | grad_norm: {self.grad_norm_unclipped.item():.3f}"
        )

    def save_checkpoint(self) -> Path:
        checkpoint_path = self.config.checkpoints.checkpoints_path / f"{self.iteration_step}"
        checkpoint_path.mkdir(parents=True, exist_ok=True)
        print(f"Saving checkpoint at {checkpoint_path.name}")
        save(
            model=self.unwrapped_model,
            optimizer=self.optimizer,
            lr_scheduler=self.lr_scheduler,
            root_folder=checkpoint_path,
            training_metadata=self.metadata,
        )
        with open(self.config.checkpoints.checkpoints_path / "latest.txt", mode="w") as fo:
            fo.write(f"{self.iteration_step}")
        return checkpoint_path


@torch.no_grad()
def evaluate(model, dataset, n_batches=8):
    model.eval()
    losses = [model(**dataset.sample(64, seed=10_000 + i))["loss"].item() for i in range(n_batches)]
    model.train()
    return sum(losses) / len(losses)


def make_config(ckpt_dir: Path, train_steps: int, resume: Optional[Path]) -> Config:
    return Config(
        optimizer=OptimizerArgs(
            learning_rate_scheduler=LRSchedulerArgs(
                learning_rate=1e-2,
                lr_warmup_steps=30,
                lr_warmup_style="linear",
                lr_decay_style="cosine",
                lr_decay_steps=240,
                min_decay_lr=5e-4,
            ),
        ),
        tokens=TokensArgs(train_steps=train_steps),
        checkpoints=CheckpointsArgs(checkpoints_path=ckpt_dir, checkpoint_interval=50, resume_checkpoint_path=resume),
    )


def main():
    dataset = MarkovTokens(seed=0)
    with tempfile.TemporaryDirectory() as tmp:
        ckpt_dir = Path(tmp) / "checkpoints"
        ckpt_dir.mkdir()

        # job 1: the allocation ends after step 250
        trainer = DistributedTrainer(make_config(ckpt_dir, train_steps=250, resume=None))
        trainer.train(dataset)
        print(f"job 1 done at step {trainer.iteration_step}: eval loss {evaluate(trainer.model, dataset):.4f}")

        # job 2: resume from the latest checkpoint and train to step 300
        latest = ckpt_dir / (ckpt_dir / "latest.txt").read_text().strip()
        trainer = DistributedTrainer(make_config(ckpt_dir, train_steps=300, resume=latest))
        print(f"resumed lr: {trainer.lr_scheduler.get_last_lr()[0]:.3e}")
        trainer.train(dataset)
        print(f"final lr: {trainer.lr_scheduler.get_last_lr()[0]:.3e}")
        print(f"job 2 done at step {trainer.iteration_step}: eval loss {evaluate(trainer.model, dataset):.4f}")
        print(f"entropy floor of the data: {entropy_floor(dataset):.4f}")


def entropy_floor(dataset):
    t = dataset.trans
    return float(-(t * np.log(t)).sum(1).mean())


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    main()
