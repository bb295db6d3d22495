# Source: so:75264251 (Stack Overflow question "NLP neural net validation accuracy increases too much (?) between folds in cross validation")
# Report: https://stackoverflow.com/questions/75264251
# BERT sentiment classifier (two labels) evaluated with 5-fold cross-validation: KFold over a
# pandas DataFrame, per fold a train / val DataLoader, AdamW with a linear warmup schedule,
# CrossEntropyLoss, train_epoch / eval_model for EPOCHS epochs and the per-fold accuracy
# matrices. The pretrained BERT encoder is replaced by a small token-embedding encoder with a
# dropout + linear head, the tweets by synthetic token sequences whose label depends on a few
# sentiment tokens (15% of the labels are noisy, as human labels are).
import numpy as np
import pandas as pd
import torch
import torch.nn as nn
from sklearn.model_selection import KFold
from torch.utils.data import DataLoader, Dataset

RANDOM_SEED = 42
np.random.seed(RANDOM_SEED)
torch.manual_seed(RANDOM_SEED)
torch.set_num_threads(1)

MAX_LEN = 24
BATCH_SIZE = 16
EPOCHS = 5
VOCAB = 3000
device = torch.device("cpu")
class_names = ["negative", "positive"]


def make_df(n=600):
    rng = np.random.RandomState(RANDOM_SEED)
    rows = []
    for _ in range(n):
        toks = rng.randint(10, VOCAB, size=MAX_LEN)
        score = rng.randn()
        k = rng.randint(1, 4)
        pos = rng.choice(MAX_LEN, size=k, replace=False)
        toks[pos] = np.where(score > 0, rng.randint(1, 5, size=k), rng.randint(5, 10, size=k))
        label = int(score > 0)
        if rng.rand() < 0.15:
            label = 1 - label
        rows.append({"content": toks, "sentiment": label})
    return pd.DataFrame(rows)


class ReviewDataset(Dataset):
    def __init__(self, reviews, targets):
        self.reviews = reviews
        self.targets = targets

    def __len__(self):
        return len(self.reviews)

    def __getitem__(self, item):
        return {
            "input_ids": torch.tensor(self.reviews[item], dtype=torch.long),
            "attention_mask": torch.ones(MAX_LEN, dtype=torch.long),
            "targets": torch.tensor(self.targets[item], dtype=torch.long),
        }


def create_data_loader(df, max_len, batch_size):
    ds = ReviewDataset(reviews=df.content.to_numpy(), targets=df.sentiment.to_numpy())
    return DataLoader(ds, batch_size=batch_size, num_workers=0)


class SentimentClassifier(nn.Module):
    def __init__(self, n_classes):
        super(SentimentClassifier, self).__init__()
        self.embed = nn.Embedding(VOCAB, 64)
        self.pool = nn.Sequential(nn.Linear(64, 64), nn.Tanh())
        self.drop = nn.Dropout(p=0.3)
        self.out = nn.Linear(64, n_classes)

    def forward(self, input_ids, attention_mask):
        h = self.embed(input_ids) * attention_mask.unsqueeze(-1)
        pooled_output = self.pool(h.sum(1) / attention_mask.sum(1, keepdim=True))
        output = self.drop(pooled_output)
        return self.out(output)


def get_linear_schedule_with_warmup(optimizer, num_warmup_steps, num_training_steps):
    def lr_lambda(current_step):
        if current_step < num_warmup_steps:
            return float(current_step) / float(max(1, num_warmup_steps))
        return max(0.0, float(num_training_steps - current_step) / float(max(1, num_training_steps - num_warmup_steps)))
    return torch.optim.lr_scheduler.LambdaLR(optimizer, lr_lambda)


def train_epoch(model, data_loader, loss_fn, optimizer, device, scheduler, n_examples):
    model = model.train()
    losses = []
    correct_predictions = 0
    for d in data_loader:
        input_ids = d["input_ids"].to(device)
        attention_mask = d["attention_mask"].to(device)
        targets = d["targets"].to(device)
        outputs = model(input_ids=input_ids, attention_mask=attention_mask)
        _, preds = torch.max(outputs, dim=1)
        loss = loss_fn(outputs, targets)
        correct_predictions += torch.sum(preds == targets)
        losses.append(loss.item())
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), max_norm=1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    return correct_predictions.double() / n_examples, np.mean(losses)


def eval_model(model, data_loader, loss_fn, device, n_examples):
    model = model.eval()
    losses = []
    correct_predictions = 0
    with torch.no_grad():
        for d in data_loader:
            input_ids = d["input_ids"].to(device)
            attention_mask = d["attention_mask"].to(device)
            targets = d["targets"].to(device)
            outputs = model(input_ids=input_ids, attention_mask=attention_mask)
            _, preds = torch.max(outputs, dim=1)
            loss = loss_fn(outputs, targets)
            correct_predictions += torch.sum(preds == targets)
            losses.append(loss.item())
    return correct_predictions.double() / n_examples, np.mean(losses)


def main():
    df = make_df()
    print(f"{len(df)} reviews, positive share {df.sentiment.mean():.2f}")

    model = SentimentClassifier(len(class_names))
    model = model.to(device)
    loss_fn = nn.CrossEntropyLoss().to(device)

    # Create K train/test folds
    n_folds = 5
    kf = KFold(n_splits=n_folds, random_state=RANDOM_SEED, shuffle=True)

    # Initialize matrix to store results across folds
    train_acc_mat = [[0 for _ in range(EPOCHS)] for _ in range(n_folds)]
    train_loss_mat = [[0 for _ in range(EPOCHS)] for _ in range(n_folds)]
    val_acc_mat = [[0 for _ in range(EPOCHS)] for _ in range(n_folds)]
    val_loss_mat = [[0 for _ in range(EPOCHS)] for _ in range(n_folds)]

    # Create fold index to store results in matrix
    fold_index = 1

    # Loop across folds
    for train_index, val_index in kf.split(df):
        df_train = df.iloc[train_index]
        df_val = df.iloc[val_index]

        # Run Data Loader function for each training data set - fold
        train_data_loader = create_data_loader(df_train, MAX_LEN, BATCH_SIZE)
        val_data_loader = create_data_loader(df_val, MAX_LEN, BATCH_SIZE)

        optimizer = torch.optim.AdamW(model.parameters(), lr=5e-3)
        total_steps = len(train_data_loader) * EPOCHS
        scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=0, num_training_steps=total_steps)

        for epoch in range(EPOCHS):
            train_acc, train_loss = train_epoch(model, train_data_loader, loss_fn, optimizer, device, scheduler, len(df_train))
            val_acc, val_loss = eval_model(model, val_data_loader, loss_fn, device, len(df_val))
            train_acc_mat[fold_index - 1][epoch] = train_acc.item()
            train_loss_mat[fold_index - 1][epoch] = train_loss
            val_acc_mat[fold_index - 1][epoch] = val_acc.item()
            val_loss_mat[fold_index - 1][epoch] = val_loss

        print(f"fold {fold_index}: {len(train_index)} train / {len(val_index)} val rows, "
              f"train acc {train_acc_mat[fold_index - 1][-1]:.3f}, val acc by epoch "
              + " ".join(f"{a:.3f}" for a in val_acc_mat[fold_index - 1]))
        fold_index += 1

    final = [row[-1] for row in val_acc_mat]
    print(f"cross-validated accuracy {np.mean(final):.3f} (per fold {' '.join(f'{a:.3f}' for a in final)})")


if __name__ == "__main__":
    main()
