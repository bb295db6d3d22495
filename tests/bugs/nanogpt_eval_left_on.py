"""nanoGPT pretraining loop: random windows from a token stream (y = x shifted by one), a cosine
lr with linear warmup written into every param group, estimate_loss() under @torch.no_grad with
model.eval() and back to train(), a checkpoint dict when the val loss improves, gradient
accumulation with loss / gradient_accumulation_steps and the next batch fetched while the
backward is pending, GradScaler(enabled=False) + unscale_ + clip_grad_norm_, bf16 autocast ctx,
zero_grad(set_to_none=True), the logged loss read once every log_interval.

Source: karpathy/nanoGPT, train.py, commit 3adf61e154c3fe3fca428ad6bc3818b27a3b8291.
Reduced: the model of _nanogpt.py (2 layers, n_embd 16, block 16, dropout 0.1), 4 iterations (this copy: max_iters 2),
2 micro-steps, eval_iters 2, a random uint16 token array for train.bin / val.bin.

Mutation: `model.train()` dropped from the end of `estimate_loss()`: every step after the first evaluation trains with dropout off.
Expected: warning silent.eval_mode_while_training on the root model (its Dropout modules in the evidence), at the training forward `logits, loss = model(X, Y)`.
"""

import io
import math
import numpy as np
import torch

from corpus._nanogpt import GPT, GPTConfig

block_size, batch_size, gradient_accumulation_steps = 16, 4, 2
learning_rate, min_lr, warmup_iters, lr_decay_iters, max_iters = 6e-4, 6e-5, 2, 4, 2
eval_interval, eval_iters, log_interval, grad_clip = 2, 2, 1, 1.0


def build():
    torch.manual_seed(1337)
    rng = np.random.default_rng(0)
    train_bin = rng.integers(0, 40, 400).astype(np.uint16)
    val_bin = rng.integers(0, 40, 200).astype(np.uint16)
    device_type = "cpu"
    # the script's GPU branch (autocast to bf16), run on the CPU; on CPU the script uses nullcontext()
    ctx = torch.amp.autocast(device_type=device_type, dtype=torch.bfloat16)

    def get_batch(split):
        data = train_bin if split == "train" else val_bin
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy((data[i:i + block_size]).astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy((data[i + 1:i + 1 + block_size]).astype(np.int64)) for i in ix])
        return x, y

    model_args = dict(n_layer=2, n_head=2, n_embd=16, block_size=block_size, bias=False, vocab_size=40, dropout=0.1)
    model = GPT(GPTConfig(**model_args))
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    optimizer = model.configure_optimizers(0.1, learning_rate, (0.9, 0.95), device_type)

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ["train", "val"]:
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split)
                with ctx:
                    logits, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean()
        return out

    def get_lr(it):
        if it < warmup_iters:
            return learning_rate * (it + 1) / (warmup_iters + 1)
        if it > lr_decay_iters:
            return min_lr
        decay_ratio = (it - warmup_iters) / (lr_decay_iters - warmup_iters)
        coeff = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))
        return min_lr + coeff * (learning_rate - min_lr)

    def train():
        iter_num, best_val_loss = 0, 1e9
        X, Y = get_batch("train")
        while True:
            lr = get_lr(iter_num)
            for param_group in optimizer.param_groups:
                param_group["lr"] = lr
            if iter_num % eval_interval == 0:
                losses = estimate_loss()
                if losses["val"] < best_val_loss:
                    best_val_loss = losses["val"]
                    if iter_num > 0:
                        checkpoint = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                                      "model_args": model_args, "iter_num": iter_num, "best_val_loss": best_val_loss}
                        torch.save(checkpoint, io.BytesIO())
            for micro_step in range(gradient_accumulation_steps):
                with ctx:
                    logits, loss = model(X, Y)  # <- bug
                    loss = loss / gradient_accumulation_steps
                X, Y = get_batch("train")
                scaler.scale(loss).backward()
            if grad_clip != 0.0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)
            if iter_num % log_interval == 0:
                lossf = loss.item() * gradient_accumulation_steps
            iter_num += 1
            if iter_num > max_iters:
                break
        return lossf

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
