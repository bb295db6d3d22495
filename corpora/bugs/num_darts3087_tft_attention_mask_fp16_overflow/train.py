# Source: unit8co/darts, darts/models/forecasting/tft_submodels.py (_ScaledDotProductAttention, _InterpretableMultiHeadAttention) + darts/models/forecasting/tft_model.py (_TFTModule.get_attention_mask_future, forward), commit c33b5e4c460c559eeed59e14b17e564d32c12f96
# Report: https://github.com/unit8co/darts/issues/3081 (fixed by https://github.com/unit8co/darts/pull/3087)
import numpy as np
import torch
import torch.nn as nn


class MonteCarloDropout(nn.Dropout):
    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return nn.functional.dropout(input, self.p, self.training)


class _ScaledDotProductAttention(nn.Module):
    def __init__(self, dropout=None, scale: bool = True):
        super().__init__()
        if dropout is not None:
            self.dropout = MonteCarloDropout(p=dropout)
        else:
            self.dropout = dropout
        self.softmax = nn.Softmax(dim=2)
        self.scale = scale

    def forward(self, q, k, v, mask=None):
        attn = torch.bmm(q, k.permute(0, 2, 1))  # query-key overlap

        if self.scale:
            dimension = torch.sqrt(torch.tensor(k.shape[-1]).to(torch.float32))
            attn = attn / dimension

        if mask is not None:
            attn = attn.masked_fill(mask, -1e9)
        attn = self.softmax(attn)

        if self.dropout is not None:
            attn = self.dropout(attn)
        output = torch.bmm(attn, v)
        return output, attn


class _InterpretableMultiHeadAttention(nn.Module):
    def __init__(self, n_head: int, d_model: int, dropout: float = 0.0):
        super().__init__()

        self.n_head = n_head
        self.d_model = d_model
        self.d_k = self.d_q = self.d_v = d_model // n_head
        self.dropout = MonteCarloDropout(p=dropout)

        self.v_layer = nn.Linear(self.d_model, self.d_v)
        self.q_layers = nn.ModuleList([nn.Linear(self.d_model, self.d_q) for _ in range(self.n_head)])
        self.k_layers = nn.ModuleList([nn.Linear(self.d_model, self.d_k) for _ in range(self.n_head)])
        self.attention = _ScaledDotProductAttention()
        self.w_h = nn.Linear(self.d_v, self.d_model, bias=False)

        self.init_weights()

    def init_weights(self):
        for name, p in self.named_parameters():
            if "bias" not in name:
                torch.nn.init.xavier_uniform_(p)
            else:
                torch.nn.init.zeros_(p)

    def forward(self, q, k, v, mask=None):
        heads = []
        attns = []
        vs = self.v_layer(v)
        for i in range(self.n_head):
            qs = self.q_layers[i](q)
            ks = self.k_layers[i](k)
            head, attn = self.attention(qs, ks, vs, mask)
            head_dropout = self.dropout(head)
            heads.append(head_dropout)
            attns.append(attn)

        head = torch.stack(heads, dim=2) if self.n_head > 1 else heads[0]
        attn = torch.stack(attns, dim=2)

        outputs = torch.mean(head, dim=2) if self.n_head > 1 else head
        outputs = self.w_h(outputs)
        outputs = self.dropout(outputs)

        return outputs, attn


