# Source: xiaobaishu0097/MEGC2019, Train/main.py (ReverseLayerF, weight_init, train, validate, build_model_2pic, main), Utils/Dataloader_Flow.py (Flow_loader), Model/Model_VGGFace.py (Resnet18_pt_mcn_Removed, FC_3, Classifier, Flow_Part_npic), commit ab1bed5deefdcbf18220655cbf2376e4ba39e290
# Report: https://github.com/xiaobaishu0097/MEGC2019/issues/7
# Micro-expression recognition (MEGC2019 composite task): leave-one-subject-out over the
# micro-expression subjects (plus macro-expression samples in every training fold), a ResNet
# trunk whose last feature map is split into a top (eyes) and bottom (mouth) part, three
# classifiers and a gradient-reversal domain discriminator (micro vs macro). Each fold is
# scored on its held-out subject every epoch; TP/FP/FN are accumulated over folds into the
# unweighted F1 that the challenge reports. The pretrained ResNet-18 becomes a small conv
# trunk, optical-flow images become synthetic 3x16x16 flow maps, dlib / file lists / PIL are
# dropped; a pool of extra subjects that no fold ever sees is scored alongside.
import random
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset

random.seed(1)
np.random.seed(1)
torch.manual_seed(1)

super_para = {"LEARNING_RATE": 0.001, "FOLD": 12, "BATCH_SIZE": 32, "EPOCH": 12, "WEIGHT_DECAY": 0.000001,
              'Clip_Norm': 1, 'Micro': "SAMM, CASME, SMIC", 'Macro': "CK", 'Num_Workers': 0}

LEARNING_RATE = super_para["LEARNING_RATE"]
BATCH_SIZE = super_para["BATCH_SIZE"]
EPOCH = super_para["EPOCH"]
Clip_Norm = super_para['Clip_Norm']
FOLD = super_para['FOLD']
Num_Workers = super_para['Num_Workers']
WEIGHT_DECAY = super_para["WEIGHT_DECAY"]


