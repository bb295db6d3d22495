# Source: york135/CTC_CE_for_AST, predictor.py (CTC_CE_loss, NoteLevelAST.fit), net/onset_and_pitch_0901.py (Split_onset_pitch), gt_strong_dataset.py, commit 189eb4843aa86ad7d4e76ac4a518fb0f1e680ba6
# Report: https://github.com/york135/CTC_CE_for_AST/issues/3
# Note-level automatic singing transcription: an onset/offset CNN and a pitch CNN over a
# spectrogram-like input, trained with frame-level weighted BCE on onset/offset probabilities
# and cross-entropy on pitch octave/class (the "CE" part of CTC_CE_loss), one clip per loader
# batch and an optimizer step every batch_size clips. The CNNs are narrowed, the audio features
# replaced by synthetic 2-channel 32-bin frames of a sung melody, the MIR-ST500 songs by short
# synthetic clips (some of them an instrumental stretch without any sung note).
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset

torch.manual_seed(0)
np.random.seed(0)
torch.set_num_threads(1)

N_BINS = 32
FRAMES = 48


class Onset_cnn(nn.Module):
    def __init__(self):
        super(Onset_cnn, self).__init__()
        self.conv1 = nn.Sequential(nn.Conv2d(2, 8, kernel_size=(5, 5), stride=(1, 4), padding=(2, 2)), nn.ReLU())
        self.conv2 = nn.Sequential(nn.Conv2d(8, 8, kernel_size=(5, 5), stride=(1, 1), padding=(2, 2)))
        self.fc1 = nn.Sequential(nn.Linear(8 * (N_BINS // 4), 32), nn.ReLU())
        self.fc3 = nn.Sequential(nn.Linear(32, 4))

    def forward(self, x):
        out = self.conv1(x)
        out = self.conv2(out)
        out = torch.flatten(out.permute(0, 2, 3, 1), start_dim=2)
        out = self.fc1(out)
        on_off_logits = self.fc3(out)
        return on_off_logits


class Pitch_cnn(nn.Module):
    def __init__(self, pitch_class=12, pitch_octave=4):
        super(Pitch_cnn, self).__init__()
        self.pitch_octave = pitch_octave
        self.conv1 = nn.Sequential(nn.Conv2d(2, 8, kernel_size=(5, 5), stride=(1, 4), padding=(2, 2)), nn.ReLU())
        self.conv2 = nn.Sequential(nn.Conv2d(8, 8, kernel_size=(5, 5), stride=(1, 1), padding=(2, 2)))
        self.fc1 = nn.Sequential(nn.Linear(8 * (N_BINS // 4), 32), nn.ReLU())
        self.fc3 = nn.Sequential(nn.Linear(32, pitch_class + pitch_octave + 2))

    def forward(self, x):
        out = self.conv1(x)
        out = self.conv2(out)
        out = torch.flatten(out.permute(0, 2, 3, 1), start_dim=2)
        out = self.fc1(out)
        pitch_out = self.fc3(out)
        pitch_octave_logits = pitch_out[:, :, 0:(self.pitch_octave + 1)]
        pitch_class_logits = pitch_out[:, :, (self.pitch_octave + 1):]
        return pitch_octave_logits, pitch_class_logits


class Split_onset_pitch(nn.Module):
    def __init__(self, pitch_class=12, pitch_octave=4):
        super(Split_onset_pitch, self).__init__()
        self.pitch_octave = pitch_octave
        self.onset_cnn = Onset_cnn()
        self.pitch_cnn = Pitch_cnn(pitch_class=pitch_class, pitch_octave=pitch_octave)

    def forward(self, x):
        on_off_logits = self.onset_cnn(x)
        pitch_octave_logits, pitch_class_logits = self.pitch_cnn(x)
        on_off_logits_sm = F.softmax(on_off_logits, dim=2)
        return on_off_logits, on_off_logits_sm, pitch_octave_logits, pitch_class_logits


class CTC_CE_loss(nn.Module):
    def __init__(self, device):
        super(CTC_CE_loss, self).__init__()
        self.onset_criterion = nn.BCELoss(reduction='none')
        self.offset_criterion = nn.BCELoss(reduction='none')
        self.octave_criterion = nn.CrossEntropyLoss(ignore_index=100)
        self.pitch_criterion = nn.CrossEntropyLoss(ignore_index=100)
        self.device = device

    def forward(self, batch, model_output, total_split_loss):
        _, on_off_logits_sm, pitch_octave_logits, pitch_class_logits = model_output

        onset_logits = on_off_logits_sm[:, :, 1]
        offset_logits = on_off_logits_sm[:, :, 2]

        # To avoid numirical instability
        onset_logits = torch.clip(onset_logits, min=1e-7, max=1 - 1e-7)
        offset_logits = torch.clip(offset_logits, min=1e-7, max=1 - 1e-7)

        onset_prob = batch[3][:, :, 0].float().to(self.device)
        offset_prob = batch[3][:, :, 1].float().to(self.device)
        pitch_octave = batch[3][:, :, 2].long().to(self.device)
        pitch_class = batch[3][:, :, 3].long().to(self.device)

        on_weight = batch[2][0][0:1].float().to(self.device)
        off_weight = batch[2][0][1:2].float().to(self.device)

        split_train_loss0 = torch.dot(self.onset_criterion(onset_logits, onset_prob)[0], on_weight[0]) / torch.sum(on_weight)
        split_train_loss1 = torch.dot(self.offset_criterion(offset_logits, offset_prob)[0], off_weight[0]) / torch.sum(off_weight)
        split_train_loss2 = self.octave_criterion(pitch_octave_logits.permute(0, 2, 1), pitch_octave)
        split_train_loss3 = self.pitch_criterion(pitch_class_logits.permute(0, 2, 1), pitch_class)

        total_split_loss[0] = total_split_loss[0] + split_train_loss0.item()
        total_split_loss[1] = total_split_loss[1] + split_train_loss1.item()
        total_split_loss[2] = total_split_loss[2] + split_train_loss2.item()
        total_split_loss[3] = total_split_loss[3] + split_train_loss3.item()

        loss = split_train_loss0 + split_train_loss1 + split_train_loss2 + split_train_loss3
        return loss


def assign_ce_ctc_onset_weight(is_positive, distance):
    # For CE+CTC or CE smooth
    if is_positive:
        return min(max(1.0 - distance * 20.0, 0.0), 1.0) * 20.0
    else:
        return 1.0


def make_clip(rng, voiced):
    """Frames of a sung melody: notes (onset, offset, pitch) -> features, frame labels, weights
    (onset weights on the sung frames, offset weights on every frame)."""
    x = rng.normal(0, 0.3, size=(2, FRAMES, N_BINS)).astype(np.float32)
    label = np.zeros((FRAMES, 4), dtype=np.int64)
    label[:, 1] = 1
    label[:, 2] = 4
    label[:, 3] = 12
    weight = np.zeros((2, FRAMES), dtype=np.float32)
    weight[1] = 1.0
    t = 2
    while voiced and t < FRAMES - 6:
        length = int(rng.integers(4, 9))
        pitch = int(rng.integers(36, 84))
        end = min(t + length, FRAMES - 1)
        label[t, 0] = 1
        label[t:end, 1] = 0
        label[t:end, 2] = (pitch - 36) // 12
        label[t:end, 3] = pitch % 12
        x[0, t:end, (pitch - 36) * N_BINS // 48] += 3.0
        x[1, t, :] += 1.5
        for i in range(t, end):
            weight[0, i] = assign_ce_ctc_onset_weight(i == t, abs(i - t) * 0.0232)
        t = end + int(rng.integers(1, 4))
    return x, label, weight


class ClipDataset(Dataset):
    def __init__(self, n, seed, unvoiced_every):
        rng = np.random.default_rng(seed)
        self.items = [make_clip(rng, voiced=(unvoiced_every == 0 or i % unvoiced_every != 0)) for i in range(n)]

    def __getitem__(self, idx):
        x, label, weight = self.items[idx]
        return (torch.from_numpy(x), FRAMES, torch.from_numpy(weight), torch.from_numpy(label), idx)

    def __len__(self):
        return len(self.items)


def fit(model, loss_function_class, training_dataset, validation_dataset, epoch_num=5, batch_size=8, lr=1e-3):
    optimizer = optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.999))
    train_loader = DataLoader(training_dataset, batch_size=1, shuffle=True, drop_last=True)
    valid_loader = DataLoader(validation_dataset, batch_size=1, shuffle=False, drop_last=False)
    train_strongly_iterator = iter(train_loader)
    epoch_step_num = len(train_loader)
    start_time = time.time()
    optimizer.zero_grad()

    for epoch in range(1, epoch_num + 1):
        model.train()
        total_training_loss = 0
        total_split_loss = np.zeros(5)
        for batch_idx in range(epoch_step_num):
            try:
                ce_batch = next(train_strongly_iterator)
            except StopIteration:
                train_strongly_iterator = iter(train_loader)
                ce_batch = next(train_strongly_iterator)

            input_tensor = ce_batch[0]
            model_output = model(input_tensor)
            loss = loss_function_class(ce_batch, model_output, total_split_loss)
            total_training_loss += loss.item()
            loss = loss / float(batch_size)
            loss.backward()
            if batch_idx % 40 == 39:
                print('epoch {} step {} running train loss {:.4f} onset {:.4f}'.format(
                    epoch, batch_idx + 1, total_training_loss / (batch_idx + 1), total_split_loss[0] / (batch_idx + 1)))

            # Clip gradient to avoid gradient exploding
            nn.utils.clip_grad_norm_(model.parameters(), 5.0)

            if batch_idx % batch_size == 0:
                optimizer.step()
                optimizer.zero_grad()

        model.eval()
        with torch.no_grad():
            correct = 0
            voiced = 0
            onset_hits = 0
            onsets = 0
            for batch in valid_loader:
                _, on_off_sm, oct_logits, cls_logits = model(batch[0])
                lab = batch[3][0]
                v = lab[:, 1] == 0
                pred = oct_logits[0].argmax(-1) * 12 + cls_logits[0].argmax(-1)
                correct += int((pred[v] == (lab[v, 2] * 12 + lab[v, 3])).sum())
                voiced += int(v.sum())
                on = lab[:, 0] == 1
                onset_hits += int((on_off_sm[0, :, 1][on] > 0.5).sum())
                onsets += int(on.sum())
        n = len(train_loader)
        print('| Epoch [{:4d}/{:4d}] Train Loss {:.4f} onset {:.4f} offset {:.4f} pitch octave {:.4f} pitch chroma {:.4f} '
              '| val pitch acc {:.3f} onset recall {:.3f} Time {:.1f}'.format(
                  epoch, epoch_num, total_training_loss / n, total_split_loss[0] / n, total_split_loss[1] / n,
                  total_split_loss[2] / n, total_split_loss[3] / n, correct / max(voiced, 1), onset_hits / max(onsets, 1),
                  time.time() - start_time))


if __name__ == '__main__':
    model = Split_onset_pitch()
    train_set = ClipDataset(160, seed=1, unvoiced_every=23)
    valid_set = ClipDataset(32, seed=2, unvoiced_every=0)
    fit(model, CTC_CE_loss('cpu'), train_set, valid_set)
