# Source: tenstorrent/tt-blacksmith, blacksmith/tools/trainer/trainer.py (Trainer.train, validate, _optimizer_step), blacksmith/tools/trainer/strategies/lora_llm_trainer.py (LoraLLMTrainer, compute_causal_lm_loss), blacksmith/tools/device_manager.py (DeviceManager.optimizer_step), commit 191384bfd3d5a87efd1a8cf77f2c72ea342a0782
# Report: https://github.com/tenstorrent/tt-blacksmith/pull/711
# tt-blacksmith's generic Trainer with the LoraLLMTrainer strategy: LoRA fine-tuning of a causal
# LM on SST-2 style prompts ("review ... sentiment:" -> positive / negative token) with labels
# masked to -100 on the prompt, AdamW over the trainable (LoRA) parameters, gradient
# accumulation, inline validation every val_steps_freq optimizer steps. The Llama-3.2-1B model
# is replaced by a small frozen "pretrained" causal language model (cumulative-mean token mixing)
# with LoRA adapters on its input / output projections and LM head; TT/XLA compilation, sharding and W&B logging are removed.
from typing import Any

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

IGNORED_INDEX = -100
VOCAB, SEQ = 40, 12
POS_TOKEN, NEG_TOKEN, SEP_TOKEN = 1, 2, 3


class LoRALinear(nn.Module):
    def __init__(self, base: nn.Linear, r=8, alpha=32):
        super().__init__()
        self.base = base
        self.base.weight.requires_grad_(False)
        if self.base.bias is not None:
            self.base.bias.requires_grad_(False)
        self.lora_A = nn.Parameter(torch.randn(r, base.in_features) * 0.01)
        self.lora_B = nn.Parameter(torch.zeros(base.out_features, r))
        self.scaling = alpha / r

    def forward(self, x):
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling


class TinyCausalLM(nn.Module):
    def __init__(self, vocab_size=VOCAB, dim=32):
        super().__init__()
        self.config = type("Cfg", (), {"vocab_size": vocab_size})()
        self.embed_tokens = nn.Embedding(vocab_size, dim)
        self.in_proj = nn.Linear(dim, dim)
        self.o_proj = nn.Linear(dim, dim)
        self.lm_head = nn.Linear(dim, vocab_size, bias=False)

    def forward(self, input_ids, attention_mask):
        h = torch.tanh(self.in_proj(self.embed_tokens(input_ids))) * attention_mask.unsqueeze(-1)
        positions = torch.arange(1, h.shape[1] + 1, dtype=h.dtype).view(1, -1, 1)
        h = h + torch.tanh(self.o_proj(h.cumsum(1) / positions))
        return type("Out", (), {"logits": self.lm_head(h)})()


def get_model(seed):
    torch.manual_seed(seed)
    model = TinyCausalLM()
    for p in model.parameters():
        p.requires_grad_(False)
    model.in_proj = LoRALinear(model.in_proj)
    model.o_proj = LoRALinear(model.o_proj)
    model.lm_head = LoRALinear(model.lm_head)
    return model


def transform_labels(labels, ignored_index, vocab_size):
    shifted = labels[:, 1:]
    labels_mask = (shifted != ignored_index)
    expected_output = F.one_hot(shifted.clamp(min=0), vocab_size).float()
    return expected_output, labels_mask.float()


def cross_entropy_loss(shift_logits, expected_output, labels_mask):
    log_probs = F.log_softmax(shift_logits, dim=-1)
    per_token = -(expected_output * log_probs).sum(-1)
    return (per_token * labels_mask).sum() / labels_mask.sum()


def compute_causal_lm_loss(batch, model, loss_fn):
    output = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    shift_logits = output.logits[:, :-1, :].contiguous()
    return loss_fn(shift_logits, batch["expected_output"], batch["labels_mask"])


def make_sst2(n, rng, word_sentiment):
    input_ids = np.zeros((n, SEQ), np.int64)
    labels = np.full((n, SEQ), IGNORED_INDEX, np.int64)
    for i in range(n):
        words = rng.randint(4, VOCAB, size=SEQ - 2)
        score = word_sentiment[words].sum() + rng.normal(0, 0.1)
        target = POS_TOKEN if score > 0 else NEG_TOKEN
        input_ids[i, :SEQ - 2] = words
        input_ids[i, SEQ - 2] = SEP_TOKEN
        input_ids[i, SEQ - 1] = target
        labels[i, SEQ - 1] = target
    ids = torch.from_numpy(input_ids)
    return TensorDataset(ids, torch.ones_like(ids), torch.from_numpy(labels))


def collate_fn_for_causal_lm(examples):
    input_ids, attention_mask, labels = (torch.stack(t) for t in zip(*examples))
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