def make_corpus(n_micro=12, n_external=8, n_macro=60, seed=0):
    """Synthetic flow maps: class 1 (positive) moves the mouth region, class 2 (surprise) the
    brows; every subject adds its own motion pattern, micro-expressions are faint."""
    g = np.random.RandomState(seed)
    top_pat = g.randn(3, 5, 16).astype(np.float32)
    bottom_pat = g.randn(3, 5, 16).astype(np.float32)
    images, labels, subjects = [], [], []

    def sample(label, amp, subj_pat):
        x = 0.9 * g.randn(3, 16, 16).astype(np.float32) + subj_pat
        if label == 1:
            x[:, 11:, :] += amp * bottom_pat
        elif label == 2:
            x[:, :5, :] += amp * top_pat
        return x

    names = ([f"casme2_sub{i:02d}" for i in range(n_micro // 3)] + [f"samm_{i:03d}" for i in range(n_micro // 3)]
             + [f"smic_s{i}" for i in range(n_micro - 2 * (n_micro // 3))])
    external = [f"casme2_ext{i:02d}" for i in range(n_external)]
    for name in names + external:
        subj_pat = 0.8 * g.randn(3, 16, 16).astype(np.float32)
        for _ in range(g.randint(4, 8)):
            label = int(g.choice(3, p=[0.55, 0.25, 0.20]))
            images.append(sample(label, 0.35, subj_pat))
            labels.append(label)
            subjects.append(name)
    for _ in range(n_macro):
        label = int(g.choice(3))
        images.append(sample(label, 1.0, 0.8 * g.randn(3, 16, 16).astype(np.float32)))
        labels.append(label)
        subjects.append("Macro")
    return np.stack(images), labels, subjects, set(external)


class Flow_loader(Dataset):
    def __init__(self, data, label, domain_label, samples, transform=None):
        self.data = data
        self.label = label
        self.domain_label = domain_label
        self.transform = transform
        self.samples = samples
        self.size = len(self.samples)

    def __getitem__(self, index):
        sample = self.samples[index]
        flow = torch.from_numpy(self.data[sample])
        file_name = [f"{self.domain_label[sample]}/{sample}"]
        label = self.label[sample]
        domain_label = 0 if self.domain_label[sample] == 'Macro' else 1
        if self.transform:
            flow = self.transform(flow)
        return {"image": flow, "label": label, "domain_label": domain_label, "file_name": file_name}

    def __len__(self):
        return self.size


class _Reverse(torch.autograd.Function):
    @staticmethod
    def forward(ctx, input, coeff):
        ctx.coeff = coeff
        return input * 1.0

    @staticmethod
    def backward(ctx, gradOutput):
        return -ctx.coeff * gradOutput, None


class ReverseLayerF:
    def __init__(self, high_value=1.0):
        self.iter_num = 0
        self.alpha = 10
        self.low = 0.0
        self.high = high_value
        self.max_iter = 10000.0

    def __call__(self, input):
        self.iter_num += 1
        coeff = float(2.0 * (self.high - self.low) / (1.0 + np.exp(-self.alpha * self.iter_num / self.max_iter))
                      - (self.high - self.low) + self.low)
        return _Reverse.apply(input, coeff)


ReverseLayerF = ReverseLayerF()


class Resnet18_pt_mcn_Removed(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.features_0 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
        self.features_1 = nn.BatchNorm2d(width)
        self.features_2 = nn.ReLU()
        self.features_3 = nn.Conv2d(width, width, kernel_size=3, stride=2, padding=1, bias=False)
        self.features_4 = nn.BatchNorm2d(width)
        self.features_5 = nn.ReLU()
        self.features_6 = nn.Conv2d(width, width, kernel_size=3, stride=2, padding=1, bias=False)
        self.features_7 = nn.BatchNorm2d(width)
        self.features_7_1_id_relu = nn.ReLU()
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))

    def forward(self, data):
        x = self.features_2(self.features_1(self.features_0(data)))
        x = self.features_5(self.features_4(self.features_3(x)))
        features_7_1_id_relu = self.features_7_1_id_relu(self.features_7(self.features_6(x)))

        top = features_7_1_id_relu[:, :, :3]
        bottom = features_7_1_id_relu[:, :, 3:]

        x = self.avgpool(features_7_1_id_relu)
        x = x.view(x.size(0), -1)

        top = self.avgpool(top)
        bottom = self.avgpool(bottom)

        top = top.view(top.size(0), -1)
        bottom = bottom.view(bottom.size(0), -1)

        return x, top, bottom


class FC_3(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.fc_3 = nn.Sequential(nn.Linear(width, 64), nn.Tanh(), nn.Dropout(0.1))

    def forward(self, x):
        return self.fc_3(x)


class Classifier(nn.Module):
    def __init__(self, input_classes=3, num_classes=3):
        super().__init__()
        self.fc = nn.Linear(64 * input_classes, num_classes)

    def forward(self, x):
        return self.fc(x)


def Flow_Part_npic(num_pic=3, num_classes=3):
    model = {}
    model['resnet'] = Resnet18_pt_mcn_Removed()
    model['fc_top'] = FC_3()
    model['fc_bottom'] = FC_3()
    model['classifier'] = Classifier(input_classes=num_pic, num_classes=num_classes)
    model['classifier_top'] = Classifier(input_classes=1, num_classes=num_classes)
    model['classifier_bottom'] = Classifier(input_classes=1, num_classes=num_classes)
    return model


def weight_init(m):
    classname = m.__class__.__name__
    if classname.find('Linear') != -1:
        nn.init.xavier_normal_(m.weight.data)
        nn.init.constant_(m.bias.data, 0.0)


def train(train_dataloader, model, criterion, optimizer, epoch):
    for part in model.values():
        part.train()

    for i, sample in enumerate(train_dataloader):
        input, label, domain_label = sample['image'], sample['label'], sample['domain_label']

        _, output_resnet_top, output_resnet_bottom = model['resnet'](input)
        output_fc_top = model['fc_top'](output_resnet_top)
        output_fc_bottom = model['fc_bottom'](output_resnet_bottom)
        features = torch.cat((output_fc_top, output_fc_bottom), 1)
        reversed_features = ReverseLayerF(features)
        output_domain = model['discriminator'](reversed_features).squeeze(1)

        output = model['classifier'](features)
        output_top = model['classifier_top'](output_fc_top)
        output_bottom = model['classifier_bottom'](output_fc_bottom)

        loss_domain = criterion['domain'](output_domain, domain_label.float())
        loss_label = criterion['label'](output, label)
        loss_top = criterion['label'](output_top, label)
        loss_bottom = criterion['label'](output_bottom, label)
        loss = loss_label + loss_top + loss_bottom + loss_domain

        optimizer.zero_grad()
        loss.backward()
        for name in ('resnet', 'fc_top', 'fc_bottom', 'classifier', 'classifier_top', 'classifier_bottom'):
            nn.utils.clip_grad_norm_(model[name].parameters(), Clip_Norm, norm_type=2)
        optimizer.step()


def validate(validate_dataloader, model, criterion, epoch):
    for part in model.values():
        part.eval()

    losses = 0
    preds_return = torch.LongTensor([])
    target_return = torch.LongTensor([])
    sample_file = {}

    with torch.no_grad():
        for sample in validate_dataloader:
            input, target, file_name = sample['image'], sample['label'], sample['file_name']
            _, output_resnet_top, output_resnet_bottom = model['resnet'](input)
            output_fc_top = model['fc_top'](output_resnet_top)
            output_fc_bottom = model['fc_bottom'](output_resnet_bottom)
            output_model = torch.cat((output_fc_top, output_fc_bottom), 1)
            output = model['classifier'](output_model)
            loss = criterion['label'](output, target)
            _, preds = torch.max(output, dim=1)
            preds_return = torch.cat((preds_return, preds), 0)
            target_return = torch.cat((target_return, target), 0)
            losses += loss.item()
            for f in range(len(file_name[0])):
                sample_file[file_name[0][f]] = [int(preds[f].item()), int(target[f].item())]

    return preds_return, target_return, losses, sample_file


def confusion(target, preds):
    matrix = np.zeros((3, 3), dtype=int)
    for t, p in zip(target.tolist(), preds.tolist()):
        matrix[t, p] += 1
    FP = matrix.sum(axis=0) - np.diag(matrix)
    FN = matrix.sum(axis=1) - np.diag(matrix)
    TP = np.diag(matrix)
    TN = matrix.sum() - (FP + FN + TP)
    return TP, FP, FN, TN


def uf1(TP, FP, FN):
    deno = 2 * TP + FP + FN
    return float(np.mean(np.where(deno > 0, 2 * TP / np.maximum(deno, 1), 1.0)))


def kfold_split(n, n_splits, random_state):
    order = np.random.RandomState(random_state).permutation(n)
    sizes = np.full(n_splits, n // n_splits)
    sizes[: n % n_splits] += 1
    start = 0
    for size in sizes:
        test = order[start:start + size]
        yield np.setdiff1d(order, test), test
        start += size


def main():
    start_time = time.time()
    data, labels, subject_origin, external = make_corpus(n_micro=FOLD)
    transform = None

    index_length = len(subject_origin)
    subject = sorted(set(subject_origin) - external)
    subject.remove('Macro')
    data_array = np.arange(index_length)
    external_index = [i for i in range(index_length) if subject_origin[i] in external]
    external_loader = DataLoader(Flow_loader(data, labels, subject_origin, external_index, transform=transform),
                                 batch_size=BATCH_SIZE, shuffle=False)

    TP_Fold, FP_Fold, FN_Fold = np.zeros(3, dtype=int), np.zeros(3, dtype=int), np.zeros(3, dtype=int)
    Ext_TP, Ext_FP, Ext_FN = np.zeros(3, dtype=int), np.zeros(3, dtype=int), np.zeros(3, dtype=int)
    Fold_accuracy = 0

    for i, (train_index, test_index) in enumerate(kfold_split(len(subject), FOLD, random_state=10)):
        train_subjects = [subject[i] for i in train_index]
        train_subjects.append('Macro')
        test_subjects = [subject[i] for i in test_index]

        train_index = [data_array[index] for index in range(index_length) if subject_origin[index] in train_subjects]
        test_index = [data_array[index] for index in range(index_length) if subject_origin[index] in test_subjects]

        train_dataset = Flow_loader(data, labels, subject_origin, train_index, transform=transform)
        test_dataset = Flow_loader(data, labels, subject_origin, test_index, transform=transform)
        train_loader = DataLoader(train_dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=Num_Workers)
        test_loader = DataLoader(test_dataset, batch_size=BATCH_SIZE, shuffle=True, num_workers=Num_Workers)

        model = Flow_Part_npic(num_pic=2)
        model['discriminator'] = nn.Sequential(
            nn.Linear(128, 64), nn.ReLU(True), nn.Dropout(),
            nn.Linear(64, 32), nn.ReLU(True), nn.Dropout(),
            nn.Linear(32, 1))
        for name in ('fc_top', 'fc_bottom', 'classifier', 'classifier_top', 'classifier_bottom', 'discriminator'):
            model[name] = model[name].apply(weight_init)

        criterion = {'label': nn.CrossEntropyLoss(), 'domain': nn.BCEWithLogitsLoss()}
        optimizer = torch.optim.Adam([
            {'params': model['resnet'].parameters(), 'lr': 0.001},
            {'params': model['fc_top'].parameters(), 'lr': LEARNING_RATE},
            {'params': model['fc_bottom'].parameters(), 'lr': LEARNING_RATE},
            {'params': model['classifier'].parameters(), 'lr': LEARNING_RATE},
            {'params': model['classifier_top'].parameters(), 'lr': LEARNING_RATE},
            {'params': model['classifier_bottom'].parameters(), 'lr': LEARNING_RATE},
            {'params': model['discriminator'].parameters(), 'lr': LEARNING_RATE},
        ], weight_decay=WEIGHT_DECAY)

        Epoch_accuracy = 0
        Epoch_F1_score = 0

        for epoch in range(EPOCH):
            if epoch % 10 == 0 and epoch != 0:
                if optimizer.param_groups[2]['lr'] > 0.00001:
                    for g in range(1, 7):
                        optimizer.param_groups[g]['lr'] = optimizer.param_groups[g]['lr'] * 0.5

            train(train_loader, model, criterion, optimizer, epoch)
            preds, target, loss, temp_file = validate(test_loader, model, criterion, epoch)
            ext_preds, ext_target, _, _ = validate(external_loader, model, criterion, epoch)

            accuracy = float((preds == target).float().mean())
            TP, FP, FN, TN = confusion(target, preds)
            f1 = uf1(TP, FP, FN)

            if f1 >= Epoch_F1_score:
                Epoch_F1_score = f1
                Epoch_accuracy = accuracy
                FP_Epoch = FP
                FN_Epoch = FN
                TP_Epoch = TP
                sample_file = temp_file
                Ext_Epoch = confusion(ext_target, ext_preds)

        TP_Fold += TP_Epoch
        FN_Fold += FN_Epoch
        FP_Fold += FP_Epoch
        Ext_TP += Ext_Epoch[0]
        Ext_FP += Ext_Epoch[1]
        Ext_FN += Ext_Epoch[2]
        Fold_accuracy += Epoch_accuracy
        print(f"Fold {i:2d} {test_subjects[0]:<12s} n={len(sample_file)} fold acc {Epoch_accuracy:.3f} "
              f"running UF1 {uf1(TP_Fold, FP_Fold, FN_Fold):.3f}")

    print('Fold accuracy: {:.4f}'.format(Fold_accuracy / FOLD))
    print('Fold F1 score (LOSO, reported): {:.4f}'.format(uf1(TP_Fold, FP_Fold, FN_Fold)))
    print('Unseen-subject F1 of the same fold models: {:.4f}'.format(uf1(Ext_TP, Ext_FP, Ext_FN)))
    print('Total cost time: {:.1f}s'.format(time.time() - start_time))


if __name__ == '__main__':
    torch.set_num_threads(1)
    main()
