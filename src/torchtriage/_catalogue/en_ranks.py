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

MESSAGES.update({
    "ranks.global_divisor":
        "the loss is divided by a count summed over all ranks (all_reduce at {reduced}) and DDP then averages "
        "the gradients over the {world} ranks: each step is {scale} × the gradient of the global mean",
    "ranks.global_divisor.cause":
        "dividing by the global count already makes the ranks' losses add up to the global mean; DDP's average "
        "divides by the world size once more (the constant factor on the loss is {factor}), as if the learning "
        "rate were divided by {world}",
    "ranks.global_divisor.next":
        "multiply the loss by dist.get_world_size() (loss = loss_sum * world_size / global_count), or divide by "
        "the rank's own count and let DDP average",
})
