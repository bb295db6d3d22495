"""Messages of the session-13 checks on figures that follow only the last batch: BatchNorm running
statistics with a momentum in TensorFlow's convention, reported running losses never accumulated
(English)."""

MESSAGES = {
    "dynamics.bn_momentum_last_batch":
        "{op} {path} tracks its running statistics with momentum={momentum} ({count} BatchNorm(s) like it: "
        "{examples}): PyTorch's momentum is the weight of the NEW batch, so each update keeps only {keep} of the "
        "running mean and variance; after {updates} updates the eval-mode running mean is {off} running standard "
        "deviations from what momentum {intended} would keep (it jumps {jump} per update)",
    "dynamics.bn_momentum_last_batch.cause":
        "TensorFlow, Keras and Flax call the weight of the OLD value the momentum (decay 0.99); PyTorch's BatchNorm "
        "updates running = (1 - momentum) * running + momentum * batch. momentum=0.99 copied from them makes the "
        "running statistics the statistics of the last training batch: the eval-mode model normalizes with "
        "whichever batch came last, and validation results jump from epoch to epoch",
    "dynamics.bn_momentum_last_batch.next":
        "pass momentum = 1 - (the TensorFlow value): momentum=0.01 for a decay of 0.99, or keep PyTorch's default "
        "0.1 (momentum=None for a cumulative average)",
}
MESSAGES.update({
    "unsummed.constant":
        "{quotient} is reported but {name} is only ever set to 0 (lines {lines}) and nothing adds to it over the "
        "pass's {batches} batches: the running figure is {reported} at every report",
    "unsummed.constant.losses":
        "{quotient} is reported but {name} is only ever set to 0 (lines {lines}) and nothing adds to it over the "
        "pass's {batches} batches: the running figure is {reported} at every report while the {count} training "
        "losses of the pass average {mean}",
    "unsummed.last":
        "{quotient} divides {name} by a count of the pass's {batches} batches, but the loop assigns {name} (lines "
        "{lines}) instead of adding to it: the figure is the last batch's value over the count, {reported}",
    "unsummed.last.losses":
        "{quotient} divides {name} by a count of the pass's {batches} batches, but the loop assigns {name} (lines "
        "{lines}) instead of adding to it: the figure is the last batch's value over the count, {reported}, while "
        "the {count} training losses of the pass average {mean}",
    "unsummed.reset":
        "{quotient} divides {name} by a count of the pass's {batches} batches, but the loop sets {name} to 0 at "
        "every batch (lines {lines}) before adding to it: the figure is the last batch's value over the count, "
        "{reported}",
    "unsummed.reset.losses":
        "{quotient} divides {name} by a count of the pass's {batches} batches, but the loop sets {name} to 0 at "
        "every batch (lines {lines}) before adding to it: the figure is the last batch's value over the count, "
        "{reported}, while the {count} training losses of the pass average {mean}",
    "unsummed.cause":
        "a running loss is a mean of the pass's values only when the loop adds each value into the sum "
        "(total += loss.item()); with the addition missing, or written as an assignment, the printed or logged "
        "figure is a constant or the last batch alone, and learning curves, early stopping or model selection "
        "read a number the run never computed",
    "unsummed.next":
        "add each batch's value into the sum inside the loop (total += loss.item(), or loss.item() * batch_size "
        "for a per-sample mean) before dividing it by the count",
})
MESSAGES.update({
    "lastlogged.message":
        "{name} is reported by {via} after the loop that adds it into {total} at line {line}: it holds the last of the "
        "pass's {batches} batches, {last}, while {total} over the pass averages {mean}",
    "lastlogged.cause":
        "the loop builds the pass's average in the sum, but the report after the loop passes the per-batch name, which "
        "still holds what the last batch left in it: one batch of the split. The logged curve is noisy, reads off the "
        "figure the trainer uses, and its best point is not the epoch that was chosen.",
    "lastlogged.next":
        "report the average the loop built ({total} divided by the batches) instead of {name}",
})
