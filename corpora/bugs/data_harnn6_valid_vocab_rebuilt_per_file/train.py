# Source: minqukanq/hierarchical-multi-label-text-classification, train.py (Loss, train, main), utils/data_loader.py (convert_examples_to_features, TextDataset), utils/data_helper.py (create_vocab, get_vocab_size, get_onehot_label_threshold, get_onehot_label_topk), models/harnn.py (HARNN), models/attention_memory.py (AttentionLayer, LocalLayer), commit f4c48181d7f622f7e4e6ebb8e9fe98921d47f8ea
# Report: https://github.com/minqukanq/hierarchical-multi-label-text-classification/issues/6
# HARNN for hierarchical multi-label patent classification: JSON-lines documents (title +
# abstract tokens, section / subsection / group / subgroup labels), a frequency-ranked word
# index, a bi-LSTM with one attention + local classifier per hierarchy level chained through
# the attention "visual" maps, a global highway classifier, summed BCE losses, AdamW with a
# linear decay schedule, and micro precision / recall / F1 / AUC / AUPRC on the validation
# file every epoch. The patent corpus becomes synthetic JSON-lines files (4-level hierarchy of
# 3 / 6 / 12 / 24 classes, keyword-bearing abstracts); sizes are reduced to run on a CPU.
import json
import os
import random
import tempfile
import time
from collections import Counter

import numpy as np
import torch
import torch.nn as nn
from sklearn.metrics import average_precision_score, f1_score, precision_score, recall_score, roc_auc_score
from torch.utils.data import DataLoader
from torch.utils.data.dataset import Dataset


# ---------------------------------------------------------------- utils/data_helper.py
def create_vocab(data):
    texts_split = [' '.join(js['title'] + js['abstract']) for js in data]
    all_text = ' '.join([texts for texts in texts_split])

    words = all_text.split()
    counts = Counter(words)
    vocab = sorted(counts, key=counts.get, reverse=True)
    vocab_to_int = {word: ii for ii, word in enumerate(vocab)}
    return vocab_to_int


def get_vocab_size(train_file_path, valid_file_path):
    data = []
    with open(train_file_path) as f:
        for line in f:
            js = json.loads(line)
            data.append(js)
    with open(train_file_path) as f:
        for line in f:
            js = json.loads(line)
            data.append(js)

    vocab_to_int = create_vocab(data)
    vocab_size = len(vocab_to_int)
    return vocab_size


def get_onehot_label_threshold(scores, threshold=0.5):
    predicted_onehot_labels = []
    scores = np.ndarray.tolist(scores)
    for score in scores:
        count = 0
        onehot_labels_list = [0] * len(score)
        for index, predict_score in enumerate(score):
            if predict_score >= threshold:
                onehot_labels_list[index] = 1
                count += 1
        if count == 0:
            max_score_index = score.index(max(score))
            onehot_labels_list[max_score_index] = 1
        predicted_onehot_labels.append(onehot_labels_list)
    return predicted_onehot_labels


def get_onehot_label_topk(scores, top_num=1):
    predicted_onehot_labels = []
    scores = np.ndarray.tolist(scores)
    for score in scores:
        onehot_labels_list = [0] * len(score)
        max_num_index_list = np.argsort(score)[::-1][:top_num]
        for i in max_num_index_list:
            onehot_labels_list[i] = 1
        predicted_onehot_labels.append(onehot_labels_list)
    return predicted_onehot_labels


# ---------------------------------------------------------------- utils/data_loader.py
class InputFeature(object):
    def __init__(self, _id, features, labels, onehot_labels_tuple_list, onehot_labels_list) -> None:
        self.id = _id
        self.features = features
        self.labels = labels
        self.onehot_labels_tuple_list = onehot_labels_tuple_list
        self.onehot_labels_list = onehot_labels_list


