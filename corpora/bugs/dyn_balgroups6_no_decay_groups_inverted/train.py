# Source: facebookresearch/BalancingGroups, models.py (get_bert_optim, BertWrapper, ERM), commit 1ac1b9db42c1c1a8c4cd2faa57194490140f6f05
# Report: https://github.com/facebookresearch/BalancingGroups/issues/6
# ERM on a text task (MultiNLI / CivilComments in the paper) with a BERT classifier,
# AdamW with a weight-decay and a no-decay parameter group and a linear LR schedule.
# bert-base-uncased is a small BertForSequenceClassification built from a config; the
# text is synthetic token sequences whose label depends on a "core" token, with a
# spurious token correlated with the label (groups = label x spurious).
import torch
from torch.utils.data import DataLoader, Dataset
from transformers import BertConfig, BertForSequenceClassification, get_scheduler


class TextDataset(Dataset):
    data_type = "text"

    def __init__(self, n=256, seq_len=16, vocab=120, seed=0):
        g = torch.Generator().manual_seed(seed)
        ids = torch.randint(10, vocab, (n, seq_len), generator=g)
        y = torch.randint(0, 2, (n,), generator=g)
        spu = torch.where(torch.rand(n, generator=g) < 0.9, y, 1 - y)
        ids[:, 0] = 2  # [CLS]
        ids[torch.arange(n), torch.randint(1, seq_len, (n,), generator=g)] = 3 + y
        ids[torch.arange(n), torch.randint(1, seq_len, (n,), generator=g)] = 5 + spu
        mask = torch.ones_like(ids)
        types = torch.zeros_like(ids)
        self.x = torch.stack([ids, mask, types], dim=2)
        self.y = y.tolist()
        self.g = spu.tolist()
        self.nb_groups = 2
        self.nb_labels = 2

    def __len__(self):
        return len(self.y)

    def __getitem__(self, i):
        return i, self.x[i], self.y[i], self.g[i]


class BertWrapper(torch.nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, x):
        return self.model(
            input_ids=x[:, :, 0],
            attention_mask=x[:, :, 1],
            token_type_ids=x[:, :, 2]).logits


def get_bert_optim(network, lr, weight_decay):
    no_decay = ["bias", "LayerNorm.weight"]
    decay_params = []
    nodecay_params = []
    for n, p in network.named_parameters():
        if any(nd in n for nd in no_decay):
            decay_params.append(p)
        else:
            nodecay_params.append(p)

    optimizer_grouped_parameters = [
        {
            "params": decay_params,
            "weight_decay": weight_decay,
        },
        {
            "params": nodecay_params,
            "weight_decay": 0.0,
        },
    ]
    optimizer = torch.optim.AdamW(
        optimizer_grouped_parameters,
        lr=lr,
        eps=1e-8)
    return optimizer


class ERM(torch.nn.Module):
    def __init__(self, hparams, dataloader):
        super().__init__()
        self.hparams = dict(hparams)
        dataset = dataloader.dataset
        self.n_batches = len(dataloader)
        self.data_type = dataset.data_type
        self.n_classes = len(set(dataset.y))
        self.n_groups = len(set(dataset.g))
        self.n_examples = len(dataset)
        self.last_epoch = 0
        self.init_model_(self.data_type, text_optim="adamw")

    def init_model_(self, data_type, text_optim="sgd"):
        self.clip_grad = text_optim == "adamw"
        config = BertConfig(vocab_size=128, hidden_size=32, num_hidden_layers=2,
                            num_attention_heads=2, intermediate_size=64,
                            max_position_embeddings=32, num_labels=self.n_classes)
        torch.manual_seed(0)
        self.network = BertWrapper(BertForSequenceClassification(config))
        self.network.zero_grad()
        self.optimizer = get_bert_optim(
            self.network,
            self.hparams['lr'],
            self.hparams['weight_decay'])

        num_training_steps = self.hparams["num_epochs"] * self.n_batches
        self.lr_scheduler = get_scheduler(
            "linear",
            optimizer=self.optimizer,
            num_warmup_steps=0,
            num_training_steps=num_training_steps)
        self.loss = torch.nn.CrossEntropyLoss(reduction="none")

    def compute_loss_value_(self, i, x, y, g, epoch):
        return self.loss(self.network(x), y).mean()

    def update(self, i, x, y, g, epoch):
        loss_value = self.compute_loss_value_(i, x, y, g, epoch)

        if loss_value is not None:
            self.optimizer.zero_grad()
            loss_value.backward()

            if self.clip_grad:
                torch.nn.utils.clip_grad_norm_(self.network.parameters(), 1.0)

            self.optimizer.step()

            if self.lr_scheduler is not None:
                self.lr_scheduler.step()

            if self.data_type == "text":
                self.network.zero_grad()

            loss_value = loss_value.item()

        self.last_epoch = epoch
        return loss_value

    def predict(self, x):
        return self.network(x)

    def accuracy(self, loader):
        nb_groups = loader.dataset.nb_groups
        nb_labels = loader.dataset.nb_labels
        corrects = torch.zeros(nb_groups * nb_labels)
        totals = torch.zeros(nb_groups * nb_labels)
        self.eval()
        with torch.no_grad():
            for i, x, y, g in loader:
                predictions = self.predict(x)
                predictions = predictions.argmax(1).eq(y).float()
                groups = (nb_groups * y + g)
                for gi in groups.unique():
                    corrects[gi] += predictions[groups == gi].sum()
                    totals[gi] += (groups == gi).sum()
        corrects, totals = corrects.tolist(), totals.tolist()
        self.train()
        return sum(corrects) / sum(totals),\
            [c/t for c, t in zip(corrects, totals)]


def main():
    hparams = {"lr": 5e-3, "weight_decay": 0.1, "num_epochs": 8, "batch_size": 32}
    tr = TextDataset(seed=0)
    va = TextDataset(seed=1)
    loader = DataLoader(tr, batch_size=hparams["batch_size"], shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    val_loader = DataLoader(va, batch_size=128)
    algorithm = ERM(hparams, loader)
    for epoch in range(hparams["num_epochs"]):
        losses = [algorithm.update(i, x, y, g, epoch) for i, x, y, g in loader]
        avg, per_group = algorithm.accuracy(val_loader)
        print("epoch {} loss {:.4f} val acc {:.3f} worst-group {:.3f}".format(
            epoch, sum(losses) / len(losses), avg, min(per_group)))
    groups = algorithm.optimizer.param_groups
    for k, grp in enumerate(groups):
        print("group {}: weight_decay={} tensors={} elements={}".format(
            k, grp["weight_decay"], len(grp["params"]), sum(p.numel() for p in grp["params"])))
    ln = [p for n, p in algorithm.network.named_parameters() if n.endswith("LayerNorm.weight")]
    mats = [p for n, p in algorithm.network.named_parameters() if p.dim() == 2]
    print("mean LayerNorm gamma {:.4f}  weight-matrix norm {:.2f}".format(
        torch.cat([p.detach() for p in ln]).mean().item(),
        torch.sqrt(sum((p.detach() ** 2).sum() for p in mats)).item()))


if __name__ == "__main__":
    main()
