"""English: one backward's gradient left in another optimizer's .grad and applied by its step."""

MESSAGES = {
    "ledger.spilled":
        "{stepper} stepped {n} times with .grad that still held the gradient of the backward at {backward} "
        "(applied by {owner}): its updates follow that other loss as well as its own",
    "ledger.spilled.cause":
        "the backward for {owner} also reaches these parameters (its loss runs through them: a generator's "
        "loss through the discriminator) and nothing resets their .grad before their own backward adds "
        "onto it: zero_grad() runs right after their step instead of before their loss",
    "ledger.spilled.next":
        "call zero_grad() of that optimizer (or model) just before its own loss's backward(), or detach the "
        "other loss's path through these parameters (requires_grad_(False) while the other loss runs)",
}
