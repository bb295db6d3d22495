# Source: MinSong2/yonlu, bert/bert_trainer.py (PYBERTTrainer.train_epoch, eval_model, train), bert/bert_dataset.py (PYBERTDataset), bert/bert_util.py (create_data_loader), examples/bert_sentiment_trainer.py, commit af96a0886041ed281a070a24be1cf080a2c5e9e7
# Report: https://github.com/MinSong2/yonlu/pull/1
# yonlu's BERT sentiment trainer: BertForSequenceClassification fine-tuned with AdamW and a
# linear warmup schedule, gradient clipping at 1.0, training loss and accuracy printed every
# epoch and the validation accuracy deciding which model is kept. The Korean movie-review corpus
# and KoBERT are replaced by synthetic two-class reviews over a small word vocabulary, a
# whitespace tokenizer with the encode_plus call the dataset uses, and a 2-layer BERT built
# from a BertConfig (no download); the best model is kept in memory instead of on disk.
import copy
import datetime
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset
from transformers import BertConfig, BertForSequenceClassification, get_linear_schedule_with_warmup


class PYBERTDataset(Dataset):
    def __init__(self, contents, targets, tokenizer, max_len):
        super(PYBERTDataset, self).__init__()
        self.contents = contents
        self.targets = targets
        self.tokenizer = tokenizer
        self.max_len = max_len

    def __len__(self):
        return len(self.contents)

    def __getitem__(self, item):
        content = str(self.contents[item])
        target = self.targets[item]

        encoding = self.tokenizer.encode_plus(
            content,
            add_special_tokens=True,
            max_length=self.max_len,
            return_token_type_ids=True,
            pad_to_max_length=True,
            return_attention_mask=True,
            return_tensors='pt',
        )

        return {
            'document_text': content,
            'input_ids': encoding['input_ids'].flatten(),
            'token_type_ids': encoding['token_type_ids'].flatten(),
            'attention_mask': encoding['attention_mask'].flatten(),
            'targets': torch.tensor(target, dtype=torch.long)
        }


def create_data_loader(contents, sentiments, tokenizer, max_len, batch_size):
    ds = PYBERTDataset(
        contents=contents,
        targets=sentiments,
        tokenizer=tokenizer,
        max_len=max_len)

    return DataLoader(
        ds,
        batch_size=batch_size,
        num_workers=0
    )


class WhitespaceTokenizer:
    """Stands in for KoBertTokenizer: [CLS] words [SEP], padded to max_length."""
    pad_token_id, cls_token_id, sep_token_id = 0, 1, 2

    def __init__(self, vocab):
        self.vocab = {w: i + 3 for i, w in enumerate(vocab)}

    def encode_plus(self, text, add_special_tokens=True, max_length=None, return_token_type_ids=True,
                    pad_to_max_length=True, return_attention_mask=True, return_tensors='pt'):
        ids = [self.vocab[w] for w in text.split()][:max_length - 2]
        ids = [self.cls_token_id] + ids + [self.sep_token_id]
        mask = [1] * len(ids) + [0] * (max_length - len(ids))
        ids = ids + [self.pad_token_id] * (max_length - len(ids))
        return {'input_ids': torch.tensor([ids]), 'token_type_ids': torch.zeros(1, max_length, dtype=torch.long),
                'attention_mask': torch.tensor([mask])}


