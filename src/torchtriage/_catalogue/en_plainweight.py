"""English: weights kept as plain tensors (session 12, `_ledger_step/_plainweights.py`)."""

MESSAGES = {
    "ledger.plain_weight.gate":
        "{count} tensor(s) of {cls} ({names}; {first}, ...) multiply the forward's values but are plain tensors, "
        "not nn.Parameter: they get no gradient and stay exactly {value} ({values} values, shape {shape})",
    "ledger.plain_weight.gate.cause":
        "a tensor assigned as a module attribute without nn.Parameter is not in parameters(): the optimizer never "
        "sees it, so a weight meant to learn from {value} never leaves it and the term it multiplies ({ops}) "
        "contributes nothing it could learn",
    "ledger.plain_weight.constant.cause":
        "a tensor assigned as a module attribute without nn.Parameter or register_buffer is not in parameters() "
        "nor in state_dict(): fine for a fixed constant, but a weight meant to learn never changes",
    "ledger.plain_weight.constant":
        "{count} plain tensor attribute(s) of {cls} ({first}, shape {shape}) are used as multipliers ({ops}) in "
        "the forward; they are not parameters and never train",
    "ledger.plain_weight.next":
        "create it as nn.Parameter(...) in __init__ (then it is in model.parameters() and trained); "
        "register_buffer(...) if it is a constant",
}
