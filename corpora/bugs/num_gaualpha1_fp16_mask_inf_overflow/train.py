# Source: JunnYu/GAU-alpha-pytorch, src/gau_alpha/layer.py, src/gau_alpha/modeling_gau_alpha.py, commit b7ba52e022ea8da19fbb0698c2063ca34c3679b9
# Report: https://github.com/JunnYu/GAU-alpha-pytorch/issues/1
# GAU-alpha (gated attention unit encoder with RoPE) fine-tuned for sentence classification in
# half precision. CUDA AMP is replaced by CPU autocast(float16); the 24-layer 768-wide checkpoint by
# a randomly initialised 2-layer 64-wide model; CLUE data by synthetic padded token sequences
# (label: does the "keyword" token occur in the sentence).
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from transformers.activations import get_activation

INF = 1e12


def attention_normalize(a, l, dim=-1, method="softmax"):
    if method == "softmax":
        return torch.softmax(a, dim=dim)
    else:
        if method == "squared_relu":
            return torch.relu(a) ** 2 / l
        elif method == "softmax_plus":
            return torch.softmax(a * torch.log(l) / np.log(512), dim=dim)
    return a


class ScaleOffset(nn.Module):
    def __init__(self, hidden_size=768, scale=True, offset=True):
        super().__init__()
        self.scale = scale
        self.offset = offset
        if self.scale:
            self.weight = nn.Parameter(torch.ones(hidden_size))
        if self.offset:
            self.bias = nn.Parameter(torch.zeros(hidden_size))

    def forward(self, inputs):
        if self.scale:
            inputs = inputs * self.weight
        if self.offset:
            inputs = inputs + self.bias
        return inputs


class Norm(nn.Module):
    def __init__(self, eps=1e-12):
        super().__init__()
        self.eps = eps

    def forward(self, x):
        variance = torch.mean(torch.square(x), dim=-1, keepdim=True)
        return x / torch.sqrt(variance + self.eps)


class GatedAttentionUnit(nn.Module):
    def __init__(self, hidden_size=768, intermediate_size=1536, attention_key_size=128, activation="swish",
                 use_bias=False, normalization="softmax_plus", attention_scale=True, attention_dropout=0.1):
        super().__init__()
        self.activation = get_activation(activation)
        self.intermediate_size = intermediate_size
        self.attention_key_size = attention_key_size
        self.use_bias = use_bias
        self.normalization = normalization
        self.attention_scale = attention_scale
        self.attention_dropout = attention_dropout
        self.i_dense = nn.Linear(hidden_size, 2 * intermediate_size + attention_key_size, bias=self.use_bias)
        self.o_dense = nn.Linear(intermediate_size, hidden_size, bias=self.use_bias)
        self.q_scaleoffset = ScaleOffset(attention_key_size, offset=self.use_bias)
        self.k_scaleoffset = ScaleOffset(attention_key_size, offset=self.use_bias)

    @staticmethod
    def apply_rotary(x, sinusoidal_pos=None):
        if sinusoidal_pos is None:
            return x
        sin, cos = sinusoidal_pos
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)

    def forward(self, hidden_states, attention_mask=None, sinusoidal_pos=None, output_attentions=False):
        x = self.i_dense(hidden_states)
        u, v, qk = torch.split(
            self.activation(x),
            [self.intermediate_size, self.intermediate_size, self.attention_key_size],
            dim=-1,
        )
        q, k = self.q_scaleoffset(qk), self.k_scaleoffset(qk)
        q, k = self.apply_rotary(q, sinusoidal_pos), self.apply_rotary(k, sinusoidal_pos)

        a = torch.einsum("bmd,bnd->bmn", q, k)
        if self.attention_scale:
            a = a / self.attention_key_size ** 0.5

        if attention_mask is not None:
            if attention_mask.ndim == 2:
                attention_mask = attention_mask[:, None, :]
            a = a.masked_fill(attention_mask == 0, -INF)
            l = attention_mask.sum(-1, keepdim=True)
        else:
            l = x.shape[1]

        A = attention_normalize(a, l, dim=-1, method=self.normalization)
        A = F.dropout(A, p=self.attention_dropout, training=self.training)
        o = self.o_dense(u * torch.einsum("bmn,bnd->bmd", A, v))
        outputs = (o, A) if output_attentions else (o,)
        return outputs


