"""Messages of the session-12 checks on the weight of loss terms and on reported metrics (English)."""

MESSAGES = {
    "silent.loss_term_divided_twice": "a loss term is divided by the batch size ({batch}) {times} times while it is reduced over the batch {reduced} time(s) (lines {lines}): it enters the loss with 1/{factor} of the weight the code gives it ({value} instead of {intended}, in a loss of {loss})",
    "silent.loss_term_divided_twice.cause": "the term is already a mean over the batch (a `mean`, a loss's default reduction, or a sum divided by the batch size) and is divided by the batch size again: its gradient into every shared parameter is that many times too small, and the weight written next to it no longer means what it says.",
    "silent.loss_term_divided_twice.next": "Divide the term by the batch size once, like the other terms (drop the extra `/ batch_size`, or sum instead of averaging before dividing).",
}
