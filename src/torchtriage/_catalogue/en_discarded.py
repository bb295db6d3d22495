"""English: backward passes whose gradient is reset before any optimizer step applies it."""

MESSAGES = {
    "ledger.discarded":
        "{discarded} of {total} backward passes at {backward} had their gradient reset by zero_grad ({reset}) "
        "before any optimizer step applied it, while the other {applied} were applied: those batches' "
        "gradients were computed and discarded, never used",
    "ledger.discarded.cause":
        "zero_grad() runs before every backward() but step() only every few backward passes, so each step "
        "sees the last pass's gradient only: the gradient accumulation keeps one micro-batch and throws "
        "the others away",
    "ledger.discarded.next":
        "call zero_grad() right after optimizer.step() (inside the same `if` that steps), not before each "
        "backward(), so the gradients of the accumulated batches add up",
}