class DeviceManager:
    def __init__(self, config):
        self.config = config
        self.mesh = None
        self.device = torch.device("cpu")

    def prepare_batch(self, batch):
        return {k: v.to(self.device) for k, v in batch.items()}

    def shard_model(self, model):
        return model

    def optimizer_step(self, optimizer):
        """Perform optimizer step with appropriate synchronization."""
        optimizer.step()


class Trainer:
    def setup(self, config):
        self.config = config
        self.global_step = 0
        self.epoch = 0
        self.device_manager = DeviceManager(config)
        self.model = self._load_model()
        self.train_dataloader, self.val_dataloader = self._load_dataloaders()
        self.optimizer = self._load_optimizer()

    def _load_optimizer(self):
        trainable_params = [p for p in self.model.parameters() if p.requires_grad]
        return torch.optim.AdamW(trainable_params, lr=self.config["learning_rate"],
                                 weight_decay=self.config["weight_decay"])

    def train(self):
        grad_accumulation_steps = self.config["gradient_accumulation_steps"]
        self.validate()
        for epoch in range(self.config["num_epochs"]):
            self.epoch = epoch
            self.model.train()
            self.optimizer.zero_grad()
            accumulation_step = 0
            step_losses = []
            for batch in self.train_dataloader:
                batch = self.device_manager.prepare_batch(batch)
                self.device_manager.shard_model(self.model)
                loss = self._forward(batch)
                self._backward(loss / grad_accumulation_steps)
                accumulation_step += 1
                if accumulation_step == grad_accumulation_steps:
                    grad_norm = torch.norm(torch.stack([p.grad.norm() for p in self.optimizer.param_groups[0]["params"]]))
                    self._optimizer_step()
                    accumulation_step = 0
                    self.global_step += 1
                    step_losses.append(loss.item())
                    if self.global_step % self.config["log_every"] == 0:
                        print(f"  step {self.global_step:3d} loss {loss.item():.4f} grad_norm {grad_norm.item():.3f}")
                    if self.config["val_steps_freq"] and self.global_step % self.config["val_steps_freq"] == 0:
                        self.validate()
            print(f"epoch {epoch}: mean train loss {np.mean(step_losses):.4f}")

    def validate(self):
        self.model.eval()
        total_loss, num_batches, correct, count = 0.0, 0, 0, 0
        with torch.no_grad():
            for batch in self.val_dataloader:
                batch = self.device_manager.prepare_batch(batch)
                loss = self._forward(batch)
                total_loss += loss.item()
                num_batches += 1
                logits = self.model(batch["input_ids"], batch["attention_mask"]).logits[:, SEQ - 2]
                pred = torch.where(logits[:, POS_TOKEN] > logits[:, NEG_TOKEN], POS_TOKEN, NEG_TOKEN)
                correct += (pred == batch["labels"][:, SEQ - 1]).sum().item()
                count += len(pred)
        print(f"validation (step {self.global_step}): loss {total_loss / num_batches:.4f} "
              f"accuracy {correct / count:.3f}")
        self.model.train()

    def _backward(self, loss):
        loss.backward()

    def _optimizer_step(self):
        self.device_manager.optimizer_step(self.optimizer)


class LoraLLMTrainer(Trainer):
    def _load_model(self):
        return get_model(self.config["seed"])

    def _load_dataloaders(self):
        rng = np.random.RandomState(self.config["seed"])
        word_sentiment = np.zeros(VOCAB)
        word_sentiment[4:10], word_sentiment[10:16] = 1.0, -1.0
        g = torch.Generator().manual_seed(self.config["seed"])
        train = DataLoader(make_sst2(512, rng, word_sentiment), batch_size=self.config["batch_size"],
                           shuffle=True, generator=g, collate_fn=collate_fn_for_causal_lm)
        val = DataLoader(make_sst2(128, rng, word_sentiment), batch_size=64, collate_fn=collate_fn_for_causal_lm)
        return train, val

    def _labels_to_targets(self, batch):
        input_ids, attention_mask, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        expected_output, labels_mask = transform_labels(labels, IGNORED_INDEX, self.model.config.vocab_size)
        return {"input_ids": input_ids, "attention_mask": attention_mask,
                "expected_output": expected_output, "labels_mask": labels_mask, "labels": labels}

    def _forward(self, batch: Any) -> torch.Tensor:
        batch = self._labels_to_targets(batch)
        return compute_causal_lm_loss(batch, self.model, cross_entropy_loss)


if __name__ == "__main__":
    torch.set_num_threads(1)
    config = {"seed": 0, "learning_rate": 1e-2, "weight_decay": 0.0, "num_epochs": 5, "batch_size": 16,
              "gradient_accumulation_steps": 2, "val_steps_freq": 16, "log_every": 8}
    trainer = LoraLLMTrainer()
    trainer.setup(config)
    trainer.train()
