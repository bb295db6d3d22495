"""Contracts on the ops of the loss region: a loss's input domain read from its producer chain,
normalizations over the wrong axis, normalizations by a spread that is zero (issue 26 item 4)."""

MESSAGES = {
    "silent.squashed_twice": "{loss} gets sigmoid applied twice: a sigmoid of {inner} outputs, which are already probabilities; its input can only lie in ({lo}, {hi}), so the loss cannot come within {floor} of its minimum on these targets",
    "silent.squashed_twice.cause": "the model already ends in a squashing op ({inner}) and the loss code applies sigmoid again: every prediction is pushed into a narrow band that cannot reach the 0/1 targets, and the gradient is damped by sigmoid' <= 0.25",
    "silent.squashed_twice.next": "feed the model's probabilities to the loss directly (drop the second sigmoid), or drop the model's final sigmoid and use binary_cross_entropy_with_logits",
    "silent.eps_dominated_division": "division by a near-zero divisor: for {count} elements the divisor is only the epsilon ({eps}), so the quotient reaches {quotient} there against at most {regular} elsewhere",
    "silent.eps_dominated_division.cause": "a normalization by a std (or norm) that is zero for some group while its numerator is not (a leave-one-out or otherwise uncentred numerator): the epsilon is the whole divisor, the values are huge but finite and those elements outweigh the rest of the loss and its gradient",
    "silent.eps_dominated_division.next": "skip the normalization where the std is zero (divide only where std > 0), or centre the numerator over the same group the std is taken over",
    "silent.softmax_over_singleton": "{op} over dim {dim} of size 1 (shape {shape}): its output is always {constant}, so everything computed from it is constant and no gradient passes through it",
    "silent.softmax_over_singleton.cause": "a normalization over an axis of size 1 has nothing to normalize: softmax gives exactly 1 (log_softmax 0) whatever its input, so the layers that compute that input never learn through it; usually the dim points at a singleton axis of a view instead of the axis meant",
    "silent.softmax_over_singleton.next": "take the softmax over the axis that holds the alternatives (the capsules, classes or keys): check the dim against the tensor's shape at that line",
    "silent.softmax_not_contracted_axis": "softmax over dim {dim} of shape {shape}, but the next matmul sums over dim {contracted}: the weights it gets sum to {lo}..{hi} over that axis instead of 1",
    "silent.softmax_not_contracted_axis.cause": "attention weights must be a distribution over the axis they are contracted with (each query's weights over the keys); normalizing another axis (the queries, or the heads) leaves each weighted sum unnormalized, and masked positions (at -inf over the other axis) still get weight",
    "silent.softmax_not_contracted_axis.next": "normalize over the axis the matmul contracts: softmax(dim=-1) for scores of shape [..., queries, keys]",
    "dynamics.plateau_wrong_mode": "ReduceLROnPlateau in mode='{mode}' cut the lr while the metric it monitors {direction} at every call ({first} -> {last} over {calls} calls): it never improved in mode '{mode}'",
    "dynamics.plateau_wrong_mode.cause": "mode='{mode}' counts a {direction} metric as no improvement: handed a score where higher is better (an accuracy) in the default mode='min', the scheduler cuts the lr after every `patience` evaluations while the model is still improving, and training freezes",
    "dynamics.plateau_wrong_mode.next": "build the scheduler with mode='{other}' for this metric (ReduceLROnPlateau(optimizer, mode='{other}', ...)), or step it with the validation loss",
    "gradients.loss_no_grad_fn.message.non_differentiable": "the loss passed to backward() does not require grad (no grad_fn): its path from the model's output goes through {op} at {line}, which is not differentiable; backward() will fail with \"element 0 of tensors does not require grad\"",
    "gradients.loss_no_grad_fn.cause.non_differentiable": "{op} returns values with no gradient (indices, comparisons, integers): everything computed from them is a constant to autograd, so no parameter can be reached from the loss",
    "gradients.loss_no_grad_fn.next.non_differentiable": "compute the loss on the model's differentiable output (logits with cross_entropy, or a soft-argmax: softmax(logits) @ bin_centers) and keep {op} for decoding predictions only",
}
