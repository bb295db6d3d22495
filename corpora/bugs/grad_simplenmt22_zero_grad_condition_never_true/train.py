# Source: kh-kim/simple-nmt, simple_nmt/trainer.py (MaximumLikelihoodEstimationEngine.train / validate), train.py (get_crit, get_optimizer, get_scheduler), simple_nmt/utils.py, commit 08fc4baaa96a88e7ce141dd83af572b2851ff1cc
# Report: https://github.com/kh-kim/simple-nmt/pull/22
# Sequence-to-sequence NMT trained by maximum likelihood: a bidirectional LSTM encoder, an
# LSTM decoder with attention and input feeding, log-softmax generator, NLLLoss summed with
# PAD weighted zero, SGD (lr 1.0) with gradient clipping at 5, MultiStepLR decay per epoch,
# and gradient accumulation over `iteration_per_update` mini-batches (default 1). The
# ignite Engine is written out as a loop with the same 1-based iteration counter; the
# corpus is synthetic (the target is the source sentence reversed, with BOS/EOS).
import numpy as np
import torch
from torch import nn
from torch import optim
import torch.nn.utils as torch_utils

torch.manual_seed(0)
torch.set_num_threads(1)

PAD, BOS, EOS = 1, 2, 3
VOCAB = 24


class Config:
    batch_size = 32
    n_epochs = 6
    word_vec_size = 32
    hidden_size = 64
    n_layers = 1
    dropout = .3
    max_grad_norm = 5.
    iteration_per_update = 1
    lr = 1.
    lr_step = 1
    lr_gamma = .5
    lr_decay_start = 4
    init_epoch = 1
    use_noam_decay = False


class MiniBatch:
    def __init__(self, src, tgt):
        self.src = src
        self.tgt = tgt


def make_batches(n_batches, seed):
    rng = np.random.RandomState(seed)
    batches = []
    for _ in range(n_batches):
        lengths = rng.randint(3, 9, Config.batch_size)
        lengths = np.sort(lengths)[::-1].copy()
        n = lengths[0]
        src = np.full((Config.batch_size, n), PAD)
        tgt = np.full((Config.batch_size, n + 2), PAD)
        for i, length in enumerate(lengths):
            words = rng.randint(4, VOCAB, length)
            src[i, :length] = words
            tgt[i, 0] = BOS
            tgt[i, 1:length + 1] = words[::-1]
            tgt[i, length + 1] = EOS
        batches.append(MiniBatch((torch.tensor(src), torch.tensor(lengths)),
                                 (torch.tensor(tgt), torch.tensor(lengths + 1))))
    return batches


class Attention(nn.Module):
    def __init__(self, hidden_size):
        super().__init__()
        self.linear = nn.Linear(hidden_size, hidden_size, bias=False)
        self.softmax = nn.Softmax(dim=-1)

    def forward(self, h_src, h_t_tgt, mask=None):
        query = self.linear(h_t_tgt)
        weight = torch.bmm(query, h_src.transpose(1, 2))
        if mask is not None:
            weight.masked_fill_(mask.unsqueeze(1), -float('inf'))
        weight = self.softmax(weight)
        return torch.bmm(weight, h_src)


