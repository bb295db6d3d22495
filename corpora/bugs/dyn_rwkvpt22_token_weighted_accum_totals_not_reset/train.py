# Source: yuunnn-w/RWKV_Pytorch, train/train-test.py, commit db554f1232b1c0b73b21d5609ba1278c00089869
# Report: https://github.com/yuunnn-w/RWKV_Pytorch/pull/22
# Fine-tuning an RWKV language model on a JSONL of texts, batch size 1, each text cut into
# slices of slice_len tokens with the recurrent state carried (detached) between slices;
# gradients are accumulated over accumulation_steps texts and normalised by the total number
# of tokens in the window (earlier gradients rescaled when a new text is added). The RWKV-6
# 1.6B model and its tokenizer are replaced by a small GRU language model with the same
# forward_parallel(x, state) interface over a 32-symbol vocabulary; the JSONL file by synthetic
# texts of varying length; tqdm's postfix by a printed line per update.
import torch
import torch.nn as nn
from torch.utils.data import Dataset, DataLoader


class TextDataset(Dataset):
    def __init__(self, texts):
        self.texts = texts

    def __len__(self):
        return len(self.texts)

    def __getitem__(self, idx):
        encoded_data = self.texts[idx] + [0]
        encoded_data = torch.tensor(encoded_data, dtype=int).long()
        x = encoded_data[:-1].unsqueeze(0)
        y = encoded_data[1:].unsqueeze(0)
        return x, y


class RWKV_RNN(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.emb = nn.Embedding(args['vocab_size'], args['n_embd'])
        self.rnn = nn.GRU(args['n_embd'], args['n_embd'], batch_first=True)
        self.head = nn.Linear(args['n_embd'], args['vocab_size'])
        self.state_size = [1, args['n_embd']]

    def forward_parallel(self, x, state):
        out, h = self.rnn(self.emb(x), state)
        return self.head(out), h


def make_texts(n, g, vocab=32):
    texts = []
    for _ in range(n):
        length = int(torch.randint(20, 200, (1,), generator=g))
        period = int(torch.randint(3, 7, (1,), generator=g))
        motif = torch.randint(1, vocab, (period,), generator=g)
        seq = motif.repeat(length // period + 1)[:length].clone()
        noise = torch.rand(length, generator=g) < 0.05
        seq[noise] = torch.randint(1, vocab, (int(noise.sum()),), generator=g)
        texts.append(seq.tolist())
    return texts


def evaluate(model, texts, criterion):
    total, count = 0.0, 0
    with torch.no_grad():
        for t in texts:
            x = torch.tensor(t[:-1]).unsqueeze(0)
            y = torch.tensor(t[1:])
            out, _ = model.forward_parallel(x, torch.zeros(1, 1, model.state_size[1]))
            total += criterion(out[0], y).item() * len(y)
            count += len(y)
    return total / count


torch.manual_seed(0)
g = torch.Generator().manual_seed(0)
args = {'vocab_size': 32, 'n_embd': 48}
device = torch.device('cpu')
model = RWKV_RNN(args).to(device)

optimizer = torch.optim.Adam(model.parameters())
criterion = nn.CrossEntropyLoss()
slice_len = 128
dataset = TextDataset(make_texts(300, g))
val_texts = make_texts(40, g)
dataloader = DataLoader(dataset, batch_size=1, shuffle=True, generator=g)
accumulation_steps = 10  # 每 10 步更新一次参数
epochs = 3


def main():
    for epoch in range(epochs):
        accumulated_loss=0
        optimizer.zero_grad()
        累积总长=0
        上一步累积总长=0
        for step, (x, y) in enumerate(dataloader, start=1):
            x = x[0].to(device)
            y = y[0].to(device)
            data_len = x.shape[1]
            state = torch.zeros(
                1, model.state_size[0], model.state_size[1]).to(device)
            累积总长+=data_len
            先前梯度缩放因子=上一步累积总长/累积总长
            accumulated_loss*=先前梯度缩放因子
            # 根据序列的总长度对梯度进行规范化
            for param in model.parameters():
                if param.grad is not None:
                    param.grad *= 先前梯度缩放因子

            for i in range((data_len-2)//slice_len+1):
                start = i*slice_len
                end = min((i+1)*slice_len, data_len-1)
                x_i = x[:, start:end]
                y_i = y[0, start:end]
                current_slice_len = x_i.shape[1]
                token_out, state_new = model.forward_parallel(x_i, state)
                state = state_new.detach()  # 使用 detach() 截断梯度传播
                loss = criterion(token_out[0], y_i)
                loss_weight = loss * (current_slice_len / 累积总长)
                accumulated_loss+=loss_weight.item()
                loss_weight.backward()

            上一步累积总长=累积总长

            if step % accumulation_steps == 0 or step == len(dataloader):
                optimizer.step()
                optimizer.zero_grad()
                if (step // accumulation_steps) % 10 == 0:
                    print(f"epoch {epoch} update {step // accumulation_steps}: avg_loss {accumulated_loss:.4f} "
                          f"val loss {evaluate(model, val_texts, criterion):.4f}")


if __name__ == '__main__':
    main()
