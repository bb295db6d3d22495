# Source: jinserk/pytorch-asr, asr/models/deepspeech_ctc/train.py, asr/models/deepspeech_ctc/network.py, asr/models/trainer.py, asr/utils/lr_scheduler.py, asr/utils/misc.py, commit 26b12981af942631b98afea83245448e5af55450
# https://github.com/jinserk/pytorch-asr
#
# DeepSpeech-style acoustic model trained with CTC (NonSplitTrainer): 3 strided conv blocks over (2*folding, 129,
# T) spectrogram images with an IN-PLACE Swish (x.mul_(sigmoid(x))) after BatchNorm, bidirectional LSTMs over
# packed sequences whose two directions are SUMMED, a SequenceWise BatchNorm1d+Linear head clipped by
# Hardtanh(-50, 50) and LogSoftmax; nn.CTCLoss(blank=0, reduction='mean') on (T, N, C) log-probs with the targets
# of the batch CONCATENATED into one 1-D tensor plus label_lens; a batch containing an utterance with
# frame_lens < 2*label_lens gets loss.mul_(0) but still goes through backward, clipping and optimizer.step();
# nan/inf losses skip the step; SGD(1e-2, momentum 0.9, wd 1e-4) with clip_grad_norm 0.1 ('sgdr' default) and a
# custom CosineAnnealingWithRestartsLR (T_max 5, T_mult 2) stepped at the START of every epoch, before any
# optimizer.step(); greedy CTC decoding (argmax, collapse repeats, drop blanks) for the label error rate.
# Adaptation: no Kaldi/torchnet/tqdm/Levenshtein/visdom/apex: 256 synthetic utterances (+64 held out) made of 2-6
# labels from a 10-symbol alphabet, each label a frequency-band pattern held for 4-8 frames, rendered as
# (4, 129, T) inputs (2 channels x input_folding 2) and collated longest-first (pack_padded_sequence needs sorted
# lengths); LatGenCTCDecoder -> greedy decoding with the repository's onehot2int/remove_duplicates and its numpy
# edit_distance; num_classes 177 -> 11, rnn_hidden_size 512 -> 64, rnn_num_layers [4] -> [2], batch 64 -> 16,
# num_epochs 200 -> 6; checkpoint/model saving and the meters/plots are dropped; the training loss is averaged
# per epoch instead of torchnet's MovingAverageValueMeter.
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.autograd import Variable
from torch.optim.lr_scheduler import _LRScheduler


class p:  # asr/utils/params.py
    NUM_CTC_LABELS = 11


# ---------------------------------------------------------------- asr/utils/misc.py
class Swish(nn.Module):

    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace

    def forward(self, x):
        if self.inplace:
            x.mul_(torch.sigmoid(x))
            return x
        else:
            return x * torch.sigmoid(x)


def onehot2int(onehot, dim=-1, keepdim=False):
    _, idx = onehot.topk(k=1, dim=dim)
    #idx = idx.squeeze()
    if idx.dim() == 0:
        return int(idx)
    else:
        return idx if keepdim else idx.squeeze(dim=dim)


def remove_duplicates(labels, blank=-1):
    p = -1
    for x in labels:
        if x != p:
            p = x
            if x != blank:
                yield x


def edit_distance(r, h):
    '''
    This function is to calculate the edit distance of reference sentence and the hypothesis sentence.
    Main algorithm used is dynamic programming.
    Attributes:
        r -> the list of words produced by splitting reference sentence.
        h -> the list of words produced by splitting hypothesis sentence.
    '''
    d = np.zeros((len(r)+1)*(len(h)+1), dtype=np.uint8).reshape((len(r)+1, len(h)+1))
    for i in range(len(r)+1):
        for j in range(len(h)+1):
            if i == 0:
                d[0][j] = j
            elif j == 0:
                d[i][0] = i
    for i in range(1, len(r)+1):
        for j in range(1, len(h)+1):
            if r[i-1] == h[j-1]:
                d[i][j] = d[i-1][j-1]
            else:
                substitute = d[i-1][j-1] + 1
                insert = d[i][j-1] + 1
                delete = d[i-1][j] + 1
                d[i][j] = min(substitute, insert, delete)
    return d