class _TFTModule(nn.Module):
    """Reduced TFT: variable embedding, LSTM encoder/decoder, post-LSTM gate/norm, interpretable attention
    over encoder + decoder steps with the causal future mask, feed-forward and quantile-free output layer."""

    def __init__(self, input_chunk_length, output_chunk_length, hidden_size=32, num_attention_heads=4, dropout=0.1):
        super().__init__()
        self.input_chunk_length = input_chunk_length
        self.output_chunk_length = output_chunk_length
        self.n_targets = 1
        self.loss_size = 1
        self.encoder_embedding = nn.Linear(2, hidden_size)  # target + past covariate
        self.decoder_embedding = nn.Linear(1, hidden_size)  # future covariate
        self.lstm_encoder = nn.LSTM(hidden_size, hidden_size, batch_first=True)
        self.lstm_decoder = nn.LSTM(hidden_size, hidden_size, batch_first=True)
        self.post_lstm_norm = nn.LayerNorm(hidden_size)
        self.multihead_attn = _InterpretableMultiHeadAttention(num_attention_heads, hidden_size, dropout)
        self.post_attn_norm = nn.LayerNorm(hidden_size)
        self.feed_forward_block = nn.Sequential(nn.Linear(hidden_size, hidden_size), nn.ELU())
        self.output_layer = nn.Linear(hidden_size, self.n_targets * self.loss_size)
        self.attention_mask = None

    @staticmethod
    def get_attention_mask_future(encoder_length, decoder_length, batch_size, device, full_attention):
        if full_attention:
            # attend to entire past and future input
            decoder_mask = torch.zeros((decoder_length, decoder_length), dtype=torch.bool, device=device)
        else:
            # attend only to past steps relative to forecasting step in the future
            # indices to which is attended
            attend_step = torch.arange(decoder_length, device=device)
            # indices for which is predicted
            predict_step = torch.arange(0, decoder_length, device=device)[:, None]
            # do not attend to steps to self or after prediction
            decoder_mask = attend_step >= predict_step
        # attend to all past input
        encoder_mask = torch.zeros(batch_size, encoder_length, dtype=torch.bool, device=device)
        # combine masks along attended time - first encoder and then decoder
        mask = torch.cat(
            (
                encoder_mask.unsqueeze(1).expand(-1, decoder_length, -1),
                decoder_mask.unsqueeze(0).expand(batch_size, -1, -1),
            ),
            dim=2,
        )
        return mask

    def forward(self, x_past, x_future):
        batch_size = x_past.shape[0]
        encoder_length, decoder_length = self.input_chunk_length, self.output_chunk_length
        dim_time = 1
        if self.attention_mask is None or self.attention_mask.shape[0] != batch_size:
            self.attention_mask = self.get_attention_mask_future(
                encoder_length, decoder_length, batch_size, x_past.device, full_attention=False)

        embeddings_varying_encoder = self.encoder_embedding(x_past)
        embeddings_varying_decoder = self.decoder_embedding(x_future)

        # run local lstm encoder
        encoder_out, (hidden, cell) = self.lstm_encoder(embeddings_varying_encoder)

        # run local lstm decoder
        decoder_out, _ = self.lstm_decoder(embeddings_varying_decoder, (hidden, cell))

        lstm_layer = torch.cat([encoder_out, decoder_out], dim=dim_time)
        input_embeddings = torch.cat([embeddings_varying_encoder, embeddings_varying_decoder], dim=dim_time)

        # post lstm GateAddNorm
        lstm_out = self.post_lstm_norm(lstm_layer + input_embeddings)
        attn_input = lstm_out

        # multi-head attention
        attn_out, attn_out_weights = self.multihead_attn(
            q=attn_input[:, encoder_length:],
            k=attn_input,
            v=attn_input,
            mask=self.attention_mask,
        )

        # skip connection over attention
        attn_out = self.post_attn_norm(attn_out + attn_input[:, encoder_length:])

        # feed-forward
        out = self.feed_forward_block(attn_out)
        out = self.output_layer(out + lstm_out[:, encoder_length:])
        out = out.view(batch_size, self.output_chunk_length, self.n_targets, self.loss_size)
        return out


def make_series(n=1200, seed=0):
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    covariate = np.sin(2 * np.pi * t / 24)
    target = 0.8 * covariate + 0.3 * np.sin(2 * np.pi * t / 168) + 0.1 * rng.standard_normal(n)
    return target.astype(np.float32), covariate.astype(np.float32)


def make_samples(target, covariate, input_chunk_length, output_chunk_length):
    xs_past, xs_future, ys = [], [], []
    for s in range(0, len(target) - input_chunk_length - output_chunk_length, 3):
        e = s + input_chunk_length
        xs_past.append(np.stack([target[s:e], covariate[s:e]], axis=-1))
        xs_future.append(covariate[e:e + output_chunk_length, None])
        ys.append(target[e:e + output_chunk_length, None, None])
    return torch.tensor(np.array(xs_past)), torch.tensor(np.array(xs_future)), torch.tensor(np.array(ys))


def main():
    torch.manual_seed(42)
    input_chunk_length, output_chunk_length = 24, 12
    target, covariate = make_series()
    x_past, x_future, y = make_samples(target, covariate, input_chunk_length, output_chunk_length)
    model = _TFTModule(input_chunk_length, output_chunk_length)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    # pl_trainer_kwargs={"precision": "16-mixed"}
    scaler = torch.amp.GradScaler("cpu")
    criterion = nn.MSELoss()
    batch_size = 32
    for epoch in range(5):
        model.train()
        perm = torch.randperm(len(y))
        total, count = 0.0, 0
        for i in range(0, len(y), batch_size):
            idx = perm[i:i + batch_size]
            with torch.autocast(device_type="cpu", dtype=torch.float16):
                out = model(x_past[idx], x_future[idx])
                loss = criterion(out.float(), y[idx])
            optimizer.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            total += loss.item() * len(idx)
            count += len(idx)
        print(f"Epoch {epoch}: train_loss {total / count:.4f}")


if __name__ == "__main__":
    main()
