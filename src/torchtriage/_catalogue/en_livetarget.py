"""English: regression targets that carry gradient into the parameters being trained."""

MESSAGES = {
    "silent.target_not_detached.bootstrap":
        "the bootstrapped (TD) target of this {loss} is computed with grad from {shared} parameter(s) the prediction "
        "also reaches ({names}): backward sends gradient through the target into them (on {carried}/{read} calls "
        "read), so the update differentiates through its own target",
    "silent.target_not_detached.other":
        "the target of this {loss} is computed with grad from {shared} parameter(s) the prediction also reaches "
        "({names}): backward moves the target toward the prediction as well ({calls} calls)",
    "silent.target_not_detached.cause.bootstrap":
        "a TD target r + gamma * Q(s') must be a constant for the update: computed from the online network without "
        ".detach() or torch.no_grad() (a double-DQN value taken from the online network, a critic's next value), "
        "gradient flows into Q(s') and the semi-gradient update becomes a residual-gradient one, which on stochastic "
        "transitions converges to different values",
    "silent.target_not_detached.cause.other":
        "a regression target is normally fixed for the update; one computed from the trained parameters is pulled "
        "toward the prediction too (intended in some consistency losses, a collapse risk otherwise)",
    "silent.target_not_detached.next":
        "detach the target (q_next = net(next_states).gather(1, idx).detach(), or compute it under torch.no_grad())",
}