class PYBERTTrainer:
    def __init__(self):
        print('training model with BERT')

        # We'll store a number of quantities such as training and validation loss,
        # validation accuracy, and timings.
        self.training_stats = []
        self.best_state = None

    def format_time(self, elapsed):
        '''
        Takes a time in seconds and returns a string hh:mm:ss
        '''
        # Round to the nearest second.
        elapsed_rounded = int(round((elapsed)))

        # Format as hh:mm:ss
        return str(datetime.timedelta(seconds=elapsed_rounded))

    def train_epoch(self, model, data_loader, loss_fn, optimizer, device, scheduler, algorithm='transformers'):
        model = model.train()
        correct_predictions = 0.0
        # Reset the total loss for this epoch.
        total_train_loss = 0.0

        for d in data_loader:
            input_ids = d["input_ids"].to(device)
            attention_mask = d["attention_mask"].to(device)
            token_type_ids = d["token_type_ids"].to(device)
            targets = d["targets"].to(device)

            # Always clear any previously calculated gradients before performing a
            # backward pass.
            model.zero_grad()

            loss, logits = model(input_ids=input_ids,
                                 token_type_ids=token_type_ids,
                                 attention_mask=attention_mask,
                                 labels=targets, return_dict=False)

            pred = torch.argmax(F.softmax(logits, dim=1), dim=1)
            correct = pred.eq(targets)

            correct_predictions += correct.sum().item()

            # Accumulate the training loss over all of the batches so that we can
            # calculate the average loss at the end.
            total_train_loss += loss.item()

            # Perform a backward pass to calculate the gradients.
            loss.backward()

            # Clip the norm of the gradients to 1.0.
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)

            # Update parameters and take a step using the computed gradient.
            optimizer.step()

            # Update the learning rate.
            scheduler.step()

        avg_train_avg = float(correct_predictions) / float(len(data_loader))*10
        # Calculate the average loss over all of the batches.
        avg_train_loss = total_train_loss / len(data_loader)

        return avg_train_avg, avg_train_loss

    def flat_accuracy(self, preds, labels):
        '''
         # Function to calculate the accuracy of our predictions vs labels
        '''
        pred_flat = np.argmax(preds, axis=1).flatten()
        labels_flat = labels.flatten()
        return np.sum(pred_flat == labels_flat) / len(labels_flat)

    def eval_model(self, model, data_loader, loss_fn, device, algorithm='transformers'):
        model = model.eval()

        total_eval_accuracy = 0.0
        total_eval_loss = 0.0

        with torch.no_grad():
            for d in data_loader:
                input_ids = d["input_ids"].to(device)
                attention_mask = d["attention_mask"].to(device)
                targets = d["targets"].to(device)

                (loss, logits) = model(input_ids,
                                       token_type_ids=None,
                                       attention_mask=attention_mask,
                                       labels=targets, return_dict=False)

                # Accumulate the validation loss.
                total_eval_loss += loss.item()
                # Move logits and labels to CPU
                logits = logits.detach().cpu().numpy()
                label_ids = targets.to('cpu').numpy()

                # Calculate the accuracy for this batch of test sentences, and
                # accumulate it over all batches.
                total_eval_accuracy += self.flat_accuracy(logits, label_ids)

        # Report the final accuracy for this validation run.
        avg_val_accuracy = float(total_eval_accuracy) / float(len(data_loader))*10

        # Calculate the average loss over all of the batches.
        avg_val_loss = total_eval_loss / len(data_loader)

        return avg_val_accuracy, avg_val_loss

    def train(self, model, device, train_data_loader, val_data_loader, num_epochs=10, algorithm='transformers'):

        # Measure the total training time for the whole run.
        total_t0 = time.time()

        optimizer = torch.optim.AdamW(model.parameters(),
                                      lr=3e-3,
                                      eps=1e-8
                                      )

        total_steps = len(train_data_loader) * num_epochs

        # Create the learning rate scheduler.
        scheduler = get_linear_schedule_with_warmup(
            optimizer,
            num_warmup_steps=0,  # Default value in run_glue.py
            num_training_steps=total_steps
        )
        loss_fn = nn.CrossEntropyLoss().to(device)

        best_accuracy = 0

        for epoch in range(num_epochs):
            print("")
            print('======== Epoch {:} / {:} ========'.format(epoch + 1, num_epochs))
            print('Training...')

            # Measure how long the training epoch takes.
            t0 = time.time()

            train_acc, train_loss = self.train_epoch(
                model,
                train_data_loader,
                loss_fn,
                optimizer,
                device,
                scheduler,
                algorithm=algorithm
            )

            # Measure how long this epoch took.
            training_time = self.format_time(time.time() - t0)

            print("")
            print("  Average training loss: {0:.2f}".format(train_loss))
            print("  Average accuracy: {0:.2f}".format(train_acc))

            print("  Training epcoh took: {:}".format(training_time))

            print("")
            print("Running Validation...")
            t0 = time.time()

            val_acc, val_loss = self.eval_model(
                model,
                val_data_loader,
                loss_fn,
                device,
                algorithm=algorithm
            )

            # Measure how long the validation run took.
            validation_time = self.format_time(time.time() - t0)

            print("  Validation Loss: {0:.2f}".format(val_loss))
            print("  Validation took: {:}".format(validation_time))

            # Record all statistics from this epoch.
            self.training_stats.append(
                {
                    'epoch': epoch + 1,
                    'Training Loss': train_loss,
                    'Training Accur.': train_acc,
                    'Valid. Loss': val_loss,
                    'Valid. Accur.': val_acc,
                }
            )

            print("Total training took {:} (h:mm:ss)".format(self.format_time(time.time() - total_t0)))

            if val_acc > best_accuracy:
                self.best_state = copy.deepcopy(model.state_dict())
                best_accuracy = val_acc

    def summanry_training_stats(self):
        for row in self.training_stats:
            print('  '.join('{}: {:.2f}'.format(k, v) if isinstance(v, float) else '{}: {}'.format(k, v)
                            for k, v in row.items()))