def convert_examples_to_features(js, args, vocab_to_int):

    def _pad_features(texts_ints, seq_length):
        features = np.zeros((1, seq_length), dtype=int)
        features[0, -texts_ints.shape[1]:] = np.array(texts_ints)[:seq_length]
        return features.reshape(-1)

    def _create_onehot_labels(labels_index, num_labels):
        label = [0] * num_labels
        for item in labels_index:
            label[int(item)] = 1
        return label

    text_data = ' '.join(js['title'] + js['abstract'])
    texts_ints = np.array([vocab_to_int[word] for word in text_data.split()]).reshape(1, -1)
    features = _pad_features(texts_ints, seq_length=args.seq_length)

    onehot_labels_tuple_list = (_create_onehot_labels(js['section'], args.num_classes_layer[0]),
                                _create_onehot_labels(js['subsection'], args.num_classes_layer[1]),
                                _create_onehot_labels(js['group'], args.num_classes_layer[2]),
                                _create_onehot_labels(js['subgroup'], args.num_classes_layer[3]))
    onehot_labels_list = (_create_onehot_labels(js['labels'], args.total_classes))

    return InputFeature(js['id'], features, js['labels'], onehot_labels_tuple_list, onehot_labels_list)


class TextDataset(Dataset):
    def __init__(self, args, file_path) -> None:
        self.examples = []
        data = []
        with open(file_path) as f:
            for line in f:
                js = json.loads(line)
                data.append(js)

        vocab_to_int = create_vocab(data)
        self.vocab_size = len(vocab_to_int)

        for js in data:
            self.examples.append(convert_examples_to_features(js, args, vocab_to_int))

    def __len__(self):
        return len(self.examples)

    def __getitem__(self, index):
        return (torch.tensor(self.examples[index].features),
                torch.tensor(self.examples[index].onehot_labels_list),
                torch.tensor(self.examples[index].onehot_labels_tuple_list[0]),
                torch.tensor(self.examples[index].onehot_labels_tuple_list[1]),
                torch.tensor(self.examples[index].onehot_labels_tuple_list[2]),
                torch.tensor(self.examples[index].onehot_labels_tuple_list[3]))


# ---------------------------------------------------------------- models/attention_memory.py
class AttentionLayer(nn.Module):
    def __init__(self, num_units, attention_unit_size, num_classes):
        super().__init__()
        self.fc1 = nn.Linear(num_units, attention_unit_size, bias=False)
        self.fc2 = nn.Linear(attention_unit_size, num_classes, bias=False)

    def forward(self, input_x):
        attention_matrix = self.fc2(torch.tanh(self.fc1(input_x))).transpose(1, 2)
        attention_weight = torch.softmax(attention_matrix, dim=-1)
        attention_out = torch.matmul(attention_weight, input_x)
        return attention_weight, torch.mean(attention_out, dim=1)


class LocalLayer(nn.Module):
    def __init__(self, num_units, num_classes):
        super().__init__()
        self.fc = nn.Linear(num_units, num_classes)

    def forward(self, input_x, input_att_weight):
        logits = self.fc(input_x)
        scores = torch.sigmoid(logits)
        visual = torch.mul(input_att_weight, scores.unsqueeze(-1))
        visual = torch.softmax(visual, dim=-1)
        visual = torch.mean(visual, dim=1)
        return logits, scores, visual


