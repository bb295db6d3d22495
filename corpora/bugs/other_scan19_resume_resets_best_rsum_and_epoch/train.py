# Source: kuanghuei/SCAN, train.py (main, train, validate, save_checkpoint, adjust_learning_rate), model.py (SCAN, EncoderImagePrecomp, EncoderText, func_attention, xattn_score_t2i, ContrastiveLoss), commit 006a2e515ee149237455854940d1207cd28546b4
# Report: https://github.com/kuanghuei/SCAN/pull/19
# SCAN (stacked cross attention, text-to-image) for image-text matching: precomputed region
# features -> linear + l2norm, captions -> embedding + GRU + l2norm, t2i cross attention with
# LogSumExp pooling, hinge contrastive loss with hardest negatives, Adam with a step decay of
# the lr every lr_update epochs, R@K sum (rsum) on the validation set selects model_best.
# A first run trains 4 epochs and is stopped; a second run resumes from its last checkpoint to
# finish the 8 epochs. Region features and captions are synthetic (each image holds a few
# concepts; its caption names them); 1 caption per image, tensorboard logging removed.
import os
import shutil
import tempfile
from types import SimpleNamespace

import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.clip_grad import clip_grad_norm_
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence


def l2norm(X, dim, eps=1e-8):
    norm = torch.pow(X, 2).sum(dim=dim, keepdim=True).sqrt() + eps
    return torch.div(X, norm)


class EncoderImagePrecomp(nn.Module):
    def __init__(self, img_dim, embed_size):
        super().__init__()
        self.fc = nn.Linear(img_dim, embed_size)
        r = np.sqrt(6.) / np.sqrt(self.fc.in_features + self.fc.out_features)
        self.fc.weight.data.uniform_(-r, r)
        self.fc.bias.data.fill_(0)

    def forward(self, images):
        return l2norm(self.fc(images), dim=-1)


class EncoderText(nn.Module):
    def __init__(self, vocab_size, word_dim, embed_size, num_layers):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, word_dim)
        self.rnn = nn.GRU(word_dim, embed_size, num_layers, batch_first=True)
        self.embed.weight.data.uniform_(-0.1, 0.1)

    def forward(self, x, lengths):
        x = self.embed(x)
        packed = pack_padded_sequence(x, lengths, batch_first=True, enforce_sorted=False)
        out, _ = self.rnn(packed)
        cap_emb, cap_len = pad_packed_sequence(out, batch_first=True)
        return l2norm(cap_emb, dim=-1), cap_len


def func_attention(query, context, smooth):
    batch_size, queryL, sourceL = context.size(0), query.size(1), context.size(1)
    attn = torch.bmm(context, torch.transpose(query, 1, 2))
    attn = nn.LeakyReLU(0.1)(attn)
    attn = l2norm(attn, 2)
    attn = torch.transpose(attn, 1, 2).contiguous().view(batch_size * queryL, sourceL)
    attn = torch.softmax(attn * smooth, dim=1).view(batch_size, queryL, sourceL)
    attnT = torch.transpose(attn, 1, 2).contiguous()
    weightedContext = torch.bmm(torch.transpose(context, 1, 2), attnT)
    return torch.transpose(weightedContext, 1, 2), attnT


def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    w12 = torch.sum(x1 * x2, dim)
    return (w12 / (torch.norm(x1, 2, dim) * torch.norm(x2, 2, dim)).clamp(min=eps)).squeeze()


def xattn_score_t2i(images, captions, cap_lens, opt):
    similarities = []
    n_image = images.size(0)
    for i in range(captions.size(0)):
        n_word = int(cap_lens[i])
        cap_i_expand = captions[i, :n_word, :].unsqueeze(0).contiguous().repeat(n_image, 1, 1)
        weiContext, attn = func_attention(cap_i_expand, images, smooth=opt.lambda_softmax)
        row_sim = cosine_similarity(cap_i_expand, weiContext, dim=2).view(n_image, n_word)
        row_sim = row_sim.mul(opt.lambda_lse).exp()
        row_sim = torch.log(row_sim.sum(dim=1, keepdim=True)) / opt.lambda_lse
        similarities.append(row_sim)
    return torch.cat(similarities, 1)


