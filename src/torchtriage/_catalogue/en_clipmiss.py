"""English: gradient clipping that misses the parameters the optimizer steps."""

MESSAGES = {
    "dynamics.clip_misses_optimizer":
        "clip_grad_norm_(..., max_norm={max_norm}) clips {clipped}, but the {optimizer} stepped next holds none of "
        "those parameters: on all {misses} of its steps after a clip the gradient it applied ({stepped}) was never "
        "clipped; its norm was above max_norm on {bit}/{read} steps read (median {median})",
    "dynamics.clip_misses_optimizer.cause":
        "the clip was handed another module's parameters than the optimizer's (a helper such as "
        "minimize(model, optimizer, loss) called with the value head and the policy optimizer, the critic clipped "
        "before the actor's step), so the max_norm meant for this update never acts on it",
    "dynamics.clip_misses_optimizer.next":
        "clip the parameters this optimizer updates: clip_grad_norm_([p for g in optimizer.param_groups for p in "
        "g['params']], max_norm), or pass the module whose optimizer steps",
}
