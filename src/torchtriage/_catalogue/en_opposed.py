"""Messages of the opposed-rows check (`_silent/_opposed.py`, session 14), English."""

MESSAGES = {
    "data.opposite_targets": "{count} of {sampled} sampled rows ({share}) of this input are identical to rows of another input that the same weights ({first}) saw in this step, and the loss pushes each such pair in opposite directions (mean gradient cosine {cosine}): the same input is trained toward two opposite targets",
    "data.opposite_targets.cause": "the two inputs were meant to differ (positive and negative data, data and samples, the two sides of a contrastive loss), but some rows are the same: negatives drawn by shuffling labels or indices (`y[randperm(n)]`) keep about 1 in n_classes rows unchanged. The loss raises one output and lowers its identical twin, so those rows' gradients cancel and teach the model that a correct input is wrong.",
    "data.opposite_targets.next": "Draw the negatives so that they always differ from their positives (a label offset `(y + randint(1, n_classes)) % n_classes`, or resample the matching rows); count `(x_neg == x_pos).all(1).sum()` to check.",
}
