# Source: something678/TodKat, src/DialogEvaluator_emory.py (DialogEvaluator), src/TodKat_emory.py (DialogTransformer.fit, evaluate, _eval_during_training, _get_scheduler), src/util.py (batch_to_device), commit e4a72adda3458224cc09ac91102a2d4bf952ffb4
# Report: https://github.com/something678/TodKat/issues/13
# Emotion recognition in conversation on EmoryNLP (7 emotions, 0 = Neutral): each dialogue's
# utterances are encoded, contextualised over the dialogue and classified; the loss and the
# evaluator flatten the padded dialogues with their lengths. The evaluator reports accuracy,
# a weighted F1 "with neutral" and micro F1 after every epoch. RoBERTa + topic model + COMET
# knowledge are replaced by an EmbeddingBag utterance encoder and a GRU over the dialogue;
# EmoryNLP by synthetic dialogues; transformers.AdamW by torch.optim.AdamW.
import csv
import logging
import os
import time

import numpy as np
import torch
import torch.nn as nn
from sklearn import metrics
from torch.nn import functional
from torch.utils.data import DataLoader, Dataset

logging.basicConfig(level=logging.INFO, format='%(message)s')
torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

NUM_LABELS = 7  # Neutral, Joyful, Peaceful, Powerful, Scared, Mad, Sad
VOCAB = 200


# ---------------------------------------------------------------- util.py
def batch_to_device(batch, target_device):
    features = []
    for i in range(len(batch)):
        features.append(batch[i].to(target_device))
    return features


# ---------------------------------------------------------------- synthetic EmoryNLP
class DialogDataset(Dataset):
    """Dialogues of 3-8 utterances; an utterance is 6 tokens: 2 cue tokens of its emotion among noise.
    Emotions are skewed like EmoryNLP (Neutral most frequent) and persist across turns."""

    def __init__(self, n, seed):
        rng = np.random.RandomState(seed)
        prior = np.array([0.40, 0.16, 0.08, 0.08, 0.10, 0.10, 0.08])
        self.dialogs = []
        for _ in range(n):
            length = rng.randint(3, 9)
            labels, tokens = [], []
            emo = rng.choice(NUM_LABELS, p=prior)
            for _ in range(length):
                if rng.rand() < 0.4:
                    emo = rng.choice(NUM_LABELS, p=prior)
                toks = list(rng.randint(NUM_LABELS * 10, VOCAB, size=6))
                n_cue = 2 if emo == 0 else rng.choice([0, 1, 2], p=[0.3, 0.4, 0.3])
                for j in range(n_cue):
                    toks[j] = emo * 10 + rng.randint(10)
                labels.append(emo)
                tokens.append(toks)
            self.dialogs.append((tokens, labels))

    def __len__(self):
        return len(self.dialogs)

    def __getitem__(self, idx):
        return self.dialogs[idx]


def collate(batch):
    max_len = max(len(labels) for _, labels in batch)
    tokens = torch.zeros(len(batch), max_len, 6, dtype=torch.long)
    labels = torch.zeros(len(batch), max_len, dtype=torch.long)
    lengths = torch.tensor([len(lab) for _, lab in batch])
    for i, (toks, lab) in enumerate(batch):
        tokens[i, :len(lab)] = torch.tensor(toks)
        labels[i, :len(lab)] = torch.tensor(lab)
    return [tokens, labels, lengths]


