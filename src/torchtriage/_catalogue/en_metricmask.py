"""English: a metric that counts target positions the training leaves out (`_dynamics/_ignored.py`)."""

MESSAGES = {
    "silent.metric_counts_ignored":
        "the metric computed from ({op}) counts {ignored} of {n} target positions ({share}) that are {kind} "
        "({what}): it reads {computed}, and {moved} when only those positions change; predictions match "
        "{rate_kept} of the kept positions but {rate_all} of all positions",
    "silent.metric_counts_ignored.cause_loss":
        "the loss skips targets equal to its {what}, but the comparison runs over every position and the "
        "denominator counts them (numel): a prediction is never {what}'s value, so each ignored position counts "
        "as a miss, and even a perfect model reads only the share of real targets",
    "silent.metric_counts_ignored.cause_pad":
        "the targets end in padding ({what} of the model's embedding) and the metric compares and counts those "
        "positions: the model predicts padding trivially, so the number mostly measures how much of each row "
        "is padding, not how well real tokens are predicted",
    "silent.metric_counts_ignored.next":
        "compute the metric over the kept positions only: keep = target != ignored_value; "
        "correct = ((pred == target) & keep).sum(); total = keep.sum()",
    "silent.metric_counts_ignored.kind_loss": "ignored by the loss",
    "silent.metric_counts_ignored.kind_pad": "trailing padding",
}