class ContrastiveLoss(nn.Module):
    def __init__(self, opt, margin=0, max_violation=False):
        super().__init__()
        self.opt, self.margin, self.max_violation = opt, margin, max_violation

    def forward(self, im, s, s_l):
        scores = xattn_score_t2i(im, s, s_l, self.opt)
        diagonal = scores.diag().view(im.size(0), 1)
        cost_s = (self.margin + scores - diagonal.expand_as(scores)).clamp(min=0)
        cost_im = (self.margin + scores - diagonal.t().expand_as(scores)).clamp(min=0)
        mask = torch.eye(scores.size(0)) > .5
        cost_s = cost_s.masked_fill_(mask, 0)
        cost_im = cost_im.masked_fill_(mask, 0)
        if self.max_violation:
            cost_s = cost_s.max(1)[0]
            cost_im = cost_im.max(0)[0]
        return cost_s.sum() + cost_im.sum()


class SCAN(object):
    def __init__(self, opt):
        self.grad_clip = opt.grad_clip
        self.img_enc = EncoderImagePrecomp(opt.img_dim, opt.embed_size)
        self.txt_enc = EncoderText(opt.vocab_size, opt.word_dim, opt.embed_size, opt.num_layers)
        self.criterion = ContrastiveLoss(opt=opt, margin=opt.margin, max_violation=opt.max_violation)
        params = list(self.txt_enc.parameters())
        params += list(self.img_enc.fc.parameters())
        self.params = params
        self.optimizer = torch.optim.Adam(params, lr=opt.learning_rate)
        self.Eiters = 0

    def state_dict(self):
        return [self.img_enc.state_dict(), self.txt_enc.state_dict()]

    def load_state_dict(self, state_dict):
        self.img_enc.load_state_dict(state_dict[0])
        self.txt_enc.load_state_dict(state_dict[1])

    def train_start(self):
        self.img_enc.train()
        self.txt_enc.train()

    def val_start(self):
        self.img_enc.eval()
        self.txt_enc.eval()

    def forward_emb(self, images, captions, lengths):
        img_emb = self.img_enc(images)
        cap_emb, cap_lens = self.txt_enc(captions, lengths)
        return img_emb, cap_emb, cap_lens

    def train_emb(self, images, captions, lengths):
        self.Eiters += 1
        img_emb, cap_emb, cap_lens = self.forward_emb(images, captions, lengths)
        self.optimizer.zero_grad()
        loss = self.criterion(img_emb, cap_emb, cap_lens)
        loss.backward()
        if self.grad_clip > 0:
            clip_grad_norm_(self.params, self.grad_clip)
        self.optimizer.step()
        return loss.item()


def make_pairs(n, rng, concept_vecs, n_regions=6, max_words=8):
    images = np.zeros((n, n_regions, concept_vecs.shape[1]), np.float32)
    captions = np.zeros((n, max_words), np.int64)
    lengths = np.zeros(n, np.int64)
    for k in range(n):
        concepts = rng.choice(len(concept_vecs), size=3, replace=False)
        for r in range(n_regions):
            images[k, r] = concept_vecs[concepts[r % 3]] + rng.normal(0, 0.6, concept_vecs.shape[1])
        words = list(concepts) + list(rng.choice(len(concept_vecs), size=rng.randint(1, 5)))
        rng.shuffle(words)
        lengths[k] = len(words)
        captions[k, :len(words)] = words
    return torch.from_numpy(images), torch.from_numpy(captions), torch.from_numpy(lengths)


def batches(data, batch_size, shuffle, rng):
    n = len(data[0])
    order = rng.permutation(n) if shuffle else np.arange(n)
    for s in range(0, n, batch_size):
        idx = torch.from_numpy(order[s:s + batch_size])
        yield data[0][idx], data[1][idx], data[2][idx]


def i2t_t2i_recalls(sims):
    n = sims.shape[0]
    ranks_i2t = np.array([np.where(np.argsort(sims[i])[::-1] == i)[0][0] for i in range(n)])
    ranks_t2i = np.array([np.where(np.argsort(sims[:, i])[::-1] == i)[0][0] for i in range(n)])
    r = [100.0 * (ranks_i2t < k).mean() for k in (1, 5, 10)]
    ri = [100.0 * (ranks_t2i < k).mean() for k in (1, 5, 10)]
    return r, ri