# ---------------------------------------------------------------- DialogEvaluator_emory.py
class DialogEvaluator:
    def __init__(self, dataloader, name="", device=None):
        self.dataloader = dataloader
        self.device = torch.device(device)
        self.name = name
        if name:
            name = "_" + name
        self.csv_file = "accuracy_evaluation" + name + "_results.csv"
        self.csv_headers = ["epoch", "steps", "accuracy"]

    def __call__(self, model, output_path=None, epoch=-1, steps=-1):
        model.eval()
        total = 0
        correct = 0

        if epoch != -1:
            if steps == -1:
                out_txt = " after epoch {}:".format(epoch)
            else:
                out_txt = " in epoch {} after {} steps:".format(epoch, steps)
        else:
            out_txt = ":"

        logging.info("Evaluation on the " + self.name + " dataset" + out_txt)
        pred_list = []
        grd_list = []
        for step, batch in enumerate(self.dataloader):
            features = batch_to_device(batch, self.device)
            with torch.no_grad():
                modeled_features = model(features)
            batch_uttrs = modeled_features[0]
            b_size, seq_size, emb_size = batch_uttrs.size()
            label_ids = modeled_features[1]
            lengths = modeled_features[2]

            softmaxed_uttrs = functional.softmax(batch_uttrs, dim=2)
            lst_softmaxed_uttrs = []
            lst_labels = []
            for i_dim in range(b_size):
                lst_softmaxed_uttrs.append(softmaxed_uttrs[
                    i_dim,
                    :lengths[i_dim],
                    :])
                lst_labels.append(label_ids[
                    i_dim,
                    :lengths[i_dim]])
            var_uttrs = torch.cat(lst_softmaxed_uttrs, dim=0)
            var_labels = torch.cat(lst_labels, dim=0)
            pred_list.extend(torch.argmax(var_uttrs, dim=1).tolist())
            grd_list.extend(var_labels.tolist())
            total += var_uttrs.size(0)
            correct += torch.argmax(var_uttrs, dim=1).eq(
                var_labels).sum().item()
        accuracy = correct / total

        logging.info("Accuracy: {:.4f} ({}/{})".format(
            accuracy, correct, total))
        macro_f1 = metrics.f1_score(
            pred_list,
            grd_list,
            labels=[1, 2, 3, 4, 5, 6],
            average='weighted')
        logging.info("Weighted F1-macro with neutral: {:.4f} ({}/{})".format(macro_f1, correct, total))
        micro_f1 = metrics.f1_score(
            pred_list,
            grd_list,
            labels=[0, 1, 2, 3, 4, 5, 6],
            average='micro')
        logging.info("F1-micro with neutral: {:.4f} ({}/{})".format(micro_f1, correct, total))

        if output_path is not None:
            csv_path = os.path.join(output_path, self.csv_file)
            if not os.path.isfile(csv_path):
                with open(csv_path, mode="w", encoding="utf-8") as f:
                    writer = csv.writer(f)
                    writer.writerow(self.csv_headers)
                    writer.writerow([epoch, steps, accuracy])
            else:
                with open(csv_path, mode="a", encoding="utf-8") as f:
                    writer = csv.writer(f)
                    writer.writerow([epoch, steps, accuracy])

        return accuracy


