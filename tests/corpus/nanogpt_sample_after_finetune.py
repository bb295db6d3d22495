"""nanoGPT resume-and-sample: a model and optimizer restored from a checkpoint dict (the
'_orig_mod.' prefix stripped, optimizer.load_state_dict), a few more training iterations with the
masked-softmax attention (no flash), then sample.py's generation: model.eval(), torch.no_grad(),
top-k sampling with temperature.

Source: karpathy/nanoGPT, train.py (init_from='resume') and sample.py, commit 3adf61e154c3fe3fca428ad6bc3818b27a3b8291.
Reduced: the model of _nanogpt.py with flash=False, an in-memory checkpoint, 3 iterations,
generation of 8 tokens from 2 prompts.
"""

import io

import torch

from corpus._nanogpt import GPT, GPTConfig

block_size = 16


def build():
    torch.manual_seed(1337)
    model_args = dict(n_layer=2, n_head=2, n_embd=16, block_size=block_size, bias=True, vocab_size=40,
                      dropout=0.0, flash=False)
    donor = GPT(GPTConfig(**model_args))
    donor_opt = donor.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    buf = io.BytesIO()
    torch.save({"model": {"_orig_mod." + k: v for k, v in donor.state_dict().items()},
                "optimizer": donor_opt.state_dict(), "model_args": model_args, "iter_num": 0}, buf)
    buf.seek(0)
    checkpoint = torch.load(buf, map_location="cpu", weights_only=False)
    model = GPT(GPTConfig(**checkpoint["model_args"]))
    state_dict = checkpoint["model"]
    unwanted_prefix = "_orig_mod."
    for k, v in list(state_dict.items()):
        if k.startswith(unwanted_prefix):
            state_dict[k[len(unwanted_prefix):]] = state_dict.pop(k)
    model.load_state_dict(state_dict)
    optimizer = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    optimizer.load_state_dict(checkpoint["optimizer"])
    checkpoint = None
    data = torch.randint(0, 40, (400,))

    def train():
        for it in range(3):
            ix = torch.randint(len(data) - block_size, (4,))
            X = torch.stack([data[i:i + block_size] for i in ix])
            Y = torch.stack([data[i + 1:i + 1 + block_size] for i in ix])
            logits, loss = model(X, Y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
        model.eval()
        x = torch.randint(0, 40, (2, 3))
        with torch.no_grad():
            y = model.generate(x, 8, temperature=0.8, top_k=10)
        return y

    return [model], [optimizer], train


if __name__ == "__main__":
    build()[2]()
