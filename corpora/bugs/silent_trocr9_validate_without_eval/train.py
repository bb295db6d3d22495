# Source: rsommerfeld/trocr, src/scripts.py (predict / validate / train), commit 574549c8cd907b26ac7e92caf39516f1e65ae819
# Report: https://github.com/rsommerfeld/trocr/issues/9
from dataclasses import dataclass

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset

VOCAB = "0123456789"
BOS, EOS, PAD = 10, 11, 12
MAX_LEN = 6


class TinyProcessor:
    def batch_decode(self, ids, skip_special_tokens=True):
        return ["".join(VOCAB[t] for t in row.tolist() if t < 10) for row in ids]


class OCRDataset(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        glyphs = torch.randn(10, 8, 8, generator=torch.Generator().manual_seed(7))
        self.labels = ["".join(VOCAB[d] for d in torch.randint(0, 10, (4,), generator=g).tolist()) for _ in range(n)]
        self.images = []
        for text in self.labels:
            img = torch.cat([glyphs[int(c)] for c in text], dim=1) + 0.6 * torch.randn(8, 32, generator=g)
            self.images.append(img.unsqueeze(0))

    def __len__(self):
        return len(self.labels)

    def get_label(self, idx):
        return self.labels[idx]

    def get_path(self, idx):
        return f"val/{idx}.png"

    def __getitem__(self, idx):
        ids = [int(c) for c in self.labels[idx]] + [EOS] + [PAD] * (MAX_LEN - 5)
        return {"idx": idx, "input": self.images[idx], "label": torch.tensor(ids)}


@dataclass
class ModelOutput:
    loss: torch.Tensor


class VisionEncoderDecoderModel(nn.Module):
    def __init__(self, d=96, dropout=0.2):
        super().__init__()
        self.encoder = nn.Sequential(nn.Conv2d(1, d, (8, 4), stride=(8, 4)), nn.GELU(), nn.Dropout(dropout))
        self.embed = nn.Embedding(13, d)
        self.enc_pos = nn.Parameter(0.02 * torch.randn(1, 8, d))
        self.dec_pos = nn.Parameter(0.02 * torch.randn(1, MAX_LEN, d))
        self.decoder = nn.TransformerDecoder(
            nn.TransformerDecoderLayer(d, 4, 2 * d, dropout=dropout, batch_first=True), num_layers=2)
        self.lm_head = nn.Linear(d, 13)

    def logits(self, pixel_values, decoder_input_ids):
        memory = self.encoder(pixel_values).flatten(2).transpose(1, 2) + self.enc_pos
        L = decoder_input_ids.shape[1]
        causal = torch.triu(torch.full((L, L), float("-inf")), 1)
        return self.lm_head(self.decoder(self.embed(decoder_input_ids) + self.dec_pos[:, :L], memory, tgt_mask=causal))

    def forward(self, pixel_values, labels):
        start = torch.full((labels.shape[0], 1), BOS)
        decoder_input_ids = torch.cat([start, labels[:, :-1].clamp(max=EOS)], 1)
        logits = self.logits(pixel_values, decoder_input_ids)
        return ModelOutput(nn.functional.cross_entropy(logits.reshape(-1, 13), labels.reshape(-1), ignore_index=PAD))

    def generate(self, inputs):
        ids = torch.full((inputs.shape[0], 1), BOS)
        for _ in range(MAX_LEN - 1):
            ids = torch.cat([ids, self.logits(inputs, ids)[:, -1].argmax(-1, keepdim=True)], 1)
        return ids[:, 1:]


@dataclass
class Context:
    model: VisionEncoderDecoderModel
    processor: TinyProcessor
    train_dataset: OCRDataset
    train_dataloader: DataLoader
    val_dataset: OCRDataset
    val_dataloader: DataLoader


def predict(processor, model, dataloader):
    output = []
    with torch.no_grad():
        for i, batch in enumerate(dataloader):
            inputs: torch.Tensor = batch["input"]

            generated_ids = model.generate(inputs)
            generated_text = processor.batch_decode(generated_ids, skip_special_tokens=True)

            ids = [t.item() for t in batch["idx"]]
            output.extend(zip(ids, generated_text))

    return output


# will return the accuracy but not print predictions
def validate(context: Context, print_wrong: bool = False) -> float:
    predictions = predict(context.processor, context.model, context.val_dataloader)
    assert len(predictions) > 0

    correct_count = 0
    wrong_count = 0
    for id, prediction in predictions:
        label = context.val_dataset.get_label(id)
        path = context.val_dataset.get_path(id)

        if prediction == label:
            correct_count += 1
        else:
            wrong_count += 1
            if print_wrong:
                print(f"Predicted: \t{prediction}\nLabel: \t\t{label}\nPath: \t\t{path}")

    if print_wrong:
        print(f"\nCorrect: {correct_count}\nWrong: {wrong_count}")
    return correct_count / (len(predictions))


def train(context: Context, num_epochs=5):
    model = context.model
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)

    num_training_steps = num_epochs * len(context.train_dataloader)
    lr_scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: 1 - s / num_training_steps)

    model.train()

    for epoch in range(num_epochs):
        for j, batch in enumerate(context.train_dataloader):
            inputs: torch.Tensor = batch["input"]
            labels: torch.Tensor = batch["label"]

            outputs = model(pixel_values=inputs, labels=labels)
            loss = outputs.loss
            loss.backward()

            optimizer.step()
            lr_scheduler.step()
            optimizer.zero_grad(set_to_none=True)

            del loss, outputs

        if len(context.val_dataloader) > 0:
            accuracy = validate(context)
            print(f"---- Epoch {1 + epoch} ---- Accuracy: {accuracy}")


if __name__ == "__main__":
    torch.manual_seed(0)
    train_dataset, val_dataset = OCRDataset(1200, seed=1), OCRDataset(200, seed=2)
    context = Context(VisionEncoderDecoderModel(), TinyProcessor(), train_dataset,
                      DataLoader(train_dataset, batch_size=32, shuffle=True), val_dataset,
                      DataLoader(val_dataset, batch_size=50, shuffle=False))
    train(context, num_epochs=6)
    context.model.eval()
    print("accuracy of the trained model in eval mode:", validate(context))