# ---------------------------------------------------------------- asr/utils/lr_scheduler.py
class CosineAnnealingWithRestartsLR(_LRScheduler):

    r"""Set the learning rate of each parameter group using a cosine annealing
    schedule, where :math:`\eta_{max}` is set to the initial lr and
    :math:`T_{cur}` is the number of epochs since the last restart in SGDR:

    .. math::

        \eta_t = \eta_{min} + \frac{1}{2}(\eta_{max} - \eta_{min})(1 +
        \cos(\frac{T_{cur}}{T_{max}}\pi))

    When last_epoch=-1, sets initial lr as lr.

    It has been proposed in
    `SGDR: Stochastic Gradient Descent with Warm Restarts`_. This implements
    the cosine annealing part of SGDR, the restarts and number of iterations multiplier.

    Args:
        optimizer (Optimizer): Wrapped optimizer.
        T_max (int): Maximum number of iterations.
        T_mult (float): Multiply T_max by this number after each restart. Default: 1.
        eta_min (float): Minimum learning rate. Default: 0.
        last_epoch (int): The index of last epoch. Default: -1.

    .. _SGDR\: Stochastic Gradient Descent with Warm Restarts:
        https://arxiv.org/abs/1608.03983
    """

    def __init__(self, optimizer, T_max, eta_min=0, last_epoch=-1, T_mult=1):
        self.T_max = T_max
        self.T_mult = T_mult
        self.restart_every = T_max
        self.eta_min = eta_min
        self.restarts = 0
        self.restarted_at = 0
        super().__init__(optimizer, last_epoch)

    def restart(self):
        self.restart_every *= self.T_mult
        self.restarted_at = self.last_epoch

    def cosine(self, base_lr):
        return self.eta_min + (base_lr - self.eta_min) * (1 + math.cos(math.pi * self.step_n / self.restart_every)) / 2

    @property
    def step_n(self):
        return self.last_epoch - self.restarted_at

    def get_lr(self):
        if self.step_n >= self.restart_every:
            self.restart()
        return [self.cosine(base_lr) for base_lr in self.base_lrs]

    def get_weight_decay(self):
        return [self.cosine(base_weight_decay) if base_weight_decay else None
                for base_weight_decay in self.base_weight_decays]



# ---------------------------------------------------------------- asr/models/deepspeech_ctc/network.py
class SequenceWise(nn.Module):

    def __init__(self, module):
        """
        Collapses input of dim T*N*H to (T*N)*H, and applies to a module.
        Allows handling of variable sequence lengths and minibatch sizes.
        :param module: Module to apply input to.
        """
        super().__init__()
        self.module = module

    def forward(self, x):
        t, n = x.size(0), x.size(1)
        x = x.view(t * n, -1)
        x = self.module(x)
        x = x.view(t, n, -1)
        return x

    def __repr__(self):
        tmpstr = self.__class__.__name__ + ' (\n'
        tmpstr += self.module.__repr__()
        tmpstr += ')'
        return tmpstr


class BatchRNN(nn.Module):

    def __init__(self, input_size, hidden_size, rnn_type=nn.LSTM, bidirectional=False,
                 batch_first=True, batch_norm=True):
        super().__init__()
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bidirectional = bidirectional
        self.batch_first = batch_first

        self.batch_norm = SequenceWise(nn.BatchNorm1d(input_size)) if batch_norm else None

        self.rnn = rnn_type(input_size=input_size, hidden_size=hidden_size,
                            bidirectional=bidirectional, batch_first=batch_first, bias=True)

    def flatten_parameters(self):
        self.rnn.flatten_parameters()

    def forward(self, x, seq_lens):
        if self.batch_norm is not None:
            x = self.batch_norm(x)
        ps = nn.utils.rnn.pack_padded_sequence(x, seq_lens.tolist(), batch_first=self.batch_first)
        ps, _ = self.rnn(ps)
        x, _ = nn.utils.rnn.pad_packed_sequence(ps, batch_first=self.batch_first)
        if self.bidirectional:
            x = x.view(x.size(0), x.size(1), 2, -1).sum(2).view(x.size(0), x.size(1), -1)  # (NxTxH*2) -> (NxTxH) by sum
        return x


