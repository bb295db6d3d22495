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
