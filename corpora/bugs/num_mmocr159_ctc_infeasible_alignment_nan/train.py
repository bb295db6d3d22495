# Source: open-mmlab/mmocr, mmocr/models/textrecog/losses/ctc_loss.py, mmocr/models/textrecog/decoders/crnn_decoder.py, mmocr/models/textrecog/convertors/ctc.py (str2tensor), configs/_base_/recog_models/crnn.py, commit e7f27ae31712850843ba8ba9348eb4793cc76a15
# Report: https://github.com/open-mmlab/mmocr/pull/159
# CRNN text recognition with CTC loss (mmocr config: CTCLoss(flatten=False)). Images are resized to
# a fixed 32x128, so the backbone emits seq_len = 16 time steps whatever the text length. The
# VeryDeepVgg backbone is reduced to 4 conv blocks; the datasets are replaced by synthetic renders
# of digit strings (house / phone numbers), a few of them long with repeated digits.
import torch
import torch.nn as nn
import torch.nn.functional as F


class CTCLoss(nn.Module):
    def __init__(self, flatten=True, blank=0, reduction='mean', zero_infinity=False, **kwargs):
        super().__init__()
        assert isinstance(flatten, bool)
        assert isinstance(blank, int)
        assert isinstance(reduction, str)
        assert isinstance(zero_infinity, bool)

        self.flatten = flatten
        self.blank = blank
        self.ctc_loss = nn.CTCLoss(
            blank=blank, reduction=reduction, zero_infinity=zero_infinity)

    def forward(self, outputs, targets_dict):

        outputs = torch.log_softmax(outputs, dim=2)
        bsz, seq_len = outputs.size(0), outputs.size(1)
        input_lengths = torch.full(
            size=(bsz, ), fill_value=seq_len, dtype=torch.long)
        outputs_for_loss = outputs.permute(1, 0, 2).contiguous()  # T * N * C

        if self.flatten:
            targets = targets_dict['flatten_targets']
        else:
            targets = torch.full(
                size=(bsz, seq_len), fill_value=self.blank, dtype=torch.long)
            for idx, tensor in enumerate(targets_dict['targets']):
                valid_len = min(tensor.size(0), seq_len)
                targets[idx, :valid_len] = tensor[:valid_len]

        target_lengths = targets_dict['target_lengths']

        loss_ctc = self.ctc_loss(outputs_for_loss, targets, input_lengths,
                                 target_lengths)

        losses = dict(loss_ctc=loss_ctc)

        return losses


class CTCConvertor:
    def __init__(self, chars='0123456789'):
        self.idx2char = ['<BLK>'] + list(chars)
        self.char2idx = {c: i for i, c in enumerate(self.idx2char)}

    def str2tensor(self, strings):
        tensors = []
        for s in strings:
            tensors.append(torch.IntTensor([self.char2idx[c] for c in s]))
        target_lengths = torch.IntTensor([len(t) for t in tensors])
        flatten_target = torch.cat(tensors)
        return {'targets': tensors, 'flatten_targets': flatten_target, 'target_lengths': target_lengths}

    def tensor2str(self, output):
        strings = []
        for seq in output.argmax(-1).tolist():
            out, prev = [], 0
            for idx in seq:
                if idx != prev and idx != 0:
                    out.append(self.idx2char[idx])
                prev = idx
            strings.append(''.join(out))
        return strings


class BidirectionalLSTM(nn.Module):
    def __init__(self, nIn, nHidden, nOut):
        super().__init__()
        self.rnn = nn.LSTM(nIn, nHidden, bidirectional=True)
        self.embedding = nn.Linear(nHidden * 2, nOut)

    def forward(self, input):
        recurrent, _ = self.rnn(input)
        T, b, h = recurrent.size()
        output = self.embedding(recurrent.view(T * b, h))
        return output.view(T, b, -1)


class CRNNNet(nn.Module):
    def __init__(self, num_classes=11):
        super().__init__()

        def block(cin, cout, pool):
            return nn.Sequential(nn.Conv2d(cin, cout, 3, 1, 1), nn.BatchNorm2d(cout), nn.ReLU(), nn.MaxPool2d(pool))
        self.backbone = nn.Sequential(block(1, 32, (2, 2)), block(32, 64, (2, 2)), block(64, 96, (2, 2)),
                                      block(96, 128, (4, 1)))
        self.decoder = nn.Sequential(BidirectionalLSTM(128, 64, 64), BidirectionalLSTM(64, 64, num_classes))

    def forward(self, img):
        feat = self.backbone(img)
        assert feat.size(2) == 1, 'feature height must be 1'
        x = feat.squeeze(2).permute(2, 0, 1)
        x = self.decoder(x)
        return x.permute(1, 0, 2).contiguous()


def render(text, glyphs):
    cols = [glyphs[int(c)] for c in text]
    img = torch.cat(cols, dim=1)[None, None]
    return F.interpolate(img, size=(32, 128), mode='bilinear', align_corners=False)[0]


def make_batch(gen, glyphs, bsz=32):
    texts = []
    for _ in range(bsz):
        if torch.rand(1, generator=gen).item() < 0.06:
            digits = torch.randint(0, 10, (7,), generator=gen).tolist()
            texts.append(''.join(str(d) * 2 for d in digits))
        else:
            n = int(torch.randint(3, 8, (1,), generator=gen))
            texts.append(''.join(str(d) for d in torch.randint(0, 10, (n,), generator=gen).tolist()))
    imgs = torch.stack([render(t, glyphs) for t in texts]) + 0.1 * torch.randn(bsz, 1, 32, 128, generator=gen)
    return imgs, texts


def main():
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    glyphs = (torch.rand(10, 32, 12, generator=gen) > 0.5).float()
    batches = [make_batch(gen, glyphs) for _ in range(40)]
    val_imgs, val_texts = make_batch(gen, glyphs, 128)
    model = CRNNNet()
    label_convertor = CTCConvertor()
    loss_fn = CTCLoss(flatten=False)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for epoch in range(2):
        model.train()
        for step, (img, gt_labels) in enumerate(batches):
            targets_dict = label_convertor.str2tensor(gt_labels)
            out_dec = model(img)
            losses = loss_fn(out_dec, targets_dict)
            optimizer.zero_grad()
            losses['loss_ctc'].backward()
            optimizer.step()
            if step % 10 == 0:
                print('epoch %d step %2d loss_ctc %.4f' % (epoch, step, losses['loss_ctc'].item()))
        model.eval()
        with torch.no_grad():
            preds = label_convertor.tensor2str(model(val_imgs))
        acc = sum(p == t for p, t in zip(preds, val_texts)) / len(val_texts)
        print('epoch %d word accuracy %.3f' % (epoch, acc))


if __name__ == '__main__':
    main()
