"""English: what every parameter must satisfy in the gradient chain (session 12)."""

MESSAGES = {
    # _ledger_step/_sinks.py: parameters reached by the loss that no optimizer holds
    "ledger.sink":
        "{count} parameter(s) of {module} ({first}, ...) receive a gradient at every step but are not in any "
        "optimizer: they never moved in the run, and their .grad keeps accumulating ({g0} -> {g1})",
    "ledger.sink.cause":
        "the module was built outside the model the optimizer was built from (a loss or head kept by the "
        "trainer), so optimizer.step() never updates it and zero_grad() never clears it: the model is trained "
        "through a fixed random projection, and the {reached} judged backwards reached it on the trained path",
    "ledger.sink.next":
        "pass {module}'s parameters to the optimizer (or build the optimizer from a ModuleList of the model and "
        "this module); if it should stay fixed, set requires_grad_(False) on it",
    "ledger.sink_quiet":
        "{count} parameter(s) of {module} ({first}, ...) receive a gradient at each backward but no optimizer "
        "holds them and they never moved (module in {mode}() mode)",
    "ledger.sink_quiet.cause":
        "a fixed network (a pretrained feature extractor, a target network) whose requires_grad was left on: "
        "its gradient is computed and kept for nothing",
    "ledger.sink_quiet.next":
        "call requires_grad_(False) on {module} if it is fixed; add it to the optimizer if it should learn",
}
MESSAGES.update({
    # _ledger_step/_baseline.py: REINFORCE with a baseline that is not detached
    "ledger.baseline":
        "the policy loss multiplies a log-probability ({log}) by a difference that requires grad: its gradient "
        "reaches {count} parameter(s) of the baseline ({first}, ...; {values} values) that the log-probability "
        "does not depend on",
    "ledger.baseline.cause":
        "in a policy-gradient term the advantage (reward - baseline) is a constant weight; not detached, the "
        "policy loss also trains the critic by log p * d baseline, which drags its estimate away from the reward "
        "(the critic is then trained by both terms, and its baseline is useless)",
    "ledger.baseline.next":
        "detach the baseline in the policy term: ((reward - value.detach()) * log_prob), as "
        "tf.stop_gradient does; train the critic by its own regression term only",
})
MESSAGES.update({
    # _ledger_step/_unfreeze.py
    "ledger.unfreeze":
        "{count} parameter(s) of {model} ({values} values) required grad when the optimizer was built and are "
        "frozen at the end: {method} sets requires_grad only on parameters that already require it, so it can "
        "never unfreeze them",
    "ledger.unfreeze.cause":
        "under `if p.requires_grad: p.requires_grad = flag`, a call with flag=True skips every frozen parameter: "
        "the phase meant to fine-tune them trains the rest only",
    "ledger.unfreeze.next":
        "drop the guard: `p.requires_grad = flag` for every parameter (or model.requires_grad_(flag))",
})
