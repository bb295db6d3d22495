# Source: fartashf/vsepp, model.py (l2norm, EncoderImagePrecomp, EncoderText, cosine_sim, ContrastiveLoss, VSE), data.py (collate_fn), evaluation.py (encode_data, evalrank, i2t, t2i), commit 7f8ffd55bf4c5f195fcae543f9b8e242e665d839
# Report: https://github.com/fartashf/vsepp/pull/43
# VSE++ image-caption retrieval: precomputed image features -> fc + l2norm, captions -> embedding +
# GRU (last valid step) + l2norm, hinge-based contrastive loss with hardest negatives
# (max_violation), Adam with gradient clipping, then evalrank(fold5=True): recall@1/5/10, median and
# mean rank for image->text and text->image on each of 5 folds and the mean metrics over folds.
# COCO precomputed features and captions are replaced by synthetic image features and token
# sequences generated from a shared latent; folds have 40 images (5000 in COCO), CUDA is removed.
import numpy as np
import torch
import torch.nn as nn
from torch.nn.utils.clip_grad import clip_grad_norm_
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)
numpy = np


def l2norm(X):
    norm = torch.pow(X, 2).sum(dim=1, keepdim=True).sqrt()
    X = torch.div(X, norm)
    return X


class EncoderImagePrecomp(nn.Module):
    def __init__(self, img_dim, embed_size, use_abs=False, no_imgnorm=False):
        super(EncoderImagePrecomp, self).__init__()
        self.embed_size = embed_size
        self.no_imgnorm = no_imgnorm
        self.use_abs = use_abs
        self.fc = nn.Linear(img_dim, embed_size)
        self.init_weights()

    def init_weights(self):
        r = np.sqrt(6.) / np.sqrt(self.fc.in_features + self.fc.out_features)
        self.fc.weight.data.uniform_(-r, r)
        self.fc.bias.data.fill_(0)

    def forward(self, images):
        features = self.fc(images)
        if not self.no_imgnorm:
            features = l2norm(features)
        if self.use_abs:
            features = torch.abs(features)
        return features


class EncoderText(nn.Module):
    def __init__(self, vocab_size, word_dim, embed_size, num_layers, use_abs=False):
        super(EncoderText, self).__init__()
        self.use_abs = use_abs
        self.embed_size = embed_size
        self.embed = nn.Embedding(vocab_size, word_dim)
        self.rnn = nn.GRU(word_dim, embed_size, num_layers, batch_first=True)
        self.init_weights()

    def init_weights(self):
        self.embed.weight.data.uniform_(-0.1, 0.1)

    def forward(self, x, lengths):
        x = self.embed(x)
        packed = pack_padded_sequence(x, lengths, batch_first=True)
        out, _ = self.rnn(packed)
        padded = pad_packed_sequence(out, batch_first=True)
        I = torch.LongTensor(lengths).view(-1, 1, 1)
        I = I.expand(x.size(0), 1, self.embed_size) - 1
        out = torch.gather(padded[0], 1, I).squeeze(1)
        out = l2norm(out)
        if self.use_abs:
            out = torch.abs(out)
        return out


def cosine_sim(im, s):
    return im.mm(s.t())


class ContrastiveLoss(nn.Module):
    def __init__(self, margin=0, measure=False, max_violation=False):
        super(ContrastiveLoss, self).__init__()
        self.margin = margin
        self.sim = cosine_sim
        self.max_violation = max_violation

    def forward(self, im, s):
        scores = self.sim(im, s)
        diagonal = scores.diag().view(im.size(0), 1)
        d1 = diagonal.expand_as(scores)
        d2 = diagonal.t().expand_as(scores)
        cost_s = (self.margin + scores - d1).clamp(min=0)
        cost_im = (self.margin + scores - d2).clamp(min=0)
        mask = torch.eye(scores.size(0)) > .5
        cost_s = cost_s.masked_fill_(mask, 0)
        cost_im = cost_im.masked_fill_(mask, 0)
        if self.max_violation:
            cost_s = cost_s.max(1)[0]
            cost_im = cost_im.max(0)[0]
        return cost_s.sum() + cost_im.sum()


