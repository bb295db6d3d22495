# Source: penghao-wu/visual_jigsaw, eval/eval_mmvp.py, commit d96478fb8e42ed63452ed0c49669bec4076f4348
# Report: https://github.com/penghao-wu/visual_jigsaw/pull/11
import random

import numpy as np
import torch
import torch.nn as nn

world_size, rank = 1, 0


def make_mmvp_like(n_pairs, rng, dim=32, delta=0.35):
    # MMVP-style pairs: two images that look almost the same (shared base) but differ in one
    # visual detail, asked the same question with opposite correct answers (a) / (b)
    direction = np.ones(dim) / np.sqrt(dim)
    data = []
    for k in range(n_pairs):
        base = rng.normal(0, 1, dim)
        for sign, answer in ((1, '(a)'), (-1, '(b)')):
            x = base + sign * delta * direction + rng.normal(0, 0.1, dim)
            data.append({'Question ID': len(data) + 1, 'image': x.astype(np.float32), 'Correct Answer': answer})
    return data


class TinyVLM(nn.Module):
    def __init__(self, dim=32):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, 64), nn.ReLU(), nn.Linear(64, 2))

    def generate(self, image):
        with torch.no_grad():
            choice = self.net(torch.from_numpy(image)[None]).argmax(1).item()
        return 'ab'[choice]


def finetune(model, train_data, epochs=3):
    x = torch.from_numpy(np.stack([d['image'] for d in train_data]))
    y = torch.tensor([0 if d['Correct Answer'][1] == 'a' else 1 for d in train_data])
    opt = torch.optim.Adam(model.net.parameters(), lr=3e-3)
    for epoch in range(epochs):
        perm = torch.randperm(len(y))
        for i in range(0, len(y), 64):
            idx = perm[i:i + 64]
            loss = nn.functional.cross_entropy(model.net(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(f"finetune epoch {epoch}: loss {loss.item():.4f}")


def get_first_alphabetic_letter(s):
    for ch in s:
        if ch.isalpha():
            return ch
    return ''


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    rng = np.random.RandomState(0)
    model = TinyVLM()
    finetune(model, make_mmvp_like(300, rng))

    data = make_mmvp_like(150, rng)
    for i in range(0, len(data), 2):
        data[i]['pair_index'] = i//2
        data[i+1]['pair_index'] = i//2

    random.seed(42)
    random.shuffle(data)

    # Split data for distributed evaluation
    per_rank_data = len(data) // world_size
    start_idx = rank * per_rank_data
    end_idx = start_idx + per_rank_data if rank < world_size - 1 else len(data)
    rank_data = data[start_idx:end_idx]

    results = [(start_idx + j, model.generate(example['image'])) for j, example in enumerate(rank_data)]

    if rank == 0:
        all_outputs = [None] * len(data)
        for idx, output in results:
            assert idx < len(all_outputs)
            all_outputs[idx] = output
        assert all_outputs[-1] is not None

        final_output = []
        correct_list = []

        for input_example, model_output in zip(data, all_outputs):
            answer = input_example['Correct Answer'][1]
            model_output = model_output.strip().strip('".').strip("'")
            model_output = get_first_alphabetic_letter(model_output)

            correct = int(model_output.lower() == answer.lower())
            correct_list.append(correct)
            final_output.append({'ground_truth': answer, 'model_output': model_output, 'correct': correct,
                                 'pair_index': input_example['pair_index']})

        # Calculate and print accuracy
        pair_accuracy_list = [correct_list[i] and correct_list[i+1] for i in range(0, len(correct_list), 2)]

        accuracy = np.mean(correct_list) * 100
        print(f"\nAccuracy: {accuracy:.2f}")

        pair_accuracy = np.mean(pair_accuracy_list) * 100
        print(f"\n Pair Accuracy: {pair_accuracy:.2f}")

        both = {}
        for r in final_output:
            both.setdefault(r['pair_index'], []).append(r['correct'])
        print(f" (pairs judged: {len(pair_accuracy_list)}; pairs whose two questions were both answered correctly: "
              f"{sum(all(v) for v in both.values())} of {len(both)})")
