# Source: BottleCapAI/NoCap-Test, train_gpt2.py (training section and logging), before PR #2; fixed file at commit 09d9b383b256cb34b973453206906f76d4f7969d
# Report: https://github.com/BottleCapAI/NoCap-Test/pull/2
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class DataLoaderLite:
    def __init__(self, tokens, B, T):
        self.tokens, self.B, self.T = tokens, B, T
        self.reset()

    def reset(self):
        self.current_position = 0

    def next_batch(self):
        B, T = self.B, self.T
        buf = self.tokens[self.current_position:self.current_position + B * T + 1]
        x, y = buf[:-1].view(B, T), buf[1:].view(B, T)
        self.current_position += B * T
        if self.current_position + B * T + 1 > len(self.tokens):
            self.current_position = 0
        return x, y


class GPT(nn.Module):
    def __init__(self, vocab_size=64, n_embd=64, block_size=32):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.mlp = nn.Sequential(nn.LayerNorm(n_embd), nn.Linear(n_embd, 4 * n_embd), nn.GELU(), nn.Linear(4 * n_embd, n_embd))
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)

    def forward(self, idx, targets=None, return_logits=True):
        pos = torch.arange(idx.size(1))
        x = self.wte(idx) + self.wpe(pos)
        x = x + self.mlp(x)
        logits = self.lm_head(x)
        loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return (logits if return_logits else None), loss


def make_stream(n, vocab_size=64, seed=0):
    nxt = torch.randint(0, vocab_size, (vocab_size, 2), generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(seed)
    toks = [0]
    choice = torch.randint(0, 2, (n,), generator=g)
    for i in range(n - 1):
        toks.append(int(nxt[toks[-1], choice[i]]))
    return torch.tensor(toks)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--num_iterations", type=int, default=60)
    parser.add_argument("--grad_accumulation_steps", type=int, default=8)
    parser.add_argument("--learning_rate", type=float, default=3e-3)
    parser.add_argument("--val_loss_every", type=int, default=20)
    args = parser.parse_args()
    torch.manual_seed(0)
    B, T, val_steps = 8, 32, 4
    train_loader = DataLoaderLite(make_stream(40000, seed=1), B, T)
    val_loader = DataLoaderLite(make_stream(2000, seed=2), B, T)
    model = GPT()
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.learning_rate, betas=(0.9, 0.95))
    x, y = train_loader.next_batch()
    for step in range(args.num_iterations + 1):
        last_step = step == args.num_iterations
        if args.val_loss_every > 0 and (step % args.val_loss_every == 0 or last_step):
            model.eval()
            val_loader.reset()
            with torch.no_grad():
                val_loss = 0.0
                for _ in range(val_steps):
                    x_val, y_val = val_loader.next_batch()
                    _, loss = model(x_val, y_val, return_logits=False)
                    val_loss += loss
                val_loss /= val_steps
            print(f"step:{step}/{args.num_iterations} | val loss {val_loss:.6f}")
        if last_step:
            break

        # --------------- TRAINING SECTION BEGIN -----------------
        model.train()
        train_loss = torch.zeros(1)
        for micro_step in range(args.grad_accumulation_steps):
            # forward pass
            _, loss = model(x, y, return_logits=False)
            loss = (
                loss / args.grad_accumulation_steps
            )  # scale loss for gradient accumulation
            train_loss += loss.detach()
            # advance the dataset for the next batch
            x, y = train_loader.next_batch()
            # backward pass
            loss.backward()
        train_loss /= args.grad_accumulation_steps
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        # --------------- TRAINING SECTION END -------------------
        lossf = train_loss.item()  # keep track of the mean loss
        if step % 10 == 0:
            print(f"step:{step}/{args.num_iterations} | loss {lossf:.6f}")


if __name__ == "__main__":
    main()