# ---------------------------------------------------------------- models/harnn.py
class HARNN(nn.Module):
    def __init__(self, num_classes_list, total_classes, vocab_size, lstm_hidden_size,
                 attention_unit_size, fc_hidden_size, embedding_size, beta=0.0, drop_prob=0.5):
        super().__init__()
        self.beta = beta

        embedding_weights = torch.FloatTensor(np.random.uniform(-1, 1, size=(vocab_size, embedding_size)))
        self.embedding = nn.Embedding(vocab_size, embedding_size, _weight=embedding_weights)

        self.bi_lstm = nn.LSTM(input_size=embedding_size, hidden_size=lstm_hidden_size, num_layers=2,
                               batch_first=True, bidirectional=True, dropout=drop_prob)

        self.first_attention = AttentionLayer(lstm_hidden_size * 2, attention_unit_size, num_classes_list[0])
        self.first_fc = nn.Linear(lstm_hidden_size * 4, fc_hidden_size)
        self.first_local = LocalLayer(fc_hidden_size, num_classes_list[0])

        self.second_attention = AttentionLayer(lstm_hidden_size * 2, attention_unit_size, num_classes_list[1])
        self.second_fc = nn.Linear(lstm_hidden_size * 4, fc_hidden_size)
        self.second_local = LocalLayer(fc_hidden_size, num_classes_list[1])

        self.third_attention = AttentionLayer(lstm_hidden_size * 2, attention_unit_size, num_classes_list[2])
        self.third_fc = nn.Linear(lstm_hidden_size * 4, fc_hidden_size)
        self.third_local = LocalLayer(fc_hidden_size, num_classes_list[2])

        self.fourth_attention = AttentionLayer(lstm_hidden_size * 2, attention_unit_size, num_classes_list[3])
        self.fourth_fc = nn.Linear(lstm_hidden_size * 4, fc_hidden_size)
        self.fourth_local = LocalLayer(fc_hidden_size, num_classes_list[3])

        self.fc = nn.Linear(fc_hidden_size * 4, fc_hidden_size)
        self.highway_lin = nn.Linear(fc_hidden_size, fc_hidden_size)
        self.highway_gate = nn.Linear(fc_hidden_size, fc_hidden_size)
        self.dropout = nn.Dropout(drop_prob)
        self.global_scores_fc = nn.Linear(fc_hidden_size, total_classes)

        for name, param in self.named_parameters():
            if 'embedding' not in name and 'weight' in name:
                self.truncated_normal_(param.data, mean=0, std=0.1)
            else:
                nn.init.constant_(param.data, 0.1)

    def forward(self, input_x):
        embedded_sentence = self.embedding(input_x)

        lstm_out, _ = self.bi_lstm(embedded_sentence)
        lstm_out_pool = torch.mean(lstm_out, dim=1)

        first_att_weight, first_att_out = self.first_attention(lstm_out)
        first_local_input = torch.cat((lstm_out_pool, first_att_out), dim=1)
        first_local_fc_out = self.first_fc(first_local_input)
        first_logits, first_scores, first_visual = self.first_local(first_local_fc_out, first_att_weight)

        second_att_input = torch.mul(lstm_out, first_visual.unsqueeze(-1))
        second_att_weight, second_att_out = self.second_attention(second_att_input)
        second_local_input = torch.cat((lstm_out_pool, second_att_out), dim=1)
        second_local_fc_out = self.second_fc(second_local_input)
        second_logits, second_scores, second_visual = self.second_local(second_local_fc_out, second_att_weight)

        third_att_input = torch.mul(lstm_out, second_visual.unsqueeze(-1))
        third_att_weight, third_att_out = self.third_attention(third_att_input)
        third_local_input = torch.cat((lstm_out_pool, third_att_out), dim=1)
        third_local_fc_out = self.third_fc(third_local_input)
        third_logits, third_scores, third_visual = self.third_local(third_local_fc_out, third_att_weight)

        fourth_att_input = torch.mul(lstm_out, third_visual.unsqueeze(-1))
        fourth_att_weight, fourth_att_out = self.fourth_attention(fourth_att_input)
        fourth_local_input = torch.cat((lstm_out_pool, fourth_att_out), dim=1)
        fourth_local_fc_out = self.fourth_fc(fourth_local_input)
        fourth_logits, fourth_scores, fourth_visual = self.fourth_local(fourth_local_fc_out, fourth_att_weight)

        ham_out = torch.cat((first_local_fc_out, second_local_fc_out,
                             third_local_fc_out, fourth_local_fc_out), dim=1)
        fc_out = self.fc(ham_out)

        highway_g = torch.relu(self.highway_lin(fc_out))
        highway_t = torch.sigmoid(self.highway_gate(fc_out))
        highway_output = torch.mul(highway_g, highway_t) + torch.mul((1 - highway_t), fc_out)
        h_drop = self.dropout(highway_output)

        global_logits = self.global_scores_fc(h_drop)
        global_scores = torch.sigmoid(global_logits)
        local_scores = torch.cat((first_scores, second_scores, third_scores, fourth_scores), dim=1)
        scores = self.beta * global_scores + (1 - self.beta) * local_scores
        return (scores, first_att_weight, first_visual, second_visual, third_visual, fourth_visual), \
               (first_logits, second_logits, third_logits, fourth_logits, global_logits, first_scores, second_scores)

    def truncated_normal_(self, tensor, mean=0, std=0.1):
        size = tensor.shape
        tmp = tensor.new_empty(size + (4,)).normal_()
        valid = (tmp < 2) & (tmp > -2)
        ind = valid.max(-1, keepdim=True)[1]
        tensor.data.copy_(tmp.gather(-1, ind).squeeze(-1))
        tensor.data.mul_(std).add_(mean)
        return tensor


