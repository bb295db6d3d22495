"""English: a load_state_dict() of a state_dict() snapshot that shares the model's storage."""

MESSAGES = {
    "selfload.aliased":
        "load_state_dict() restores the state dict taken by state_dict() at {where} (step {step}), but its {n} "
        "parameter tensors are {model}'s own parameters, not a copy: {steps} optimizer steps have written them since ({writes} writes), "
        "so the load copies the current weights onto themselves and the snapshot (the 'best' weights) is lost",
    "selfload.aliased.cause":
        "state_dict() returns references that share storage with the live parameters; a snapshot kept as "
        "best = model.state_dict() follows every later optimizer step",
    "selfload.aliased.next":
        "keep a copy: best = copy.deepcopy(model.state_dict()) or {{k: v.detach().clone() for k, v in "
        "model.state_dict().items()}}",
}
