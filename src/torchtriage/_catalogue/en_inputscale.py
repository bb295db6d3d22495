"""Messages of the session-11 checks on the scale of inputs and of pass metrics (English)."""

MESSAGES = {
    "data.int_scaled_as_narrower": "{dtype} data divided by {c}, the maximum of {kind} data: its values reach {top} (its type holds up to {limit}), so the result reaches {q} instead of staying in [0, 1]",
    "data.int_scaled_as_narrower.cause": "the scale constant was written for {kind} data and this tensor is wider (a 16-bit image decoded as uint16 / int32): the inputs fall far outside the range the code normalises them to, and the model trains on them as they are.",
    "data.int_scaled_as_narrower.next": "Divide by the maximum of the data's own type (torch.iinfo(x.dtype).max) or of its bit depth, before converting it to float.",
    "batchmeans.message": "{collection} keeps one ratio per batch ({ratio}) and line {line} averages them over the {batches} batches: batches of {smallest} to {largest} samples weigh the same, so the mean of the batches is {by_batch} where the {samples} samples give {by_row}",
    "batchmeans.cause": "each batch's ratio is already divided by that batch's size; averaging the ratios gives every batch one vote, so a row of a small batch (the last, partial one of the pass) weighs as much as many rows of a full one, and the metric depends on the batch size and on which samples land in the last batch.",
    "batchmeans.next": "sum the numerators and the batch sizes over the pass and divide once (correct += (pred == y).sum().item(); n += y.size(0); acc = correct / n), or weight each batch's ratio by its size.",
}