class VSE(object):
    def __init__(self, opt):
        self.grad_clip = opt.grad_clip
        self.img_enc = EncoderImagePrecomp(opt.img_dim, opt.embed_size, use_abs=opt.use_abs, no_imgnorm=opt.no_imgnorm)
        self.txt_enc = EncoderText(opt.vocab_size, opt.word_dim, opt.embed_size, opt.num_layers, use_abs=opt.use_abs)
        self.criterion = ContrastiveLoss(margin=opt.margin, measure=opt.measure, max_violation=opt.max_violation)
        params = list(self.txt_enc.parameters())
        params += list(self.img_enc.fc.parameters())
        self.params = params
        self.optimizer = torch.optim.Adam(params, lr=opt.learning_rate)
        self.Eiters = 0

    def train_start(self):
        self.img_enc.train()
        self.txt_enc.train()

    def val_start(self):
        self.img_enc.eval()
        self.txt_enc.eval()

    def forward_emb(self, images, captions, lengths):
        img_emb = self.img_enc(images)
        cap_emb = self.txt_enc(captions, lengths)
        return img_emb, cap_emb

    def forward_loss(self, img_emb, cap_emb):
        loss = self.criterion(img_emb, cap_emb)
        self.loss_t = loss.item()
        return loss

    def train_emb(self, images, captions, lengths, ids=None):
        self.Eiters += 1
        img_emb, cap_emb = self.forward_emb(images, captions, lengths)
        self.optimizer.zero_grad()
        loss = self.forward_loss(img_emb, cap_emb)
        loss.backward()
        if self.grad_clip > 0:
            clip_grad_norm_(self.params, self.grad_clip)
        self.optimizer.step()


def make_split(n_images, rng, proj_img, proj_tok, opt):
    """Each image has 5 captions; image features and caption tokens share a latent code."""
    z = rng.normal(0, 1, (n_images, 16))
    feats = z @ proj_img + 0.3 * rng.normal(0, 1, (n_images, opt.img_dim))
    feats = feats / np.linalg.norm(feats, axis=1, keepdims=True)
    items = []
    for i in range(n_images):
        for c in range(5):
            length = int(rng.integers(5, 11))
            logits = (z[i] @ proj_tok)[None, :] + 1.5 * rng.gumbel(size=(length, opt.vocab_size))
            items.append((feats[i].astype(np.float32), logits.argmax(1)))
    return items  # ordered: 5 captions of image i at 5i..5i+4


def collate_fn(data):
    data.sort(key=lambda x: len(x[1]), reverse=True)
    images, captions, ids = zip(*data)
    images = torch.stack([torch.from_numpy(im) for im in images], 0)
    lengths = [len(cap) for cap in captions]
    targets = torch.zeros(len(captions), max(lengths)).long()
    for i, cap in enumerate(captions):
        targets[i, :lengths[i]] = torch.from_numpy(cap)
    return images, targets, lengths, list(ids)


def batches(items, batch_size, shuffle, rng):
    order = rng.permutation(len(items)) if shuffle else np.arange(len(items))
    for b in range(0, len(items), batch_size):
        yield collate_fn([(items[i][0], items[i][1], int(i)) for i in order[b:b + batch_size]])


def encode_data(model, items, batch_size, rng):
    model.val_start()
    img_embs = None
    cap_embs = None
    with torch.no_grad():
        for images, captions, lengths, ids in batches(items, batch_size, False, rng):
            img_emb, cap_emb = model.forward_emb(images, captions, lengths)
            if img_embs is None:
                img_embs = np.zeros((len(items), img_emb.size(1)))
                cap_embs = np.zeros((len(items), cap_emb.size(1)))
            img_embs[ids] = img_emb.numpy().copy()
            cap_embs[ids] = cap_emb.numpy().copy()
    return img_embs, cap_embs


def i2t(images, captions, npts=None, measure='cosine', return_ranks=False):
    if npts is None:
        npts = images.shape[0] // 5
    ranks = numpy.zeros(npts)
    top1 = numpy.zeros(npts)
    for index in range(npts):
        im = images[5 * index].reshape(1, images.shape[1])
        d = numpy.dot(im, captions.T).flatten()
        inds = numpy.argsort(d)[::-1]
        rank = 1e20
        for i in range(5 * index, 5 * index + 5, 1):
            tmp = numpy.where(inds == i)[0][0]
            if tmp < rank:
                rank = tmp
        ranks[index] = rank
        top1[index] = inds[0]
    r1 = 100.0 * len(numpy.where(ranks < 1)[0]) / len(ranks)
    r5 = 100.0 * len(numpy.where(ranks < 5)[0]) / len(ranks)
    r10 = 100.0 * len(numpy.where(ranks < 10)[0]) / len(ranks)
    medr = numpy.floor(numpy.median(ranks)) + 1
    meanr = ranks.mean() + 1
    if return_ranks:
        return (r1, r5, r10, medr, meanr), (ranks, top1)
    return (r1, r5, r10, medr, meanr)


