"""English: what an optimizer carries from one evaluation or step to the next (closures, state)."""

MESSAGES = {
    "gradient.closure_grads_accumulated":
        "{optimizer}.step(closure) re-evaluated the closure {evaluations} times and {accumulated} of those "
        "backward() calls added onto the gradient of the evaluation before: the closure never resets the "
        "gradients, so the optimizer saw a running sum of gradients, not the gradient at its current point",
    "gradient.closure_grads_accumulated.cause":
        "backward() adds into .grad; an optimizer that calls its closure several times per step (LBFGS's line "
        "search, up to max_iter evaluations) needs each evaluation to start from reset gradients, which a "
        "closure without optimizer.zero_grad() does not do",
    "gradient.closure_grads_accumulated.next":
        "call optimizer.zero_grad() at the top of the closure, before the loss is computed and backpropagated",
    "dynamics.optimizer_state_reset":
        "a new {optimizer} over the same {params} parameter(s) was built {rebuilds} time(s) after the one before "
        "had stepped: each new optimizer starts from empty state ({state}), so what the run had accumulated "
        "over {steps} step(s) per optimizer is thrown away at every rebuild",
    "dynamics.optimizer_state_reset.cause":
        "the optimizer is created inside the function called once per epoch (or per phase) instead of once "
        "before the loop; its moment estimates, momentum buffers and step count restart each time",
    "dynamics.optimizer_state_reset.next":
        "create the optimizer once, before the epoch loop, and pass it to the function that trains an epoch",
}

MESSAGES.update({
    "checkpoint.mostly_init":
        "the weights loaded into {model} are mostly the initialization of the model trained in this run: over "
        "{tensors} parameter tensor(s) they moved {share} of the way from its initial weights to the ones "
        "training reached after {steps} step(s) ({rest} of the way is still the initialization)",
    "checkpoint.mostly_init.cause":
        "the state dict comes from a copy that followed training only a little: typically an EMA / averaged "
        "model whose decay horizon, 1 / (1 - decay) updates, is longer than the updates it received (no warm-up, "
        "or the step never passed to its decay schedule); saved or evaluated, it is close to the random init",
    "checkpoint.mostly_init.next":
        "give the EMA a warm-up (decay rising with the update count) or a decay whose horizon fits the run, "
        "or save the trained model itself; compare the saved copy's validation score with the online model's",
})

MESSAGES.update({
    "dynamics.grad_scale_restarts":
        "the gradient's scale depends on where the step falls in the pass: its norm fell {shrink}x within every "
        "stretch of {period} optimizer steps and jumped back at the next ({restarts} restarts), so the later "
        "updates of each stretch got a fraction of their gradient",
    "dynamics.grad_scale_restarts.cause":
        "a normalizer accumulated since the pass (epoch) began divides each window's loss or gradients, and is "
        "reset only when the pass restarts: token- or sample-weighted gradient accumulation whose running totals "
        "are not reset after optimizer.step()",
    "dynamics.grad_scale_restarts.next":
        "reset the accumulation's running totals (token counts, sample counts, scale factors) right after "
        "optimizer.step() / zero_grad(), so each update is normalized by its own window only",
})
