# Source: meta-pytorch/torchforge, apps/sft/main.py (ForgeSFTRecipe.forward_backward, train_step, train, validate), apps/sft/llama3_8b.yaml, commit ce1ed98434654754b1171f67a137eeadf53f7eb9
# Report: https://github.com/meta-pytorch/torchforge/pull/71
# Supervised fine-tuning recipe: packed Alpaca-style sequences (prompt tokens masked with
# CROSS_ENTROPY_IGNORE_IDX), a causal decoder LM, AdamW with a warmup + linear-decay LR
# scheduler, one optimizer step per batch, validation every few steps. The Llama-3.1-8B
# model, HF tokenizer / dataset, torchtitan containers and parallelism are reduced to a
# 2-layer causal transformer on synthetic token sequences (each response token follows from the
# one before it by a fixed rule).
import math

import torch
from torch import nn
import torch.nn.functional as F

torch.manual_seed(0)
torch.set_num_threads(1)

CROSS_ENTROPY_IGNORE_IDX = -100
VOCAB = 64
SEQ_LEN = 48
BATCH_SIZE = 8
LR = 1e-3
EPS = 1e-8
WARMUP_STEPS = 20
STEPS = 160
VAL_FREQ = 40
VAL_STEPS = 4


def make_sample(g):
    n = int(torch.randint(4, 9, (1,), generator=g))
    prompt = torch.randint(2, VOCAB, (n,), generator=g)
    response = torch.empty(n, dtype=torch.long)
    prev = prompt[-1]
    for j in range(n):
        prev = (prev * 3 + 1) % (VOCAB - 2) + 2
        response[j] = prev
    tokens = torch.cat([torch.tensor([1]), prompt, torch.tensor([0]), response])
    labels = torch.cat([torch.full((n + 2,), CROSS_ENTROPY_IGNORE_IDX), response])
    return tokens, labels


def packed_batches(seed, n_batches):
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        toks, labs = [], []
        for _ in range(BATCH_SIZE):
            t, lab = [], []
            while sum(len(x) for x in t) < SEQ_LEN + 1:
                a, b = make_sample(g)
                t.append(a)
                lab.append(b)
            t = torch.cat(t)[: SEQ_LEN + 1]
            lab = torch.cat(lab)[: SEQ_LEN + 1]
            toks.append(t[:-1])
            labs.append(lab[1:])
        out.append({"tokens": torch.stack(toks), "labels": torch.stack(labs)})
    return out


class Decoder(nn.Module):
    def __init__(self, dim=64, heads=4, layers=2):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, dim)
        self.pos = nn.Parameter(torch.randn(SEQ_LEN, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, 4 * dim, dropout=0.0, batch_first=True, norm_first=True)
        self.layers = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(dim)
        self.output = nn.Linear(dim, VOCAB, bias=False)

    def forward(self, tokens):
        n = tokens.shape[1]
        mask = torch.triu(torch.full((n, n), float("-inf")), diagonal=1)
        h = self.tok_embeddings(tokens) + self.pos[:n]
        h = self.layers(h, mask=mask, is_causal=True)
        return self.output(self.norm(h))


def cross_entropy_loss(pred, labels):
    return F.cross_entropy(pred.flatten(0, 1).float(), labels.flatten(0, 1), ignore_index=CROSS_ENTROPY_IGNORE_IDX)


class OptimizersContainer:
    def __init__(self, model_parts):
        self.optimizers = [torch.optim.AdamW(m.parameters(), lr=LR, eps=EPS) for m in model_parts]

    def step(self):
        for o in self.optimizers:
            o.step()

    def zero_grad(self):
        for o in self.optimizers:
            o.zero_grad()


class LRSchedulersContainer:
    def __init__(self, optimizers, training_steps):
        def linear_warmup_linear_decay(step):
            step += 1
            if step < WARMUP_STEPS:
                return step / (WARMUP_STEPS + 1)
            return max(0.0, 1 - (step - WARMUP_STEPS) / (training_steps - WARMUP_STEPS + 1))

        self.schedulers = [torch.optim.lr_scheduler.LambdaLR(o, linear_warmup_linear_decay) for o in optimizers.optimizers]

    def step(self):
        for s in self.schedulers:
            s.step()


class ForgeSFTRecipe:
    def setup(self):
        self.model_parts = [Decoder()]
        self.loss_fn = cross_entropy_loss
        self.optimizers = OptimizersContainer(self.model_parts)
        self.lr_schedulers = LRSchedulersContainer(self.optimizers, STEPS)
        self.num_training_steps = STEPS
        self.current_step = 0
        self.train_dataloader = packed_batches(1, STEPS)
        self.val_dataloader = packed_batches(2, VAL_STEPS)
        self.losses = []

    def forward_backward(self, input_dict, labels, do_backward=True):
        model_parts = self.model_parts
        inputs = input_dict["tokens"]
        assert len(model_parts) == 1
        pred = model_parts[0](inputs)
        loss = self.loss_fn(pred, labels)
        del pred
        if do_backward:
            loss.backward()
        return loss

    def train_step(self, batch):
        labels = batch.pop("labels")
        loss = self.forward_backward(batch, labels)
        self.losses.append(loss.item())
        self.grad_norm = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in self.model_parts[0].parameters()))

        self.optimizers.step()
        self.lr_schedulers.step()

    def train(self):
        dataloader = iter(self.train_dataloader)
        self.optimizers.zero_grad()

        while self.current_step < self.num_training_steps:
            batch = dict(next(dataloader))
            self.train_step(batch)
            self.current_step += 1

            if self.current_step % VAL_FREQ == 0:
                print(f"step {self.current_step}: train loss {sum(self.losses[-VAL_FREQ:]) / VAL_FREQ:.4f} grad norm {self.grad_norm:.2f}")
                self.validate(VAL_STEPS)

    def validate(self, max_steps):
        for m in self.model_parts:
            m.eval()
        total_val_loss = torch.tensor(0.0)
        total_val_tokens = torch.tensor(0.0)
        with torch.no_grad():
            for batch_idx, batch in enumerate(self.val_dataloader):
                if batch_idx >= max_steps:
                    break
                batch = dict(batch)
                current_num_tokens = (batch["labels"] != CROSS_ENTROPY_IGNORE_IDX).sum()
                labels = batch.pop("labels")
                loss = self.forward_backward(batch, labels, do_backward=False)
                total_val_loss += loss * current_num_tokens
                total_val_tokens += current_num_tokens
        avg_val_loss = (total_val_loss / total_val_tokens).item()
        for m in self.model_parts:
            m.train()
        print(f"Validation loss: {avg_val_loss:.4f}")


def recipe_main():
    recipe = ForgeSFTRecipe()
    recipe.setup()
    recipe.train()


if __name__ == "__main__":
    recipe_main()
