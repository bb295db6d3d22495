# Report: https://github.com/hp-l33/AiM/issues/10
# AiM (autoregressive image generation with Mamba) trained through a Hugging Face style
# Trainer with bf16=True. The reporter's compute_loss forcibly casts the whole model (and its
# weights) to bfloat16. The Mamba backbone is replaced by a small MLP next-token model over a
# synthetic VQ-token stream; the loop mirrors Trainer (AdamW, lr 1e-4).
import torch
import torch.nn as nn
import torch.nn.functional as F


class AiM(nn.Module):
    def __init__(self, vocab_size=64, dim=128, context=4):
        super().__init__()
        self.context = context
        self.tok_emb = nn.Embedding(vocab_size, dim)
        self.projector = nn.Linear(context * dim, dim)
        self.mixer = nn.Sequential(nn.GELU(), nn.Linear(dim, dim), nn.GELU())
        self.head = nn.Linear(dim, vocab_size)

    def get_projector_weight_dtype(self):
        return self.projector.weight.dtype

    def forward(self, idx):
        x = self.tok_emb(idx).flatten(1)
        x = self.projector(x)
        return self.head(self.mixer(x))


class Trainer:
    def __init__(self, model, bf16, lr=1e-4):
        self.model = model
        self.bf16 = bf16
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)

    def compute_loss(self, model, inputs):
        x, y = inputs
        dtype = torch.bfloat16 if self.bf16 else torch.float32
        if model.get_projector_weight_dtype() != dtype:
            model = model.to(dtype=dtype)
        with torch.autocast('cpu', dtype=torch.bfloat16, enabled=self.bf16):
            logits = model(x)
        return F.cross_entropy(logits.float(), y)

    def training_step(self, inputs):
        loss = self.compute_loss(self.model, inputs)
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        return loss.item()


def make_tokens(n, gen, vocab_size=64, context=4):
    # token t+1 is a fixed function of the previous 4 tokens (a deterministic "codebook grammar")
    seq = torch.randint(0, vocab_size, (n + context,), generator=gen)
    for t in range(context, n + context):
        seq[t] = (seq[t - 1] + 1) % vocab_size
        if t % 3 == 0:
            seq[t] = torch.randint(0, vocab_size, (1,), generator=gen).item()
    idx = torch.arange(n)[:, None] + torch.arange(context)[None, :]
    return seq[idx], seq[torch.arange(n) + context]


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    x, y = make_tokens(8192, gen)
    model = AiM()
    trainer = Trainer(model, bf16=True)
    bs = 128
    for epoch in range(6):
        losses = []
        for i in range(0, len(x), bs):
            losses.append(trainer.training_step((x[i:i + bs], y[i:i + bs])))
        print("epoch %d loss %.4f (weights %s)" % (epoch, sum(losses) / len(losses), model.projector.weight.dtype))


if __name__ == "__main__":
    main()