# ---------------------------------------------------------------- train.py
class Loss(nn.Module):
    def __init__(self):
        super().__init__()
        self.BCEWithLogitsLoss = nn.BCEWithLogitsLoss()

    def forward(self, first_logits, second_logits, third_logits, fourth_logits, global_logits,
                first_scores, second_scores, input_y_first, input_y_second, input_y_third,
                input_y_fourth, input_y):
        losses_1 = self.BCEWithLogitsLoss(first_logits, input_y_first.float())
        losses_2 = self.BCEWithLogitsLoss(second_logits, input_y_second.float())
        losses_3 = self.BCEWithLogitsLoss(third_logits, input_y_third.float())
        losses_4 = self.BCEWithLogitsLoss(fourth_logits, input_y_fourth.float())
        local_losses = losses_1 + losses_2 + losses_3 + losses_4
        global_losses = self.BCEWithLogitsLoss(global_logits, input_y.float())
        return local_losses + global_losses


def train(args):
    train_dataset = TextDataset(args, args.train_file_path)
    valid_dataset = TextDataset(args, args.test_file_path)

    train_loader = DataLoader(train_dataset, batch_size=args.batch_size, shuffle=True, drop_last=True)
    val_loader = DataLoader(valid_dataset, batch_size=args.batch_size, shuffle=True, drop_last=True)

    vocab_size = get_vocab_size(args.train_file_path, args.test_file_path)

    net = HARNN(num_classes_list=args.num_classes_layer, total_classes=args.total_classes, vocab_size=vocab_size,
                embedding_size=args.embedding_size, lstm_hidden_size=args.lstm_hidden_size,
                attention_unit_size=args.attention_unit_size,
                fc_hidden_size=args.fc_hidden_size, beta=args.beta,
                drop_prob=args.drop_prob)
    net.to(args.device)

    criterion = Loss()
    optimizer = torch.optim.AdamW(net.parameters(), lr=args.learning_rate, weight_decay=args.l2_reg_lambda, eps=1e-8)
    num_training_steps = len(train_loader) * args.epochs
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: max(0.0, float(num_training_steps - step) / float(max(1, num_training_steps))))

    best_auprc = args.best_auprc
    for epoch in range(args.epochs):
        net.train()
        train_loss = 0.0
        train_cnt = 0

        for x_train, y_train, y_train_0, y_train_1, y_train_2, y_train_3 in train_loader:
            _, outputs = net(x_train)
            loss = criterion(outputs[0], outputs[1], outputs[2], outputs[3], outputs[4], outputs[5], outputs[6],
                             y_train_0, y_train_1, y_train_2, y_train_3, y_train)

            loss.backward()
            torch.nn.utils.clip_grad_norm_(net.parameters(), args.max_grad_norm)
            optimizer.step()
            optimizer.zero_grad()
            scheduler.step()

            train_loss += loss.item()
            train_cnt += x_train.size()[0]

        if epoch % args.evaluate_every == 0:
            net.eval()
            val_loss = 0.0
            val_cnt = 0
            true_onehot_labels = []
            predicted_onehot_scores = []
            predicted_onehot_labels_ts = []
            predicted_onehot_labels_tk = [[] for _ in range(args.top_num)]
            with torch.no_grad():
                for x_val, y_val, y_val_0, y_val_1, y_val_2, y_val_3 in val_loader:
                    scores, outputs = net(x_val)
                    scores = scores[0]
                    loss = criterion(outputs[0], outputs[1], outputs[2], outputs[3], outputs[4], outputs[5],
                                     outputs[6], y_val_0, y_val_1, y_val_2, y_val_3, y_val)
                    val_loss += loss.item()
                    val_cnt += x_val.size()[0]
                    for onehot_labels in y_val:
                        true_onehot_labels.append(onehot_labels.tolist())
                    for onehot_scores in scores:
                        predicted_onehot_scores.append(onehot_scores.tolist())
                    batch_predicted_onehot_labels_ts = \
                        get_onehot_label_threshold(scores=scores.cpu().detach().numpy(), threshold=args.threshold)
                    for onehot_labels in batch_predicted_onehot_labels_ts:
                        predicted_onehot_labels_ts.append(onehot_labels)
                    for num in range(args.top_num):
                        batch_predicted_onehot_labels_tk = \
                            get_onehot_label_topk(scores=scores.cpu().detach().numpy(), top_num=num + 1)
                        for onehot_labels in batch_predicted_onehot_labels_tk:
                            predicted_onehot_labels_tk[num].append(onehot_labels)

            y_true = np.array(true_onehot_labels)
            eval_pre_ts = precision_score(y_true=y_true, y_pred=np.array(predicted_onehot_labels_ts), average='micro')
            eval_rec_ts = recall_score(y_true=y_true, y_pred=np.array(predicted_onehot_labels_ts), average='micro')
            eval_F_ts = f1_score(y_true=y_true, y_pred=np.array(predicted_onehot_labels_ts), average='micro')
            eval_auc = roc_auc_score(y_true=y_true, y_score=np.array(predicted_onehot_scores), average='micro')
            eval_prc = average_precision_score(y_true=y_true, y_score=np.array(predicted_onehot_scores),
                                               average='micro')
            best_auprc = max(eval_prc, best_auprc)
            eval_F_tk = [f1_score(y_true=y_true, y_pred=np.array(predicted_onehot_labels_tk[num]), average='micro')
                         for num in range(args.top_num)]
            print("epoch {0} | train loss {1:.4f} | Validation: Loss {2:.4f} | AUC {3:.4f} | AUPRC {4:.4f} | "
                  "threshold P {5:.3f} R {6:.3f} F {7:.3f} | Top4 F {8:.3f}"
                  .format(epoch + 1, train_loss / train_cnt, val_loss / val_cnt, eval_auc, eval_prc,
                          eval_pre_ts, eval_rec_ts, eval_F_ts, eval_F_tk[3]))

    print("Finished Training. Best validation AUPRC {0:.4f}".format(best_auprc))


