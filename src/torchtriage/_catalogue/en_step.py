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
    # why a whole-step replay could not run (evidence "why" of a not-reproduced finding)
    "nonfinite.why.no_record": "no record of this step (no model call, no recorded op)",
    "nonfinite.why.not_taped": "the ops outside the models were not recorded at this step (the tape is on for the first steps only); it is now on for the next steps",
    "nonfinite.why.truncated": "the step ran more ops outside the models than the tape keeps",
    "nonfinite.why.replay_finite": "the whole step was replayed with the same inputs and RNG state and stayed finite: the step is not deterministic, or it read state that was not restored",
    "nonfinite.backward_code":
        "The forward pass is finite but the gradient is not: the backward of {op}, written outside the models at {line}, first produced {kind} (step {step})",
    "nonfinite.module_of": "{module} of {model}",
    "repro.shrink.invalid": "invalid (the candidate broke the step)",
    "repro.shrink.unsliced": "every half of the batch broke the step instead of curing it: a tensor of the step was not sliced with the batch: {tensors}; the replay saw: {seen}",
    "repro.shrink.unrecorded": "one the bundle does not hold (a target or mask built by the script itself)",
    "gradients.leaf_not_registered.message.grows":
        "the loss depends on a tensor {shape} with requires_grad=True that no optimizer holds, and its .grad keeps growing ({line})",
    "gradients.leaf_not_registered.cause.grows":
        "each backward adds into its .grad and nothing zeroes it or applies it: the values pile up across steps (memory and a wrong gradient if it is read later)",
    "gradients.leaf_not_registered.next.grows":
        "pass it to the optimizer if it should train; otherwise create it with requires_grad=False, or zero its .grad each step",
    # factory replay of the whole step (the bundle's step program)
    "repro.step.models":
        "the failing step called several models ({labels}): the factory must return them all, "
        "as {{'models': {{label: model, ...}}, 'optimizers': [...]}} with the labels the bundle names",
    "repro.step.missing_models":
        "the bundle's step calls {labels}; the factory gave {given} (missing: {missing})",
    "repro.note.step_left_out":
        "note: ops not stored in the bundle (their results were stored instead): {ops}",
}
