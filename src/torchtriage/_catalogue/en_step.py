"""English: the step record and the parameter index (issue 11)."""

MESSAGES = {
    # raw tensors an optimizer holds (parameters without a module)
    "gradients.unreached.message.raw":
        "{parameter} is held by an optimizer but gets no gradient from any loss",
    "gradients.unreached.cause.raw":
        "{parameter} is not used on the way to the loss, or its value was replaced by a copy without "
        "history (a tensor rebuilt from data, torch.tensor(...), a tensor created with requires_grad=False)",
    "gradients.unreached.next.raw":
        "follow {parameter} from the optimizer to the loss: every use must be a tensor op on it, not on a copy",
    # a leaf requiring grad made outside any model, that no optimizer holds: unusual, not wrong
    "gradients.leaf_not_registered.message.outside":
        "the loss depends on a tensor {shape} with requires_grad=True that no optimizer holds ({line})",
    "gradients.leaf_not_registered.cause.outside":
        "it gets a .grad at each backward, but no optimizer updates it: fine for an input whose gradient you "
        "read (saliency, adversarial examples), a waste otherwise",
    "gradients.leaf_not_registered.next.outside":
        "pass it to the optimizer if it should train; otherwise create it with requires_grad=False",
    "gradients.cut_no_grad.message.raw":
        "{count} parameter(s) ({parameter}, ...) get no gradient: they are used under {mode} ({line})",
}