def write_corpus(path, n_docs, seed):
    """Patent-like JSON lines: every subgroup (leaf) owns 3 keywords, every group 2; abstracts mix
    them with shared filler words. The hierarchy is 3 sections > 6 subsections > 12 groups > 24
    subgroups; 'labels' indexes all levels in one 45-way vector."""
    g = np.random.RandomState(seed)
    filler = [f"w{i}" for i in range(60)]
    filler_p = 1.0 / np.arange(1, 61) ** 0.8
    filler_p /= filler_p.sum()
    with open(path, "w") as f:
        for i in range(n_docs):
            leaves = sorted(set(g.choice(24, size=g.choice([1, 2], p=[0.7, 0.3]), replace=False).tolist()))
            groups = sorted({leaf // 2 for leaf in leaves})
            subsections = sorted({grp // 2 for grp in groups})
            sections = sorted({sub // 2 for sub in subsections})
            words = list(g.choice(filler, size=22, p=filler_p))
            for leaf in leaves:
                words += [f"k{leaf}_{j}" for j in g.choice(3, size=3)]
            for grp in groups:
                words += [f"g{grp}_{j}" for j in g.choice(2, size=2)]
            g.shuffle(words)
            js = {"id": f"{seed}-{i}", "title": words[:6], "abstract": words[6:],
                  "section": sections, "subsection": subsections, "group": groups, "subgroup": leaves,
                  "labels": sections + [3 + s for s in subsections] + [9 + grp for grp in groups]
                  + [21 + leaf for leaf in leaves]}
            f.write(json.dumps(js) + "\n")


def set_seed(seed=42):
    random.seed(seed)
    os.environ['PYHTONHASHSEED'] = str(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


class Args:
    pass


def main():
    start = time.time()
    args = Args()
    args.device = torch.device("cpu")
    args.seed = 42
    set_seed(args.seed)

    args.num_classes_layer = [3, 6, 12, 24]
    args.total_classes = 45

    tmp = tempfile.mkdtemp()
    args.train_file_path = os.path.join(tmp, 'train_sample.json')
    args.test_file_path = os.path.join(tmp, 'test_sample.json')
    write_corpus(args.train_file_path, 480, seed=1)
    write_corpus(args.test_file_path, 160, seed=2)

    args.evaluate_every = 1
    args.embedding_size = 32
    args.seq_length = 40
    args.batch_size = 16
    args.epochs = 8
    args.max_grad_norm = 0.1
    args.drop_prob = 0.5
    args.l2_reg_lambda = 0
    args.learning_rate = 1e-2
    args.beta = 0.3
    args.lstm_hidden_size = 32
    args.fc_hidden_size = 32
    args.attention_unit_size = 16
    args.threshold = 0.5
    args.top_num = 5
    args.best_auprc = 0

    train(args)
    print("done in {:.1f}s".format(time.time() - start))


if __name__ == '__main__':
    torch.set_num_threads(1)
    main()
