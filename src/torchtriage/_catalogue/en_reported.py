"""Messages of the session-12 checks on the weight of loss terms and on reported metrics (English)."""

MESSAGES = {
    "silent.loss_term_divided_twice": "a loss term is divided by the batch size ({batch}) {times} times while it is reduced over the batch {reduced} time(s) (lines {lines}): it enters the loss with 1/{factor} of the weight the code gives it ({value} instead of {intended}, in a loss of {loss})",
    "silent.loss_term_divided_twice.cause": "the term is already a mean over the batch (a `mean`, a loss's default reduction, or a sum divided by the batch size) and is divided by the batch size again: its gradient into every shared parameter is that many times too small, and the weight written next to it no longer means what it says.",
    "silent.loss_term_divided_twice.next": "Divide the term by the batch size once, like the other terms (drop the extra `/ batch_size`, or sum instead of averaging before dividing).",
}
MESSAGES.update({
    "silent.metric_never_reset": "metric {metric} is computed {computes} times and never reset: its compute #{k} reports {value} over all {updates} updates ({samples} samples) so far, while over the {group} updates ({group_samples} samples) since the previous compute it is {own}",
    "silent.metric_never_reset.counts": "metric {metric} is computed {computes} times and never reset: its compute #{k} covers all {updates} updates ({samples} samples) so far, not only the {group} updates ({group_samples} samples) since the previous compute",
    "silent.metric_never_reset.cause": "a stateful metric keeps adding every update into its state until reset() is called: computed at each epoch's end without a reset, epoch k's figure is the metric over epochs 0..k. It lags behind the model and flattens its progress, and early stopping or checkpoint selection on it follows a stale average.",
    "silent.metric_never_reset.next": "Call metric.reset() right after compute() at the end of each epoch (or before each epoch's first update); keep a separate metric object for a figure meant to cover the whole run.",
})
MESSAGES.update({
    "batchmetrics.message": "{metric} is scored per batch and added into {target} at line {line}: the mean of its {batches} batch scores is {by_batch}, while over the pass's {samples} samples it is {over}",
    "batchmetrics.cause": "precision, recall, F1, AUC are not means over samples: the average of per-batch scores depends on how the batches are composed (a batch without a positive scores that class 0), and even accuracy weighs a small last batch like a full one. The epoch figure, and any model selection or early stopping on it, is not the metric of the epoch.",
    "batchmetrics.next": "Collect the pass's targets and predictions (or a confusion matrix) and compute the metric once over all of them at the pass's end.",
})
MESSAGES.update({
    "units.message": "{total} sums {what} but is divided by {denom}, which counts {counts}{extra}: the reported mean is {factor} times the mean of what was summed (mean batch size {batch})",
    "units.cause": "a running mean is right only when the sum and the count count the same things: batch means over the number of batches, or per-batch sums (loss times the batch size, a reduction='sum' loss) over the number of samples. Mixing them scales the figure by the batch size, and a further count of another loader scales it again; comparisons with the validation loss, or between runs with different batch sizes, are off by that factor.",
    "units.next": "Sum loss.item() * batch_size and divide by the number of samples (or sum the batch means and divide by the number of batches); drop factors that count another loader.",
})
MESSAGES.update({
    "unreset.message": "{collection} keeps one value per batch and line {line} averages it, but it is never emptied between passes: it holds {kept} values, the {batches} of this pass and {earlier} of earlier passes, so the mean reported is {whole} where this pass's batches give {own} (created at line {made})",
    "unreset.cause": "the list is created once, before the loop that repeats the pass: every epoch appends its batches to those of all earlier epochs, and the figure printed after epoch k is the running mean since the start of training. It lags behind the model, flattens its progress and misreports the train/validation gap.",
    "unreset.next": "Create the list at the start of each pass (move `{collection} = []` inside the epoch loop), or average only this pass's entries.",
})
MESSAGES.update({
    "metricroles.message": "{metric} is called with {first} as y_true and {second} as y_pred, but {first} holds the model's predictions and {second} the targets: on these {rows} rows the call returns {reported}, with the arguments in scikit-learn's order (y_true, y_pred) it is {right}",
    "metricroles.cause": "scikit-learn's metrics read their first argument as the ground truth. Precision and recall trade places when the two are swapped, a weighted average weighs each class by its count in y_true (here: how often the model predicts it), and labels= / pos_label select classes of the truth: the reported metric measures something else and ranks models wrongly.",
    "metricroles.next": "Pass the targets first: {metric}({second}, {first}, ...), or name the arguments (y_true=..., y_pred=...).",
})
