# Source: styalai/xLSTM-pytorch, xLSTM/sLSTMblock.py, commit 018e5ab6438138d5da60a114beab95ad19197068
# Report: https://github.com/styalai/xLSTM-pytorch/issues/2
# sLSTM block language model on a synthetic character stream (the repository's example trains
# on tinyshakespeare). The model is moved with a single .to(device, dtype) call as training
# frameworks do.
import torch
import torch.nn as nn
import torch.nn.functional as F


class BlockDiagonal(nn.Module):
    def __init__(self, in_features, out_features, num_blocks, bias=True):
        super(BlockDiagonal, self).__init__()
        self.in_features = in_features
        self.out_features = out_features
        self.num_blocks = num_blocks
        block_in_features = in_features // num_blocks
        block_out_features = out_features // num_blocks
        self.blocks = nn.ModuleList([
            nn.Linear(block_in_features, block_out_features, bias=bias)
            for _ in range(num_blocks)
        ])

    def forward(self, x):
        x = x.chunk(self.num_blocks, dim=-1)
        x = [block(x_i) for block, x_i in zip(self.blocks, x)]
        x = torch.cat(x, dim=-1)
        return x


class CausalConv1D(nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, dilation=1, **kwargs):
        super(CausalConv1D, self).__init__()
        self.padding = (kernel_size - 1) * dilation
        self.conv = nn.Conv1d(in_channels, out_channels, kernel_size, padding=self.padding, dilation=dilation, **kwargs)

    def forward(self, x):
        x = self.conv(x)
        return x[:, :, :-self.padding]


class sLSTMblock(nn.Module):
    def __init__(self, x_example, depth, dropout=0.2):
        super().__init__()
        self.input_size = x_example.shape[2]
        self.ln = nn.LayerNorm(self.input_size)
        self.conv = CausalConv1D(self.input_size, self.input_size, int(self.input_size/8))
        self.drop = nn.Dropout(dropout)

        self.i_gate = BlockDiagonal(self.input_size, self.input_size, depth)
        self.f_gate = BlockDiagonal(self.input_size, self.input_size, depth)
        self.o_gate = BlockDiagonal(self.input_size, self.input_size, depth)
        self.z_gate = BlockDiagonal(self.input_size, self.input_size, depth)

        self.ri_gate = BlockDiagonal(self.input_size, self.input_size, depth, bias=False)
        self.rf_gate = BlockDiagonal(self.input_size, self.input_size, depth, bias=False)
        self.ro_gate = BlockDiagonal(self.input_size, self.input_size, depth, bias=False)
        self.rz_gate = BlockDiagonal(self.input_size, self.input_size, depth, bias=False)

        self.ln_i = nn.LayerNorm(self.input_size)
        self.ln_f = nn.LayerNorm(self.input_size)
        self.ln_o = nn.LayerNorm(self.input_size)
        self.ln_z = nn.LayerNorm(self.input_size)

        self.GN = nn.LayerNorm(self.input_size)
        self.ln_c = nn.LayerNorm(self.input_size)
        self.ln_n = nn.LayerNorm(self.input_size)
        self.ln_h = nn.LayerNorm(self.input_size)

        self.left_linear = nn.Linear(self.input_size, int(self.input_size*(4/3)))
        self.right_linear = nn.Linear(self.input_size, int(self.input_size*(4/3)))
        self.ln_out = nn.LayerNorm(int(self.input_size*(4/3)))
        self.proj = nn.Linear(int(self.input_size*(4/3)), self.input_size)

        self.init_states(x_example)

    def init_states(self, x):
        self.nt_1 = torch.zeros(1, 1, x.shape[2])
        self.ct_1 = torch.zeros(1, 1, x.shape[2])
        self.ht_1 = torch.zeros(1, 1, x.shape[2])
        self.mt_1 = torch.zeros(1, 1, x.shape[2])

    def forward(self, x):
        x = self.ln(x)
        x_conv = F.silu(self.drop(self.conv(x.transpose(1, 2)).transpose(1, 2)))

        # start sLSTM
        ht_1 = self.ht_1
        i = torch.exp(self.ln_i(self.i_gate(x_conv) + self.ri_gate(ht_1)))
        f = torch.exp(self.ln_f(self.f_gate(x_conv) + self.rf_gate(ht_1)))

        m = torch.max(torch.log(f)+self.mt_1[:, 0, :].unsqueeze(1), torch.log(i))
        i = torch.exp(torch.log(i) - m)
        f = torch.exp(torch.log(f) + self.mt_1[:, 0, :].unsqueeze(1)-m)
        self.mt_1 = m.detach()

        o = torch.sigmoid(self.ln_o(self.o_gate(x) + self.ro_gate(ht_1)))
        z = torch.tanh(self.ln_z(self.z_gate(x) + self.rz_gate(ht_1)))

        ct_1 = self.ct_1
        ct = f*ct_1 + i*z
        ct = torch.mean(self.ln_c(ct), [0, 1], keepdim=True)
        self.ct_1 = ct.detach()

        nt_1 = self.nt_1
        nt = f*nt_1 + i
        nt = torch.mean(self.ln_n(nt), [0, 1], keepdim=True)
        self.nt_1 = nt.detach()

        ht = o*(ct/nt)
        ht = torch.mean(self.ln_h(ht), [0, 1], keepdim=True)
        self.ht_1 = ht.detach()
        # end sLSTM

        slstm_out = self.GN(ht)
        left = self.left_linear(slstm_out)
        right = F.gelu(self.right_linear(slstm_out))
        out = self.ln_out(left*right)
        out = self.proj(out)
        return out


class xLSTMLM(nn.Module):
    def __init__(self, vocab_size, x_example, depth):
        super().__init__()
        self.emb = nn.Embedding(vocab_size, x_example.shape[2])
        self.block = sLSTMblock(x_example, depth)
        self.head = nn.Linear(x_example.shape[2], vocab_size)

    def forward(self, idx):
        x = self.emb(idx)
        x = x + self.block(x)
        return self.head(x)


def main():
    torch.manual_seed(0)
    device = 'cuda' if torch.cuda.is_available() else 'cpu'
    dtype = torch.bfloat16
    vocab_size, block_size, batch_size, d = 16, 16, 8, 32
    data = torch.arange(4000) % vocab_size
    x_example = torch.zeros(batch_size, block_size, d)
    model = xLSTMLM(vocab_size, x_example, depth=4).to(device=device, dtype=dtype)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for step in range(60):
        ix = torch.randint(len(data) - block_size - 1, (batch_size,))
        xb = torch.stack([data[i:i + block_size] for i in ix]).to(device)
        yb = torch.stack([data[i + 1:i + block_size + 1] for i in ix]).to(device)
        logits = model(xb)
        loss = F.cross_entropy(logits.float().view(-1, vocab_size), yb.view(-1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 10 == 0 or step == 59:
            print("step %d loss %.4f" % (step, loss.item()))


if __name__ == "__main__":
    main()