def validate(opt, val_data, model):
    model.val_start()
    with torch.no_grad():
        img_embs, cap_embs, cap_lens = model.forward_emb(*val_data)
        sims = xattn_score_t2i(img_embs, cap_embs, cap_lens, opt).numpy()
    (r1, r5, r10), (r1i, r5i, r10i) = i2t_t2i_recalls(sims)
    return r1 + r5 + r10 + r1i + r5i + r10i


def save_checkpoint(state, is_best, filename='checkpoint.pth.tar', prefix=''):
    torch.save(state, prefix + filename)
    if is_best:
        shutil.copyfile(prefix + filename, prefix + 'model_best.pth.tar')


def adjust_learning_rate(opt, optimizer, epoch):
    lr = opt.learning_rate * (0.1 ** (epoch // opt.lr_update))
    for param_group in optimizer.param_groups:
        param_group['lr'] = lr


def train(opt, train_data, model, epoch, rng):
    losses = []
    for images, captions, lengths in batches(train_data, opt.batch_size, True, rng):
        model.train_start()
        losses.append(model.train_emb(images, captions, lengths))
    return float(np.mean(losses))


def main(opt, train_data, val_data):
    torch.manual_seed(opt.seed)
    rng = np.random.RandomState(opt.seed)
    model = SCAN(opt)

    if opt.resume:
        if os.path.isfile(opt.resume):
            print("=> loading checkpoint '{}'".format(os.path.basename(opt.resume)))
            checkpoint = torch.load(opt.resume, weights_only=False)
            start_epoch = checkpoint['epoch']
            best_rsum = checkpoint['best_rsum']
            model.load_state_dict(checkpoint['model'])
            model.Eiters = checkpoint['Eiters']
            print("=> loaded checkpoint '{}' (epoch {}, best_rsum {:.1f})"
                  .format(os.path.basename(opt.resume), start_epoch, best_rsum))
            validate(opt, val_data, model)
        else:
            print("=> no checkpoint found at '{}'".format(opt.resume))

    best_rsum = 0
    for epoch in range(opt.num_epochs):
        adjust_learning_rate(opt, model.optimizer, epoch)
        loss = train(opt, train_data, model, epoch, rng)
        rsum = validate(opt, val_data, model)
        is_best = rsum > best_rsum
        best_rsum = max(rsum, best_rsum)
        print("Epoch {} lr {:.1e} loss {:.3f} rsum {:.1f} best_rsum {:.1f}{} (Eiters {})".format(
            epoch, model.optimizer.param_groups[0]['lr'], loss, rsum, best_rsum,
            " -> model_best" if is_best else "", model.Eiters))
        if not os.path.exists(opt.model_name):
            os.mkdir(opt.model_name)
        save_checkpoint({
            'epoch': epoch + 1,
            'model': model.state_dict(),
            'best_rsum': best_rsum,
            'Eiters': model.Eiters,
        }, is_best, filename='checkpoint_{}.pth.tar'.format(epoch), prefix=opt.model_name + '/')
    return model


if __name__ == '__main__':
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    concept_vecs = rng.normal(0, 1, size=(30, 32)).astype(np.float32)
    train_data = make_pairs(128, rng, concept_vecs)
    val_data = make_pairs(40, rng, concept_vecs)
    with tempfile.TemporaryDirectory() as tmp:
        opt = SimpleNamespace(margin=0.2, num_epochs=4, batch_size=32, word_dim=32, embed_size=32,
                              grad_clip=2., num_layers=1, learning_rate=5e-3, lr_update=3, img_dim=32,
                              vocab_size=30, lambda_lse=6., lambda_softmax=9., max_violation=True,
                              resume='', model_name=os.path.join(tmp, 'checkpoint'), seed=0)
        print("-- run 1 (stopped after 4 of 8 epochs)")
        main(opt, train_data, val_data)
        print("-- run 2 (--resume checkpoint_3.pth.tar, --num_epochs 8)")
        opt.num_epochs, opt.seed = 8, 1
        opt.resume = os.path.join(opt.model_name, 'checkpoint_3.pth.tar')
        model = main(opt, train_data, val_data)
        best = torch.load(os.path.join(opt.model_name, 'model_best.pth.tar'), weights_only=False)
        model.load_state_dict(best['model'])
        print("model_best.pth.tar: saved after epoch index {}, Eiters {}, val rsum {:.1f}".format(
            best['epoch'] - 1, best['Eiters'], validate(opt, val_data, model)))
