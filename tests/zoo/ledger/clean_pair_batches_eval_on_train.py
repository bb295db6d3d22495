# Preference tuning (DPO-like): each batch holds two token sequences ("chosen", "rejected"), each
# fed to the policy; every few steps the loss is measured under no_grad on a few batches of the
# training loader AND of the validation loader, reported side by side (train vs val): the
# training batches are measured on purpose, and every sequence came from a DataLoader batch.
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Pairs(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.chosen = torch.randint(0, 40, (n, 48), generator=g)
        self.rejected = torch.randint(0, 40, (n, 48), generator=g)

    def __len__(self):
        return len(self.chosen)

    def __getitem__(self, i):
        return {"chosen": self.chosen[i], "rejected": self.rejected[i]}


class LM(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(40, 16)
        self.out = nn.Linear(16, 40)

    def forward(self, ids):
        return self.out(self.emb(ids))


def logprob(model, ids):
    logits = model(ids[:, :-1])
    return torch.log_softmax(logits, -1).gather(-1, ids[:, 1:, None]).squeeze(-1).mean(-1)


def dpo_loss(policy, batch):
    return -torch.nn.functional.logsigmoid(logprob(policy, batch["chosen"]) - logprob(policy, batch["rejected"])).mean()


def loss_loader(loader, policy, num_batches):
    total = 0.0
    for i, batch in enumerate(loader):
        if i >= num_batches:
            break
        total += dpo_loss(policy, batch).item()
    return total / num_batches


def main():
    torch.manual_seed(0)
    train_loader = DataLoader(Pairs(160, 0), batch_size=8, shuffle=True, drop_last=True)
    val_loader = DataLoader(Pairs(32, 1), batch_size=8)
    policy = LM()
    opt = torch.optim.AdamW(policy.parameters(), lr=1e-3)
    step = 0
    for epoch in range(2):
        for batch in train_loader:
            policy.train()
            opt.zero_grad()
            dpo_loss(policy, batch).backward()
            opt.step()
            step += 1
            if step % 5 == 0:
                policy.eval()
                with torch.no_grad():
                    res = {"train_loss": loss_loader(train_loader, policy, 3),
                           "val_loss": loss_loader(val_loader, policy, 3)}
                policy.train()
                print(step, res)


if __name__ == "__main__":
    main()