# ---------------------------------------------------------------- TodKat_emory.py (DialogTransformer)
class UtteranceEncoder(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.emb = nn.EmbeddingBag(VOCAB, dim, mode='mean')
        self.dim = dim

    def forward(self, features):
        tokens, labels, lengths = features
        b, s, t = tokens.shape
        uttrs = self.emb(tokens.view(b * s, t)).view(b, s, self.dim)
        return [uttrs, labels, lengths]


class DialogContext(nn.Module):
    def __init__(self, dim=32, hidden=32):
        super().__init__()
        self.gru = nn.GRU(dim, hidden, batch_first=True, bidirectional=True)
        self.LayerNorm = nn.LayerNorm(2 * hidden)
        self.classifier = nn.Linear(2 * hidden, NUM_LABELS)

    def forward(self, features):
        uttrs, labels, lengths = features
        ctx, _ = self.gru(uttrs)
        return [self.classifier(self.LayerNorm(ctx)), labels, lengths]


class DialogTransformer(nn.Sequential):
    def __init__(self, modules, device="cpu"):
        super().__init__(*modules)
        self.device = torch.device(device)
        self.to(self.device)

    def fit(self, train_objectives, evaluator, epochs=1, steps_per_epoch=None, scheduler='WarmupLinear',
            warmup_steps=10000, optimizer_class=torch.optim.AdamW,
            optimizer_params={'lr': 2e-5, 'eps': 1e-6}, weight_decay=0.01, evaluation_steps=0,
            output_path=None, save_best_model=True, max_grad_norm=1):
        if output_path is not None:
            os.makedirs(output_path, exist_ok=True)
        dataloaders = [dataloader for dataloader, _ in train_objectives]
        models = [model for _, model in train_objectives]
        device = self.device
        for amodel in models:
            amodel.to(device)
        self.best_score = -9999999

        if steps_per_epoch is None or steps_per_epoch == 0:
            steps_per_epoch = min([len(dataloader) for dataloader in dataloaders])
        num_train_steps = int(steps_per_epoch * epochs)

        optimizers = []
        schedulers = []
        for model in models:
            param_optimizer = list(model.named_parameters())
            no_decay = ['bias', 'LayerNorm.bias', 'LayerNorm.weight']
            optimizer_grouped_parameters = [
                {'params': [p for n, p in param_optimizer if not any(nd in n for nd in no_decay)], 'weight_decay': weight_decay},
                {'params': [p for n, p in param_optimizer if any(nd in n for nd in no_decay)], 'weight_decay': 0.0}
            ]
            t_total = num_train_steps
            optimizer = optimizer_class(optimizer_grouped_parameters, **optimizer_params)
            scheduler_obj = self._get_scheduler(optimizer, scheduler=scheduler, warmup_steps=warmup_steps,
                                                t_total=t_total)
            optimizers.append(optimizer)
            schedulers.append(scheduler_obj)

        global_step = 0
        data_iterators = [iter(dataloader) for dataloader in dataloaders]
        num_train_objectives = len(train_objectives)

        criterion = nn.CrossEntropyLoss()
        criterion.to(device)

        for epoch in range(epochs):
            training_steps = 0
            for model in models:
                model.zero_grad()
                model.train()

            for _ in range(steps_per_epoch):
                for train_idx in range(num_train_objectives):
                    model = models[train_idx]
                    optimizer = optimizers[train_idx]
                    scheduler = schedulers[train_idx]
                    data_iterator = data_iterators[train_idx]

                    try:
                        data = next(data_iterator)
                    except StopIteration:
                        data_iterator = iter(dataloaders[train_idx])
                        data_iterators[train_idx] = data_iterator
                        data = next(data_iterator)
                    features = batch_to_device(data, self.device)
                    tfboyed_features = model(features)

                    batched_uttrs = tfboyed_features[0]
                    batched_labels = tfboyed_features[1]
                    batched_lengths = tfboyed_features[2]
                    b_size, seq_size, emb_size = batched_uttrs.size()

                    lst_uttrs = []
                    lst_labels = []
                    for i_dim in range(b_size):
                        lst_uttrs.append(
                            batched_uttrs[
                                i_dim,
                                :batched_lengths[i_dim],
                                :])
                        lst_labels.append(
                            batched_labels[
                                i_dim,
                                :batched_lengths[i_dim]])
                    var_uttrs = torch.cat(lst_uttrs, dim=0)
                    var_labels = torch.cat(lst_labels, dim=0)
                    loss_value = criterion(
                        var_uttrs,
                        var_labels)

                    loss_value.backward()
                    torch.nn.utils.clip_grad_norm_(
                        model.parameters(),
                        max_grad_norm)
                    optimizer.step()
                    scheduler.step()
                    optimizer.zero_grad()

                training_steps += 1
                global_step += 1

                if evaluation_steps > 0 and training_steps % evaluation_steps == 0:
                    self._eval_during_training(evaluator, output_path, save_best_model, epoch, training_steps)
                    for model in models:
                        model.zero_grad()
                        model.train()
            self._eval_during_training(evaluator, output_path, save_best_model, epoch, -1)

    def evaluate(self, evaluator, output_path=None):
        if output_path is not None:
            os.makedirs(output_path, exist_ok=True)
        return evaluator(self, output_path)

    def _eval_during_training(self, evaluator, output_path, save_best_model, epoch, steps):
        if evaluator is not None:
            score = evaluator(self, output_path=output_path, epoch=epoch, steps=steps)
            if score > self.best_score and save_best_model:
                self.best_state = {k: v.clone() for k, v in self.state_dict().items()}
                self.best_score = score

    def _get_scheduler(self, optimizer, scheduler, warmup_steps, t_total):
        scheduler = scheduler.lower()
        if scheduler == 'constantlr':
            return torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
        elif scheduler == 'warmuplinear':
            def lr_lambda(step):
                if step < warmup_steps:
                    return float(step) / float(max(1, warmup_steps))
                return max(0.0, float(t_total - step) / float(max(1, t_total - warmup_steps)))
            return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)
        raise ValueError("Unknown scheduler {}".format(scheduler))


if __name__ == '__main__':
    t0 = time.time()
    train_data = DialogDataset(300, seed=0)
    test_data = DialogDataset(200, seed=1)
    train_dataloader = DataLoader(train_data, shuffle=True, batch_size=16, collate_fn=collate)
    test_dataloader = DataLoader(test_data, shuffle=False, batch_size=32, collate_fn=collate)

    model = DialogTransformer([UtteranceEncoder(), DialogContext()], device='cpu')
    evaluator = DialogEvaluator(test_dataloader, name='emorynlp', device='cpu')
    model.fit(train_objectives=[(train_dataloader, model)], evaluator=evaluator, epochs=6,
              warmup_steps=10, optimizer_params={'lr': 1e-2, 'eps': 1e-6}, evaluation_steps=0)
    model.load_state_dict(model.best_state)
    logging.info("Test with the best model (dev accuracy {:.4f})".format(model.best_score))
    model.evaluate(evaluator)
    logging.info("done in {:.1f}s".format(time.time() - t0))