class Lookahead(nn.Module):
    # Wang et al 2016 - Lookahead Convolution Layer for Unidirectional Recurrent Neural Networks
    # input shape - sequence, batch, feature - TxNxH
    # output shape - same as input

    def __init__(self, n_features, context):
        # should we handle batch_first=True?
        super().__init__()
        self.n_features = n_features
        self.weight = nn.Parameter(torch.Tensor(n_features, context + 1))
        assert context > 0
        self.context = context
        self.register_parameter('bias', None)
        self.init_parameters()

    def init_parameters(self):  # what's a better way initialiase this layer?
        stdv = 1. / math.sqrt(self.weight.size(1))
        self.weight.data.uniform_(-stdv, stdv)

    def forward(self, input):
        seq_len = input.size(0)
        # pad the 0th dimension (T/sequence) with zeroes whose number = context
        # Once pytorch's padding functions have settled, should move to those.
        padding = torch.zeros(self.context, *(input.size()[1:])).type_as(input.data)
        x = torch.cat((input, Variable(padding)), 0)

        # add lookahead windows (with context+1 width) as a fourth dimension
        # for each seq-batch-feature combination
        x = [x[i:i + self.context + 1] for i in range(seq_len)]  # TxLxNxH - sequence, context, batch, feature
        x = torch.stack(x)
        x = x.permute(0, 2, 3, 1)  # TxNxHxL - sequence, batch, feature, context

        x = torch.mul(x, self.weight).sum(dim=3)
        return x

    def __repr__(self):
        return self.__class__.__name__ + '(' \
               + 'n_features=' + str(self.n_features) \
               + ', context=' + str(self.context) + ')'


