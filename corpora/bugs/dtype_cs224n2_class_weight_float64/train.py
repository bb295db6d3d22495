# Source: sebsk/CS224N-Project, run_bert.py, commit a5a5aa4eb2c3fefca967eeba4d388617d6a0d870
# Report: https://github.com/sebsk/CS224N-Project/pull/2
# Crisis-tweet information-type classifier (7 classes) with a class-weighted CrossEntropyLoss.
# The BERT encoder is replaced by an EmbeddingBag over synthetic token ids; the label
# statistics come from a pandas DataFrame as in the original script.
import sys
import time

import numpy as np
import pandas as pd
import torch


class DefaultModel(torch.nn.Module):
    def __init__(self, vocab_size, device, n_class):
        super(DefaultModel, self).__init__()
        self.device = device
        self.embed = torch.nn.EmbeddingBag(vocab_size, 64, mode='mean')
        self.classifier = torch.nn.Linear(64, n_class)

    def forward(self, sents):
        return self.classifier(self.embed(sents))


def batch_iter(df, batch_size, shuffle=False):
    index_array = list(range(df.shape[0]))
    if shuffle:
        np.random.shuffle(index_array)
    batch_num = int(np.ceil(df.shape[0] / batch_size))
    for i in range(batch_num):
        indices = index_array[i * batch_size: (i + 1) * batch_size]
        examples = df.iloc[indices]
        sents = torch.tensor(np.stack(examples.ProcessedText.values))
        targets = list(examples.InformationType_label)
        yield sents, targets


def make_df(n, rng):
    labels = rng.choice(7, size=n, p=[0.4, 0.2, 0.1, 0.1, 0.08, 0.07, 0.05])
    texts = [np.concatenate([rng.randint(0, 500, size=12), 500 + 20 * y + rng.randint(0, 20, size=4)]) for y in labels]
    return pd.DataFrame({'ProcessedText': texts, 'InformationType_label': labels})


def train(args):
    label_name = ['not related or not informative', 'other useful information', 'donations and volunteering',
                  'affected individuals', 'sympathy and support', 'infrastructure and utilities damage',
                  'caution and advice']
    device = torch.device("cpu")
    rng = np.random.RandomState(0)
    np.random.seed(0)
    torch.manual_seed(0)

    start_time = time.time()
    print('Importing data...', file=sys.stderr)
    df_train = make_df(2000, rng)
    train_label = dict(df_train.InformationType_label.value_counts())
    label_max = float(max(train_label.values()))
    train_label_weight = torch.tensor([label_max/train_label[i] for i in range(len(train_label))], device=device)
    print('Done! time elapsed %.2f sec' % (time.time() - start_time), file=sys.stderr)

    model = DefaultModel(640, device, len(label_name))
    optimizer = torch.optim.Adam(model.parameters(), lr=float(args['--lr']))
    model = model.to(device)
    model.train()

    cn_loss = torch.nn.CrossEntropyLoss(weight=train_label_weight, reduction='mean')

    train_iter = report_loss = report_examples = 0
    for epoch in range(1, int(args['--max-epoch']) + 1):
        for sents, targets in batch_iter(df_train, batch_size=int(args['--batch-size']), shuffle=True):
            train_iter += 1
            optimizer.zero_grad()
            batch_size = len(sents)
            pre_softmax = model(sents)
            loss = cn_loss(pre_softmax, torch.tensor(targets, dtype=torch.long, device=device))
            loss.backward()
            optimizer.step()
            report_loss += loss.item() * batch_size
            report_examples += batch_size
            if train_iter % int(args['--log-every']) == 0:
                print('epoch %d, iter %d, avg. loss %.4f' % (epoch, train_iter, report_loss / report_examples))
                report_loss = report_examples = 0.


def main():
    args = {'--lr': '0.01', '--batch-size': '32', '--max-epoch': '3', '--log-every': '30'}
    train(args)


if __name__ == "__main__":
    main()
