"""minGPT's adder project through minGPT's Trainer: an addition dataset whose targets mask the
prompt positions with -1 (cross_entropy ignore_index=-1), a DataLoader over a RandomSampler
with replacement, model.zero_grad(set_to_none=True), clip_grad_norm_, the loss kept on the
trainer (self.loss) until the next batch reassigns it, an on_batch_end callback that evaluates
in eval() + no_grad with greedy generate() and compares the decoded sums (a metric, in eval
mode), then returns to train().

Source: karpathy/minGPT, projects/adder/adder.py and mingpt/trainer.py, commit 37baab71b9abea1b76ab957409a1cc2fbfba8a26.
Reduced: 2-digit sums, the GPT of _nanogpt.py with the masked-softmax attention (minGPT's
attention), minGPT's configure_optimizers (decay for Linear weights only), 4 iterations,
evaluation at iteration 2 on 16 examples.

Mutation: the attention softmax taken over `dim=-2` (the query axis) instead of `dim=-1` in the model (bugs/_nanogpt_softmax_dim.py): each position's weights now depend on later positions.
Expected: error silent.attention_sees_future in module transformer.h.0.attn, at the softmax line of bugs/_nanogpt_softmax_dim.py.
"""

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

from bugs._nanogpt_softmax_dim import GPT, GPTConfig, LayerNorm

BUG_FILE = "_nanogpt_softmax_dim.py"

ndigit = 2


class AdditionDataset(Dataset):
    def __init__(self, split):
        rng = torch.Generator().manual_seed(1337)
        perm = torch.randperm((10 ** ndigit) ** 2, generator=rng)
        self.ixes = perm[:32] if split == "test" else perm[32:96]

    def __len__(self):
        return self.ixes.nelement()

    def __getitem__(self, idx):
        idx = self.ixes[idx].item()
        nd = 10 ** ndigit
        a, b = idx // nd, idx % nd
        c = a + b
        astr, bstr = f"%0{ndigit}d" % a, f"%0{ndigit}d" % b
        cstr = (f"%0{ndigit + 1}d" % c)[::-1]
        dix = [int(s) for s in astr + bstr + cstr]
        x = torch.tensor(dix[:-1], dtype=torch.long)
        y = torch.tensor(dix[1:], dtype=torch.long)
        y[:ndigit * 2 - 1] = -1
        return x, y


def configure_optimizers(model, learning_rate=5e-4, weight_decay=0.1, betas=(0.9, 0.95)):
    decay, no_decay = set(), set()
    whitelist_weight_modules = (torch.nn.Linear,)
    blacklist_weight_modules = (LayerNorm, torch.nn.Embedding)
    for mn, m in model.named_modules():
        for pn, p in m.named_parameters():
            fpn = "%s.%s" % (mn, pn) if mn else pn
            if pn.endswith("bias"):
                no_decay.add(fpn)
            elif pn.endswith("weight") and isinstance(m, whitelist_weight_modules):
                decay.add(fpn)
            elif pn.endswith("weight") and isinstance(m, blacklist_weight_modules):
                no_decay.add(fpn)
    param_dict = {pn: p for pn, p in model.named_parameters()}
    no_decay -= decay & no_decay
    optim_groups = [
        {"params": [param_dict[pn] for pn in sorted(decay) if pn in param_dict], "weight_decay": weight_decay},
        {"params": [param_dict[pn] for pn in sorted(no_decay) if pn in param_dict and pn not in decay],
         "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(optim_groups, lr=learning_rate, betas=betas)


class Trainer:
    def __init__(self, model, train_dataset, max_iters=4):
        self.model, self.train_dataset, self.max_iters = model, train_dataset, max_iters
        self.callbacks = []

    def run(self):
        model = self.model
        self.optimizer = configure_optimizers(model)
        train_loader = DataLoader(
            self.train_dataset,
            sampler=torch.utils.data.RandomSampler(self.train_dataset, replacement=True, num_samples=int(1e10)),
            shuffle=False, batch_size=8, num_workers=0)
        model.train()
        self.iter_num = 0
        data_iter = iter(train_loader)
        while True:
            try:
                batch = next(data_iter)
            except StopIteration:
                data_iter = iter(train_loader)
                batch = next(data_iter)
            x, y = batch
            logits, self.loss = model(x, y)
            model.zero_grad(set_to_none=True)
            self.loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            self.optimizer.step()
            for cb in self.callbacks:
                cb(self)
            self.iter_num += 1
            if self.iter_num >= self.max_iters:
                break


def build():
    torch.manual_seed(3407)
    train_dataset, test_dataset = AdditionDataset("train"), AdditionDataset("test")
    model = GPT(GPTConfig(block_size=3 * ndigit + 1 - 1, vocab_size=10, n_layer=2, n_head=2, n_embd=16,
                          dropout=0.1, flash=False))
    trainer = Trainer(model, train_dataset)

    def eval_split(split, max_batches=None):
        dataset = {"train": train_dataset, "test": test_dataset}[split]
        results = []
        factors = torch.tensor([[10 ** i for i in range(ndigit + 1)][::-1]])
        loader = DataLoader(dataset, batch_size=16, num_workers=0, drop_last=False)
        for b, (x, y) in enumerate(loader):
            d1d2 = x[:, :ndigit * 2]
            d1d2d3 = model.generate(d1d2, ndigit + 1, top_k=1)
            d3 = d1d2d3[:, -(ndigit + 1):].flip(1)
            d1i = (d1d2[:, :ndigit] * factors[:, 1:]).sum(1)
            d2i = (d1d2[:, ndigit:ndigit * 2] * factors[:, 1:]).sum(1)
            d3i_pred = (d3 * factors).sum(1)
            correct = (d3i_pred == d1i + d2i).cpu()
            results += [int(correct[i]) for i in range(x.size(0))]
            if max_batches is not None and b + 1 >= max_batches:
                break
        return torch.tensor(results, dtype=torch.float).sum()

    def batch_end_callback(trainer):
        if trainer.iter_num % 2 == 0:
            model.eval()
            with torch.no_grad():
                score = eval_split("train", max_batches=1) + eval_split("test", max_batches=1)
            model.train()
            return score

    trainer.callbacks.append(batch_end_callback)
    return [model], [], trainer.run


if __name__ == "__main__":
    build()[2]()