class DeepSpeech(nn.Module):

    def __init__(self, num_classes=p.NUM_CTC_LABELS, input_folding=3, rnn_type=nn.LSTM,
                 rnn_hidden_size=512, rnn_num_layers=[4], bidirectional=True, context=20):
        super().__init__()

        # model metadata needed for serialization/deserialization
        self._rnn_type = rnn_type
        self._hidden_size = rnn_hidden_size
        self._hidden_layers = rnn_num_layers
        self._bidirectional = bidirectional

        # Based on above convolutions and spectrogram size using conv formula (W - F + 2P)/ S+1
        W0 = 129
        C0 = 2 * input_folding
        W1 = (W0 - 41 + 2*20) // 2 + 1  # 65
        C1 = 16
        W2 = (W1 - 21 + 2*10) // 2 + 1  # 33
        C2 = C1 * 2
        W3 = (W2 - 11 + 2*5) // 2 + 1   # 17
        C3 = C2 * 2

        H0 = [C3 * W3, rnn_hidden_size, rnn_hidden_size]
        #W5 = 2 * rnn_hidden_size if bidirectional else rnn_hidden_size
        H1 = rnn_hidden_size

        self.conv = nn.Sequential(
            nn.Conv2d(C0, C1, kernel_size=(41, 5), stride=(2, 1), padding=(20, 2)),
            nn.BatchNorm2d(C1),
            #nn.Hardtanh(0, 20, inplace=True),
            #nn.ReLU(inplace=True),
            Swish(inplace=True),
            #nn.MaxPool2d(kernel_size=(3, 1), stride=(2, 1), padding=(1, 0)),
            nn.Conv2d(C1, C2, kernel_size=(21, 5), stride=(2, 1), padding=(10, 2)),
            nn.BatchNorm2d(C2),
            #nn.Hardtanh(0, 20, inplace=True)
            #nn.ReLU(inplace=True),
            Swish(inplace=True),
            #nn.MaxPool2d(kernel_size=(3, 1), stride=(2, 1), padding=(1, 0)),
            nn.Conv2d(C2, C3, kernel_size=(11, 5), stride=(2, 1), padding=(5, 2)),
            nn.BatchNorm2d(C3),
            #nn.Hardtanh(0, 20, inplace=True)
            #nn.ReLU(inplace=True),
            Swish(inplace=True),
            #nn.MaxPool2d(kernel_size=(3, 1), stride=(2, 1), padding=(1, 0)),
        )

        # using BatchRNN
        self.rnns = nn.ModuleList()
        for group in range(len(rnn_num_layers)):
            for layer in range(rnn_num_layers[group]):
                self.rnns.append(BatchRNN(input_size=(H0[group] if layer == 0 else rnn_hidden_size),
                                          hidden_size=rnn_hidden_size, rnn_type=rnn_type,
                                          bidirectional=bidirectional, batch_norm=True))

        # using multi-layered nn.LSTM
        #self.rnns = nn.LSTM(input_size=W4, hidden_size=rnn_hidden_size, num_layers=rnn_num_layers,
        #                    bidirectional=bidirectional, dropout=0)

        # using multi-layered LayerNorm LSTM
        #self.rnns = LSTM(input_size=W4, hidden_size=rnn_hidden_size, num_layers=4,
        #                 use_layernorm=True, bidirectional=bidirectional)

        self.lookahead = nn.Sequential(
            # consider adding batch norm?
            Lookahead(H1, context=context),
            #nn.Hardtanh(0, 20, inplace=True)
            #nn.ReLU(inplace=True),
            Swish(inplace=True)
        ) if not bidirectional else None

        fully_connected = nn.Sequential(
            nn.BatchNorm1d(H1),
            nn.Linear(H1, num_classes, bias=False),
            nn.Hardtanh(-50, 50, inplace=True),
        )
        self.fc = nn.Sequential(
            SequenceWise(fully_connected),
        )
        self.softmax = nn.LogSoftmax(dim=-1)

    def forward(self, x, seq_lens):
        x = self.conv(x)
        x = x.view(-1, x.size(1) * x.size(2), x.size(3))  # Collapse feature dimension
        x = x.transpose(1, 2).contiguous()  # NxTxH
        for i in range(self._hidden_layers[0]):
            x = self.rnns[i](x, seq_lens)
        for g in range(1, len(self._hidden_layers)):
            x = x[:, :((x.size(1) // 2) * 2), :].view(-1, x.size(1) // 2, 2, x.size(2))
            x = x.contiguous().view(-1, x.size(1) // 2, 2 * x.size(2))
            seq_lens.div_(2)
            for i in range(self._hidden_layers[g]):
                j = np.cumsum(self._hidden_layers)[g-1] + i
                x = self.rnns[j](x, seq_lens)
        #x, _ = self.rnns(x)
        if not self._bidirectional:  # no need for lookahead layer in bidirectional
            x = self.lookahead(x)
        x = self.fc(x)
        # identity in training mode, softmax in eval mode
        x = self.softmax(x)
        return x, seq_lens


# ---------------------------------------------------------------- asr/models/trainer.py (Trainer / NonSplitTrainer, CPU, no fp16/distributed)
class NonSplitTrainer:
    """training model for overall utterance spectrogram as a single image"""

    def __init__(self, model, init_lr=1e-2, max_norm=100, use_cuda=False, fp16=False, opt_type=None, **kwargs):
        # training parameters
        self.init_lr = init_lr
        self.max_norm = max_norm
        self.use_cuda = use_cuda
        self.fp16 = fp16
        self.opt_type = opt_type
        self.epoch = 0

        # setup model
        self.model = model

        # setup loss
        loss = kwargs.get('loss', None)
        self.loss = (nn.CTCLoss(blank=0, reduction='mean') if loss is None
                     else loss)

        # setup optimizer
        self.optimizer = None
        self.lr_scheduler = None
        if opt_type is not None:
            parameters = self.model.parameters()
            if opt_type == "sgdr":
                self.optimizer = torch.optim.SGD(parameters, lr=self.init_lr, momentum=0.9, weight_decay=1e-4)
                #self.lr_scheduler = torch.optim.lr_scheduler.StepLR(self.optimizer, step_size=1, gamma=0.5)
                self.lr_scheduler = CosineAnnealingWithRestartsLR(self.optimizer, T_max=5, T_mult=2)

    def train_epoch(self, data_loader):
        self.model.train()
        losses = []

        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
            print(f"current lr = {self.optimizer.param_groups[0]['lr']:.3e}")

        for i, (data) in enumerate(data_loader):
            loss_value = self.unit_train(data)
            if loss_value is not None:
                losses.append(loss_value)

        self.epoch += 1
        print(f"epoch {self.epoch:03d}: training loss {np.mean(losses):5.3f} ")
        return float(np.mean(losses))

    def unit_train(self, data):
        xs, ys, frame_lens, label_lens, filenames, _ = data
        try:
            batch_size = xs.size(0)
            if self.use_cuda:
                xs = xs.cuda(non_blocking=True)
            ys_hat, frame_lens = self.model(xs, frame_lens)
            if self.fp16:
                ys_hat = ys_hat.float()
            ys_hat = ys_hat.transpose(0, 1).contiguous()  # TxNxH
            #torch.set_printoptions(threshold=5000000)
            #print(ys_hat.shape, frame_lens, ys.shape, label_lens)
            #print(onehot2int(ys_hat).squeeze(), ys)
            loss = self.loss(ys_hat, ys, frame_lens, label_lens)
            if torch.isnan(loss) or loss.item() == float("inf") or loss.item() == -float("inf"):
                print("received an nan/inf loss: probably frame_lens < label_lens or the learning rate is too high")
                #raise RuntimeError
                return None
            if frame_lens.cpu().lt(2*label_lens).nonzero().numel():
                print("the batch includes a data with frame_lens < 2*label_lens: set loss to zero")
                loss.mul_(0)
            loss_value = loss.item()
            self.optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(self.model.parameters(), self.max_norm)
            self.optimizer.step()
            del loss
            return loss_value
        except Exception as e:
            print(e)
            print(filenames, frame_lens, label_lens)
            raise

    def unit_validate(self, data):
        xs, ys, frame_lens, label_lens, filenames, _ = data
        ys_hat, frame_lens = self.model(xs, frame_lens)
        # convert likes to ctc labels
        hyps = [onehot2int(yh[:s]).squeeze() for yh, s in zip(ys_hat, frame_lens)]
        hyps = [remove_duplicates(h, blank=0) for h in hyps]
        # slice the targets
        pos = torch.cat((torch.zeros((1, ), dtype=torch.long), torch.cumsum(label_lens, dim=0)))
        refs = [ys[s:l] for s, l in zip(pos[:-1], pos[1:])]
        return hyps, refs

    def edit_distance(self, refs, hyps):
        # Levenshtein on label strings in the repository; the repository's numpy DP (misc.edit_distance) here
        return sum(int(edit_distance(r.tolist(), [int(x) for x in h])[-1][-1]) for r, h in zip(refs, hyps))

    def validate(self, data_loader):
        "validate with label error rate by the edit distance between hyps and refs"
        self.model.eval()
        with torch.no_grad():
            N, D = 0, 0
            for i, (data) in enumerate(data_loader):
                hyps, refs = self.unit_validate(data)
                # calculate ler
                N += self.edit_distance(refs, hyps)
                D += sum(len(r) for r in refs)
                ler = N * 100. / D
            print(f"validating at epoch {self.epoch:03d}: LER {ler:.2f} %")
        return ler


# ---------------------------------------------------------------- synthetic corpus and collate (asr/utils/dataset.py, dataloader.py stand-ins)
def make_utterances(n, rng, num_labels=10, W0=129):
    bands = np.linspace(8, W0 - 8, num_labels + 1).astype(int)
    items = []
    for k in range(n):
        labels = rng.randint(1, num_labels + 1, size=rng.randint(2, 7))
        frames = []
        for lab in labels:
            dur = rng.randint(4, 9)
            spec = 0.1 * rng.randn(dur + 1, 2, W0)
            spec[:dur, :, bands[lab - 1]:bands[lab - 1] + 8] += 1.5
            frames.append(spec)
        spec = np.concatenate(frames, 0)  # T x 2 x W0
        T = len(spec) // 2 * 2
        folded = spec[:T].reshape(T // 2, 2, 2, W0).transpose(1, 2, 3, 0).reshape(4, W0, T // 2)  # input_folding=2
        items.append((torch.tensor(folded, dtype=torch.float32), torch.tensor(labels, dtype=torch.long), f"utt{k:04d}"))
    return items


def collate(batch):
    batch = sorted(batch, key=lambda b: b[0].shape[-1], reverse=True)
    T = batch[0][0].shape[-1]
    xs = torch.stack([F.pad(x, (0, T - x.shape[-1])) for x, _, _ in batch])
    ys = torch.cat([y for _, y, _ in batch])
    frame_lens = torch.tensor([x.shape[-1] for x, _, _ in batch], dtype=torch.int)
    label_lens = torch.tensor([len(y) for _, y, _ in batch], dtype=torch.int)
    return xs, ys, frame_lens, label_lens, [f for _, _, f in batch], None


def main():
    torch.manual_seed(0)
    rng = np.random.RandomState(0)
    train_items, dev_items = make_utterances(256, rng), make_utterances(64, rng)

    input_folding = 2
    model = DeepSpeech(num_classes=p.NUM_CTC_LABELS, input_folding=input_folding, rnn_hidden_size=64, rnn_num_layers=[2])
    trainer = NonSplitTrainer(model, init_lr=1e-2, max_norm=0.1, opt_type="sgdr")

    dev_loader = [collate(dev_items[i:i + 16]) for i in range(0, len(dev_items), 16)]
    ler0 = trainer.validate(dev_loader)
    losses = []
    for epoch in range(6):
        order = rng.permutation(len(train_items))
        train_loader = [collate([train_items[j] for j in order[i:i + 16]]) for i in range(0, len(order), 16)]
        losses.append(trainer.train_epoch(train_loader))
        ler = trainer.validate(dev_loader)
    print(f"[summary] dev LER first={ler0:.2f} last={ler:.2f} train_ctc first={losses[0]:.3f} last={losses[-1]:.3f} decreased={ler < ler0}")


if __name__ == "__main__":
    torch.set_num_threads(1)
    main()