class GAULayer(nn.Module):
    def __init__(self, hidden_size=768, intermediate_size=1536, attention_key_size=128, activation="swish",
                 use_bias=False, normalization="softmax_plus", attention_scale=True, attention_dropout=0.1,
                 hidden_dropout=0.1, eps=1e-12):
        super().__init__()
        self.gau = GatedAttentionUnit(hidden_size, intermediate_size, attention_key_size, activation, use_bias,
                                      normalization, attention_scale, attention_dropout)
        self.norm = Norm(eps=eps)
        self.hidden_dropout = hidden_dropout

    def forward(self, hidden_states, attention_mask=None, sinusoidal_pos=None, output_attentions=False):
        gau_output = self.gau(hidden_states, attention_mask, sinusoidal_pos, output_attentions)
        o = F.dropout(gau_output[0], p=self.hidden_dropout, training=self.training)
        o = self.norm(hidden_states + o)
        outputs = (o,) + gau_output[1:]
        return outputs


class GAUAlphaForSequenceClassification(nn.Module):
    def __init__(self, vocab_size=200, hidden_size=64, intermediate_size=128, attention_key_size=32,
                 num_hidden_layers=2, max_position_embeddings=64, num_labels=2, pad_token_id=0):
        super().__init__()
        self.pad_token_id = pad_token_id
        self.num_labels = num_labels
        self.word_embeddings = nn.Embedding(vocab_size, hidden_size, padding_idx=pad_token_id)
        self.token_type_embeddings = nn.Embedding(2, hidden_size)
        self.norm = Norm(eps=1e-12)
        self.layer = nn.ModuleList([
            GAULayer(hidden_size, intermediate_size, attention_key_size, "swish", False, "softmax_plus", True, 0.1, 0.1, 1e-12)
            for _ in range(num_hidden_layers)])
        position_ids = torch.arange(0, max_position_embeddings, dtype=torch.float32)
        indices = torch.arange(0, attention_key_size // 2, dtype=torch.float32)
        indices = torch.pow(10000.0, -2 * indices / attention_key_size)
        sinusoidal_id = torch.einsum("n,d->nd", position_ids, indices)[None, :, :]
        self.register_buffer("sin_pos", sinusoidal_id.sin(), persistent=False)
        self.register_buffer("cos_pos", sinusoidal_id.cos(), persistent=False)
        self.summary = nn.Linear(hidden_size, hidden_size)
        self.classifier = nn.Linear(hidden_size, num_labels)

    def forward(self, input_ids, attention_mask=None, token_type_ids=None, labels=None):
        if attention_mask is None:
            attention_mask = (input_ids != self.pad_token_id).type_as(self.word_embeddings.weight)
        if token_type_ids is None:
            token_type_ids = torch.zeros_like(input_ids)
        hidden_states = self.norm(self.word_embeddings(input_ids) + self.token_type_embeddings(token_type_ids))
        seqlen = hidden_states.shape[1]
        sinusoidal_pos = self.sin_pos[:, :seqlen, :], self.cos_pos[:, :seqlen, :]
        for layer_module in self.layer:
            hidden_states = layer_module(hidden_states, attention_mask, sinusoidal_pos)[0]
        pooled_output = torch.tanh(self.summary(hidden_states[:, 0]))
        logits = self.classifier(pooled_output)
        loss = nn.CrossEntropyLoss()(logits.reshape(-1, self.num_labels).float(), labels.reshape(-1))
        return loss, logits


def make_batch(gen, batch_size=32, max_len=32, keyword=7):
    lengths = torch.randint(8, max_len + 1, (batch_size,), generator=gen)
    input_ids = torch.zeros(batch_size, max_len, dtype=torch.long)
    labels = torch.randint(0, 2, (batch_size,), generator=gen)
    for i, n in enumerate(lengths.tolist()):
        toks = torch.randint(10, 200, (n,), generator=gen)
        toks[0] = 1
        if labels[i] == 1:
            toks[torch.randint(1, n, (1,), generator=gen)] = keyword
        input_ids[i, :n] = toks
    return input_ids, labels


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    train_batches = [make_batch(gen) for _ in range(25)]
    dev_ids, dev_labels = make_batch(gen, batch_size=256)
    model = GAUAlphaForSequenceClassification()
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3, weight_decay=0.01)
    scaler = torch.amp.GradScaler("cpu")
    for epoch in range(2):
        model.train()
        for step, (input_ids, labels) in enumerate(train_batches):
            with torch.autocast("cpu", dtype=torch.float16):
                loss, _ = model(input_ids, labels=labels)
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
            dev_loss, logits = model(dev_ids, labels=dev_labels)
        acc = (logits.argmax(-1) == dev_labels).float().mean().item()
        print("epoch %d train loss %.4f dev loss %.4f dev acc %.4f" % (epoch, loss.item(), dev_loss.item(), acc))


if __name__ == "__main__":
    main()