def t2i(images, captions, npts=None, measure='cosine', return_ranks=False):
    if npts is None:
        npts = images.shape[0] // 5
    ims = numpy.array([images[i] for i in range(0, len(images), 5)])
    ranks = numpy.zeros(5 * npts)
    top1 = numpy.zeros(5 * npts)
    for index in range(npts):
        queries = captions[5 * index:5 * index + 5]
        d = numpy.dot(queries, ims.T)
        inds = numpy.zeros(d.shape)
        for i in range(len(inds)):
            inds[i] = numpy.argsort(d[i])[::-1]
            ranks[5 * index + i] = numpy.where(inds[i] == index)[0][0]
            top1[5 * index + i] = inds[i][0]
    r1 = 100.0 * len(numpy.where(ranks < 1)[0]) / len(ranks)
    r5 = 100.0 * len(numpy.where(ranks < 5)[0]) / len(ranks)
    r10 = 100.0 * len(numpy.where(ranks < 10)[0]) / len(ranks)
    medr = numpy.floor(numpy.median(ranks)) + 1
    meanr = ranks.mean() + 1
    if return_ranks:
        return (r1, r5, r10, medr, meanr), (ranks, top1)
    return (r1, r5, r10, medr, meanr)


def evalrank(model, items, opt, rng, fold_images=40):
    img_embs, cap_embs = encode_data(model, items, opt.batch_size, rng)
    print('Images: %d, Captions: %d' % (img_embs.shape[0] / 5, cap_embs.shape[0]))
    n = 5 * fold_images
    results = []
    for i in range(5):
        r, rt0 = i2t(img_embs[i * n:(i + 1) * n], cap_embs[i * n:(i + 1) * n], measure=opt.measure, return_ranks=True)
        print("Image to text: %.1f, %.1f, %.1f, %.1f, %.1f" % r)
        ri, rti0 = t2i(img_embs[i * n:(i + 1) * n], cap_embs[i * n:(i + 1) * n], measure=opt.measure, return_ranks=True)
        print("Text to image: %.1f, %.1f, %.1f, %.1f, %.1f" % ri)
        ar = (r[0] + r[1] + r[2]) / 3
        ari = (ri[0] + ri[1] + ri[2]) / 3
        rsum = r[0] + r[1] + r[2] + ri[0] + ri[1] + ri[2]
        print("rsum: %.1f ar: %.1f ari: %.1f" % (rsum, ar, ari))
        results += [list(r) + list(ri) + [ar, ari, rsum]]

    print("-----------------------------------")
    print("Mean metrics: ")
    mean_metrics = tuple(np.array(results).mean(axis=0).flatten())
    print("rsum: %.1f" % (mean_metrics[10] * 6))
    print("Average i2t Recall: %.1f" % mean_metrics[11])
    print("Image to text: %.1f %.1f %.1f %.1f %.1f" % mean_metrics[:5])
    print("Average t2i Recall: %.1f" % mean_metrics[12])
    print("Text to image: %.1f %.1f %.1f %.1f %.1f" % mean_metrics[5:10])


class Opt:
    img_dim = 64
    embed_size = 64
    word_dim = 32
    vocab_size = 50
    num_layers = 1
    margin = 0.2
    measure = 'cosine'
    max_violation = True
    use_abs = False
    no_imgnorm = False
    grad_clip = 2.
    learning_rate = 1e-3
    batch_size = 64
    num_epochs = 6


def main():
    opt = Opt()
    rng = np.random.default_rng(0)
    proj_img = rng.normal(0, 1, (16, opt.img_dim))
    proj_tok = rng.normal(0, 1, (16, opt.vocab_size))
    train_items = make_split(300, rng, proj_img, proj_tok, opt)
    test_items = make_split(200, rng, proj_img, proj_tok, opt)
    model = VSE(opt)
    for epoch in range(opt.num_epochs):
        model.train_start()
        for images, captions, lengths, ids in batches(train_items, opt.batch_size, True, rng):
            model.train_emb(images, captions, lengths, ids)
        print('Epoch: [%d]  Eit %d  Le %.4f' % (epoch, model.Eiters, model.loss_t))
    evalrank(model, test_items, opt, rng)


if __name__ == '__main__':
    main()
