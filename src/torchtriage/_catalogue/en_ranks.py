"""Messages of the ranks' agreement beyond DDP's own replicas (issue 26, session 8)."""

MESSAGES = {
    "ranks.replicas_drift":
        "the parameters of {model} stepped at {line} were identical on rank {a} and rank {b} before the "
        "first step and differ from step {step} on ({count} of {total} at step {last}, {first}, ...): the "
        "ranks train separate copies",
    "ranks.replicas_drift.cause":
        "each rank stepped these parameters with its own gradient: no all-reduce reached them (a model not "
        "wrapped in DistributedDataParallel, a wrapper built but called through .module, a hand-written "
        "gradient all-reduce missing for this model), so every rank learns from its own data only and the "
        "model saved or evaluated depends on the rank",
    "ranks.replicas_drift.next":
        "wrap the model that runs the forward in DistributedDataParallel and call the wrapper, or all-reduce "
        "its gradients (dist.all_reduce(p.grad); p.grad /= world_size) between backward() and step()",
}
