"""English: param groups whose own settings never take effect."""

MESSAGES = {
    "dynamics.group_lrs_collapsed":
        "{optimizer}'s {groups} param groups were declared with different learning rates ({declared}) but ran at "
        "the same lr on all {steps} optimizer steps (peak {peak}, last {last}): the per-group rates never took effect",
    "dynamics.group_lrs_collapsed.scheduler":
        "{optimizer}'s {groups} param groups were declared with different learning rates ({declared}) but the "
        "{scheduler} scheduler overrides them: every group ran at the same lr on all {steps} optimizer steps "
        "(peak {peak}, last {last}), so the per-group rates never took effect",
    "dynamics.group_lrs_collapsed.cause":
        "a scheduler given one scalar where it takes one value per param group (OneCycleLR's max_lr, CyclicLR's "
        "base_lr/max_lr) sets that value in every group, discarding each group's own lr; a loop writing one lr into "
        "every param group does the same",
    "dynamics.group_lrs_collapsed.next":
        "pass one value per param group, e.g. max_lr=[g['lr'] for g in optimizer.param_groups], or scale the "
        "written lr by each group's own ratio",
    "dynamics.group_lrs_collapsed.unread":
        "{optimizer}'s {groups} param groups carry different learning-rate values under the key '{key}' ({declared}), a key torch.optim does not read and nothing in the run wrote into 'lr': every group ran at the same lr on all {steps} optimizer steps (peak {peak}, last {last}), so the per-group rates were ignored",
    "dynamics.group_lrs_collapsed.unread.cause":
        "a param group keeps any extra key it is given, but the optimizer steps with the group's 'lr' only; a multiplier such as 'lr_mul' or 'lr_scale' takes effect only where some code (a custom scheduler, the training loop) sets group['lr'] from it, and here none did",
    "dynamics.group_lrs_collapsed.unread.next":
        "put the rate itself in the group, e.g. {{'params': ..., 'lr': base_lr * lr_mul}}, or have the scheduler set group['lr'] = base_lr * group['lr_mul'] at every step",
    "dynamics.empty_param_group":
        "param group {index} of {optimizer} holds no parameter ({sizes} tensors per group), so its setting "
        "{settings} applies to nothing; the other groups run with {others}",
    "dynamics.empty_param_group.meant":
        "param group {index} of {optimizer} ({settings}) is empty ({sizes} tensors per group): the name test that "
        "was to fill it matched no parameter, so the {meant} {kind} tensor(s) ({meant_numel} values) it was meant "
        "for (biases, norm scales for a no-decay group) run with {others} on all {steps} steps",
    "dynamics.empty_param_group.cause":
        "the groups are usually split by a test on named_parameters(); `n in no_decay` compares whole names such as "
        "'encoder.norm.bias' with the short keys ['bias', 'LayerNorm.weight'] and is never true, where a substring "
        "test is meant",
    "dynamics.empty_param_group.next":
        "test the keys as substrings: any(nd in n for nd in no_decay), and check each group's size after building "
        "the optimizer",
}