class Seq2Seq(nn.Module):
    def __init__(self, input_size, word_vec_size, hidden_size, output_size, n_layers=1, dropout_p=.2):
        super().__init__()
        self.emb_src = nn.Embedding(input_size, word_vec_size)
        self.emb_dec = nn.Embedding(output_size, word_vec_size)
        self.encoder = nn.LSTM(word_vec_size, hidden_size // 2, n_layers, batch_first=True, bidirectional=True)
        self.decoder = nn.LSTM(word_vec_size + hidden_size, hidden_size, n_layers, batch_first=True)
        self.attn = Attention(hidden_size)
        self.concat = nn.Linear(hidden_size * 2, hidden_size)
        self.tanh = nn.Tanh()
        self.dropout = nn.Dropout(dropout_p)
        self.generator = nn.Sequential(nn.Linear(hidden_size, output_size), nn.LogSoftmax(dim=-1))

    def forward(self, src, tgt):
        x, x_length = src
        mask = x == PAD
        packed = nn.utils.rnn.pack_padded_sequence(self.emb_src(x), x_length.tolist(), batch_first=True)
        h_src, (h, c) = self.encoder(packed)
        h_src, _ = nn.utils.rnn.pad_packed_sequence(h_src, batch_first=True)
        h = torch.cat([h[0::2], h[1::2]], dim=-1)
        c = torch.cat([c[0::2], c[1::2]], dim=-1)
        emb_tgt = self.emb_dec(tgt)
        h_tilde = []
        h_t_tilde = emb_tgt.new_zeros(tgt.size(0), 1, h.size(-1))
        hidden = (h, c)
        for t in range(tgt.size(1)):
            emb_t = emb_tgt[:, t].unsqueeze(1)
            dec_out, hidden = self.decoder(torch.cat([emb_t, h_t_tilde], dim=-1), hidden)
            context = self.attn(h_src, dec_out, mask)
            h_t_tilde = self.tanh(self.concat(self.dropout(torch.cat([dec_out, context], dim=-1))))
            h_tilde.append(h_t_tilde)
        return self.generator(torch.cat(h_tilde, dim=1))


@torch.no_grad()
def get_grad_norm(parameters, norm_type=2):
    parameters = list(filter(lambda p: p.grad is not None, parameters))
    total_norm = 0
    for p in parameters:
        total_norm += (p.grad.data ** norm_type).sum()
    return total_norm ** (1. / norm_type)


@torch.no_grad()
def get_parameter_norm(parameters, norm_type=2):
    total_norm = 0
    for p in parameters:
        total_norm += (p.data ** norm_type).sum()
    return total_norm ** (1. / norm_type)


class State:
    iteration = 0
    epoch = 0


class MaximumLikelihoodEstimationEngine:

    def __init__(self, model, crit, optimizer, lr_scheduler, config):
        self.model = model
        self.crit = crit
        self.optimizer = optimizer
        self.lr_scheduler = lr_scheduler
        self.config = config
        self.state = State()
        self.best_loss = np.inf

    @staticmethod
    def train(engine, mini_batch):
        # You have to reset the gradients of all model parameters
        # before to take another step in gradient descent.
        engine.model.train()
        if engine.state.iteration % engine.config.iteration_per_update == 1:
            engine.optimizer.zero_grad()

        x, y = mini_batch.src, mini_batch.tgt[0][:, 1:]

        y_hat = engine.model(x, mini_batch.tgt[0][:, :-1])
        loss = engine.crit(
            y_hat.contiguous().view(-1, y_hat.size(-1)),
            y.contiguous().view(-1)
        )
        backward_target = loss.div(y.size(0)).div(engine.config.iteration_per_update)
        backward_target.backward()

        word_count = int(mini_batch.tgt[1].sum())
        p_norm = float(get_parameter_norm(engine.model.parameters()))
        g_norm = float(get_grad_norm(engine.model.parameters()))

        if engine.state.iteration % engine.config.iteration_per_update == 0:
            # In orther to avoid gradient exploding, we apply gradient clipping.
            torch_utils.clip_grad_norm_(
                engine.model.parameters(),
                engine.config.max_grad_norm,
            )
            engine.optimizer.step()

        loss = float(loss.detach() / word_count)
        return {'loss': loss, 'ppl': np.exp(loss), '|param|': p_norm, '|g_param|': g_norm}

    @staticmethod
    def validate(engine, mini_batch):
        engine.model.eval()
        with torch.no_grad():
            x, y = mini_batch.src, mini_batch.tgt[0][:, 1:]
            y_hat = engine.model(x, mini_batch.tgt[0][:, :-1])
            loss = engine.crit(y_hat.contiguous().view(-1, y_hat.size(-1)), y.contiguous().view(-1))
        word_count = int(mini_batch.tgt[1].sum())
        return float(loss), word_count

    def run(self, train_batches, valid_batches, n_epochs):
        for epoch in range(1, n_epochs + 1):
            self.state.epoch = epoch
            outs = []
            for mini_batch in train_batches:
                self.state.iteration += 1
                outs.append(self.train(self, mini_batch))
            total_loss, total_words = 0., 0
            for mini_batch in valid_batches:
                loss, words = self.validate(self, mini_batch)
                total_loss += loss
                total_words += words
            valid_loss = total_loss / total_words
            self.best_loss = min(self.best_loss, valid_loss)
            print('Epoch %d - |param|=%.2e |g_param|=%.2e loss=%.4e ppl=%.2f | valid_loss=%.4e valid_ppl=%.2f best=%.4e' % (
                epoch, np.mean([o['|param|'] for o in outs]), np.mean([o['|g_param|'] for o in outs]),
                np.mean([o['loss'] for o in outs]), np.mean([o['ppl'] for o in outs]),
                valid_loss, np.exp(valid_loss), self.best_loss))
            if self.lr_scheduler is not None:
                self.lr_scheduler.step()


def get_crit(output_size, pad_index):
    # Default weight for loss equals to 1, but we don't need to get loss for PAD token.
    loss_weight = torch.ones(output_size)
    loss_weight[pad_index] = 0.
    crit = nn.NLLLoss(weight=loss_weight, reduction='sum')
    return crit


def get_scheduler(optimizer, config):
    return optim.lr_scheduler.MultiStepLR(
        optimizer,
        milestones=[i for i in range(max(0, config.lr_decay_start - 1), (config.init_epoch - 1) + config.n_epochs, config.lr_step)],
        gamma=config.lr_gamma,
    )


def main(config):
    train_batches = make_batches(40, 0)
    valid_batches = make_batches(6, 1)
    model = Seq2Seq(VOCAB, config.word_vec_size, config.hidden_size, VOCAB, n_layers=config.n_layers, dropout_p=config.dropout)
    crit = get_crit(VOCAB, PAD)
    optimizer = optim.SGD(model.parameters(), lr=config.lr)
    lr_scheduler = get_scheduler(optimizer, config)
    trainer = MaximumLikelihoodEstimationEngine(model, crit, optimizer, lr_scheduler, config)
    trainer.run(train_batches, valid_batches, config.n_epochs)


if __name__ == '__main__':
    main(Config())