def make_reviews(n, rng, pos_words, neg_words, neutral_words):
    documents, labels = [], []
    for _ in range(n):
        label = rng.randint(0, 2)
        length = rng.randint(6, 20)
        k = rng.binomial(length, 0.2)
        own, other = (pos_words, neg_words) if label == 0 else (neg_words, pos_words)
        words = list(rng.choice(neutral_words, length - k)) + list(rng.choice(own, k))
        if k > 0 and rng.uniform() < 0.5:
            words.append(rng.choice(other))
        rng.shuffle(words)
        documents.append(' '.join(words))
        labels.append(label)
    return np.array(documents, dtype=object), np.array(labels)


if __name__ == '__main__':
    RANDOM_SEED = 42
    np.random.seed(RANDOM_SEED)
    torch.manual_seed(RANDOM_SEED)
    torch.set_num_threads(1)

    rng = np.random.RandomState(RANDOM_SEED)
    pos_words = ['good%d' % i for i in range(15)]
    neg_words = ['bad%d' % i for i in range(15)]
    neutral_words = ['w%d' % i for i in range(120)]
    documents, labels = make_reviews(1000, rng, pos_words, neg_words, neutral_words)
    class_names = ['positive', 'negative']

    # split 80 / 10 / 10
    idx = rng.permutation(len(documents))
    tr, va = idx[:800], idx[800:900]
    print((len(tr), len(va)))

    MAX_LEN = 24
    tokenizer = WhitespaceTokenizer(pos_words + neg_words + neutral_words)

    BATCH_SIZE = 16
    train_data_loader = create_data_loader(documents[tr], labels[tr], tokenizer, MAX_LEN, BATCH_SIZE)
    val_data_loader = create_data_loader(documents[va], labels[va], tokenizer, MAX_LEN, BATCH_SIZE)

    device = torch.device("cpu")
    config = BertConfig(vocab_size=len(tokenizer.vocab) + 3, hidden_size=32, num_hidden_layers=2,
                        num_attention_heads=2, intermediate_size=64, max_position_embeddings=MAX_LEN,
                        num_labels=len(class_names))
    model = BertForSequenceClassification(config)
    model = model.to(device)

    num_epochs = 3
    trainer = PYBERTTrainer()
    trainer.train(model, device, train_data_loader, val_data_loader, num_epochs=num_epochs, algorithm='transformers')

    trainer.summanry_training_stats()
