# Source: shirley-wu/cross-doc-misinfo-detection, train.py (main loop, scheduler), utils.py (calc_metrics), commit 2208e00c24f81a2bb53524c88070350bcb05edcc
# Report: https://github.com/shirley-wu/cross-doc-misinfo-detection/issues/1
# Cross-document misinformation detection, doc-level task: a document encoder predicts
# real/fake per document (and an event-level head per event mention), trained with Adam,
# get_linear_schedule_with_warmup, gradient accumulation over accum_step micro-batches and
# gradient clipping; training / validation metrics logged once per epoch. The event-graph
# model over news clusters is reduced to a bag-of-embeddings encoder over synthetic token
# documents (vocabulary 300, 40 tokens) with doc and event heads; 6 epochs of 80 batches.
import numpy as np
import torch
import torch.nn as nn
from sklearn.metrics import accuracy_score, f1_score, roc_auc_score
from transformers import get_linear_schedule_with_warmup


def set_seed(seed):
    np.random.seed(seed)
    torch.manual_seed(seed)


def calc_metrics(labels, logits):
    logits = np.array(logits)
    probs = np.exp(logits - logits.max(1, keepdims=True))
    probs = probs / probs.sum(1, keepdims=True)
    preds = probs.argmax(1)
    return {"auc": roc_auc_score(labels, probs[:, 1]) if len(set(labels)) > 1 else 0.5,
            "acc": accuracy_score(labels, preds), "f1": f1_score(labels, preds)}


class DocModel(nn.Module):
    def __init__(self, vocab, dim=32, n_events=4):
        super().__init__()
        self.emb = nn.EmbeddingBag(vocab, dim, mode="mean")
        self.enc = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU())
        self.doc_head = nn.Linear(64, 2)
        self.event_head = nn.Linear(64 + dim, 2)
        self.n_events = n_events

    def forward(self, inputs):
        tokens, events, labels_d, labels_e = inputs
        h = self.enc(self.emb(tokens))
        logits_d = self.doc_head(h)
        ev = self.emb(events.view(-1, events.shape[-1]))
        logits_e = self.event_head(torch.cat([h.repeat_interleave(self.n_events, 0), ev], 1))
        return logits_d, labels_d, logits_e, labels_e.view(-1)


def build_dataloader(rng, n_docs, batch_size, vocab=300, length=40, n_events=4, shuffle=True):
    fake_words = rng.choice(vocab, 30, replace=False)
    tokens = rng.randint(vocab, size=(n_docs, length))
    labels_d = rng.randint(2, size=n_docs)
    labels_e = np.zeros((n_docs, n_events), dtype=np.int64)
    events = rng.randint(vocab, size=(n_docs, n_events, 6))
    for i in range(n_docs):
        if labels_d[i]:
            k = rng.randint(1, n_events + 1)
            labels_e[i, :k] = 1
            for j in range(k):
                events[i, j, :2] = rng.choice(fake_words, 2)
            tokens[i, :k * 2] = events[i, :k, :2].ravel()
    data = [torch.from_numpy(a) for a in (tokens, events, labels_d, labels_e)]

    def loader():
        order = rng.permutation(n_docs) if shuffle else np.arange(n_docs)
        for s in range(0, n_docs, batch_size):
            idx = order[s:s + batch_size]
            yield [d[idx] for d in data]
    loader.n_batches = (n_docs + batch_size - 1) // batch_size
    return loader


def eval_two_task(loader, model, loss_d_fn, loss_e_fn):
    model.eval()
    logits_d_all, labels_d_all, logits_e_all, labels_e_all, ld, le = [], [], [], [], [], []
    with torch.no_grad():
        for inputs in loader():
            logits_d, labels_d, logits_e, labels_e = model(inputs)
            ld.append(float(loss_d_fn(logits_d, labels_d)))
            le.append(float(loss_e_fn(logits_e, labels_e)))
            logits_d_all += logits_d.tolist()
            labels_d_all += labels_d.tolist()
            logits_e_all += logits_e.tolist()
            labels_e_all += labels_e.tolist()
    model.train()
    return (calc_metrics(labels_d_all, logits_d_all), np.mean(ld),
            calc_metrics(labels_e_all, logits_e_all), np.mean(le))


def main():
    args = dict(seed=42, lr=1e-3, batch_size=8, num_epochs=6, warmup=100, grad_clip=1.0, accum_step=2,
                event_detection_lambda=0.0, main_metric="auc")
    set_seed(args["seed"])
    rng = np.random.RandomState(args["seed"])
    dataloader_val = build_dataloader(rng, 160, args["batch_size"], shuffle=False)
    dataloader_train = build_dataloader(rng, 640, args["batch_size"])
    len_train = dataloader_train.n_batches
    model = DocModel(300)
    optimizer = torch.optim.Adam(model.parameters(), lr=args["lr"])
    scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=args["num_epochs"] * len_train,
                                                num_training_steps=args["warmup"])
    loss_d_fn = nn.CrossEntropyLoss(reduction="mean", weight=torch.FloatTensor([0.5, 0.5]))
    loss_e_fn = nn.CrossEntropyLoss(reduction="mean", weight=torch.FloatTensor([0.7, 0.3]))

    idx = 0
    for epoch in range(args["num_epochs"]):
        idx_at_epoch_start = idx
        logits_d_all, labels_d_all, losses_d = [], [], []
        loss_d_accum = 0.0
        lrs = []
        for inputs in dataloader_train():
            idx += 1
            logits_d, labels_d, logits_e, labels_e = model(inputs)
            loss_d = loss_d_fn(logits_d, labels_d)
            loss_e = loss_e_fn(logits_e, labels_e)
            loss = (1 - args["event_detection_lambda"]) * loss_d + args["event_detection_lambda"] * loss_e
            loss.backward()
            loss_d_accum += loss_d.item()
            logits_d_all += logits_d.tolist()
            labels_d_all += labels_d.tolist()

            if idx % args["accum_step"] == 0:
                if args["grad_clip"] > 0:
                    nn.utils.clip_grad_norm_(model.parameters(), args["grad_clip"])
                optimizer.step()
                scheduler.step()
                optimizer.zero_grad()
                lrs.append(optimizer.param_groups[0]["lr"])
                losses_d.append(loss_d_accum)
                loss_d_accum = 0.0

            if idx - idx_at_epoch_start == len_train - 1:
                m = calc_metrics(labels_d_all, logits_d_all)
                doc_val, doc_loss, _, _ = eval_two_task(dataloader_val, model, loss_d_fn, loss_e_fn)
                print("Epoch {:d} iter {:d}: train loss = {:.3f}, auc = {:.3f}, acc = {:.3f}; valid loss = {:.3f}, "
                      "auc = {:.3f}, acc = {:.3f} | lr min {:.2e} max {:.2e}".format(
                          epoch, idx, np.mean(losses_d), m["auc"], m["acc"], doc_loss * args["accum_step"],
                          doc_val["auc"], doc_val["acc"], min(lrs), max(lrs)))


if __name__ == "__main__":
    main()
