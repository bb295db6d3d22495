# Source: galsang/BiDAF-pytorch, model/model.py + run.py, commit 8e16379e33af725daec3ec6c170dfae69e54d51b
# Report: https://github.com/galsang/BiDAF-pytorch/pull/26
# BiDAF (bidirectional attention flow) for extractive QA. The character CNN and highway network are
# dropped and the GloVe/packed-LSTM wrappers replaced by plain modules; SQuAD is replaced by synthetic
# contexts of 20 tokens in which the answer span follows a marker token named by the question.
import torch
import torch.nn as nn
import torch.nn.functional as F


class Linear(nn.Module):
    def __init__(self, in_features, out_features, dropout=0.0):
        super(Linear, self).__init__()
        self.linear = nn.Linear(in_features=in_features, out_features=out_features)
        if dropout > 0:
            self.dropout = nn.Dropout(p=dropout)

    def forward(self, x):
        if hasattr(self, 'dropout'):
            x = self.dropout(x)
        x = self.linear(x)
        return x


class BiDAF(nn.Module):
    def __init__(self, vocab_size, word_dim=32, hidden_size=32, dropout=0.2):
        super(BiDAF, self).__init__()
        self.word_emb = nn.Embedding(vocab_size, word_dim)
        self.context_LSTM = nn.LSTM(word_dim, hidden_size, bidirectional=True, batch_first=True)

        self.att_weight_c = Linear(hidden_size * 2, 1)
        self.att_weight_q = Linear(hidden_size * 2, 1)
        self.att_weight_cq = Linear(hidden_size * 2, 1)

        self.modeling_LSTM1 = nn.LSTM(hidden_size * 8, hidden_size, bidirectional=True, batch_first=True)
        self.modeling_LSTM2 = nn.LSTM(hidden_size * 2, hidden_size, bidirectional=True, batch_first=True)

        self.p1_weight_g = Linear(hidden_size * 8, 1, dropout=dropout)
        self.p1_weight_m = Linear(hidden_size * 2, 1, dropout=dropout)
        self.p2_weight_g = Linear(hidden_size * 8, 1, dropout=dropout)
        self.p2_weight_m = Linear(hidden_size * 2, 1, dropout=dropout)

        self.output_LSTM = nn.LSTM(hidden_size * 2, hidden_size, bidirectional=True, batch_first=True)

        self.dropout = nn.Dropout(p=dropout)

    def forward(self, c_word, q_word):

        def att_flow_layer(c, q):
            """
            :param c: (batch, c_len, hidden_size * 2)
            :param q: (batch, q_len, hidden_size * 2)
            :return: (batch, c_len, q_len)
            """
            c_len = c.size(1)
            q_len = q.size(1)

            cq = []
            for i in range(q_len):
                #(batch, 1, hidden_size * 2)
                qi = q.select(1, i).unsqueeze(1)
                #(batch, c_len, 1)
                ci = self.att_weight_cq(c * qi).squeeze()
                cq.append(ci)
            # (batch, c_len, q_len)
            cq = torch.stack(cq, dim=-1)

            # (batch, c_len, q_len)
            s = self.att_weight_c(c).expand(-1, -1, q_len) + \
                self.att_weight_q(q).permute(0, 2, 1).expand(-1, c_len, -1) + \
                cq

            # (batch, c_len, q_len)
            a = F.softmax(s, dim=2)
            # (batch, c_len, q_len) * (batch, q_len, hidden_size * 2) -> (batch, c_len, hidden_size * 2)
            c2q_att = torch.bmm(a, q)
            # (batch, 1, c_len)
            b = F.softmax(torch.max(s, dim=2)[0], dim=1).unsqueeze(1)
            # (batch, 1, c_len) * (batch, c_len, hidden_size * 2) -> (batch, hidden_size * 2)
            q2c_att = torch.bmm(b, c).squeeze()
            # (batch, c_len, hidden_size * 2) (tiled)
            q2c_att = q2c_att.unsqueeze(1).expand(-1, c_len, -1)

            # (batch, c_len, hidden_size * 8)
            x = torch.cat([c, c2q_att, c * c2q_att, c * q2c_att], dim=-1)
            return x

        def output_layer(g, m):
            """
            :param g: (batch, c_len, hidden_size * 8)
            :param m: (batch, c_len ,hidden_size * 2)
            :return: p1: (batch, c_len), p2: (batch, c_len)
            """
            # (batch, c_len)
            p1 = (self.p1_weight_g(g) + self.p1_weight_m(m)).squeeze()
            # (batch, c_len, hidden_size * 2)
            m2 = self.output_LSTM(m)[0]
            # (batch, c_len)
            p2 = (self.p2_weight_g(g) + self.p2_weight_m(m2)).squeeze()

            return p1, p2

        c = self.context_LSTM(self.dropout(self.word_emb(c_word)))[0]
        q = self.context_LSTM(self.dropout(self.word_emb(q_word)))[0]
        g = att_flow_layer(c, q)
        m = self.modeling_LSTM2(self.modeling_LSTM1(g)[0])[0]
        p1, p2 = output_layer(g, m)
        return p1, p2


def make_squad(n, gen, vocab_size=60, c_len=20):
    c_word = torch.randint(10, vocab_size, (n, c_len), generator=gen)
    markers = torch.randint(0, 10, (n,), generator=gen)
    starts = torch.randint(1, c_len - 3, (n,), generator=gen)
    lengths = torch.randint(1, 3, (n,), generator=gen)
    c_word[torch.arange(n), starts - 1] = markers
    q_word = torch.stack([markers, torch.full((n,), 5), torch.randint(10, vocab_size, (n,), generator=gen)], 1)
    return c_word, q_word, starts, starts + lengths - 1


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    c_word, q_word, s_idx, e_idx = make_squad(1601, gen)
    model = BiDAF(vocab_size=60)
    optimizer = torch.optim.Adadelta(model.parameters(), lr=0.5)
    criterion = nn.CrossEntropyLoss()
    batch_size = 32

    model.train()
    for epoch in range(3):
        loss, exact = 0.0, 0
        for i in range(0, len(c_word), batch_size):
            p1, p2 = model(c_word[i:i + batch_size], q_word[i:i + batch_size])

            optimizer.zero_grad()
            batch_loss = criterion(p1, s_idx[i:i + batch_size]) + criterion(p2, e_idx[i:i + batch_size])
            loss += batch_loss.item()
            batch_loss.backward()
            optimizer.step()
            exact += ((p1.argmax(-1) == s_idx[i:i + batch_size]) & (p2.argmax(-1) == e_idx[i:i + batch_size])).sum().item()
        print('epoch %d train loss %.3f exact match %.3f' % (epoch, loss / (len(c_word) / batch_size), exact / len(c_word)))


if __name__ == "__main__":
    main()
