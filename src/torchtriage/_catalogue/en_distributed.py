"""English: distributed training (torchrun, DDP, FSDP; issue 15)."""

MESSAGES = {
    "report.rank": "rank",
    "report.host": "host",
    "seed.priority.distributed": "check what differs between the ranks: unused parameters, collectives, their order",
    # non-finite values received through the gradient all-reduce
    "dist.received": "Non-finite gradients received through the all-reduce at step {step}: this rank's own gradients were finite",
    "dist.received_from": "Non-finite gradients received through the all-reduce from rank {origin} at step {step}: this rank's own gradients were finite",
    "dist.cause.received": "DDP averages the gradients of all ranks: one rank's NaN or Inf reaches every rank. The rank that made it has the full diagnosis.",
    "dist.next.received": "Read the finding of the rank that made it (rank {origin}).",
    "dist.next.received_unknown": "Read the report of the other ranks: the one whose own gradients were non-finite made it.",
    # unused parameters
    "dist.unused": "{count} parameter(s) received no gradient at step {step} while DDP expected all of them ({names}): DDP (find_unused_parameters=False) waits for them and fails at the next forward with 'Expected to have finished reduction in the prior iteration'",
    "dist.cause.unused": "module(s) {modules} did not take part in the loss at step {step} (a branch of forward skipped them, or their output was not used in the loss).",
    "dist.next.unused": "Pass find_unused_parameters=True to DistributedDataParallel when a branch is skipped on purpose, or keep the branch in the graph with a zero weight (loss = loss + 0.0 * branch_output.sum()); if the modules are never used, delete them or set requires_grad=False before wrapping.",
    "dist.find_unused_idle": "find_unused_parameters=True, but every parameter received a gradient in each of the {steps} step(s)",
    "dist.cause.find_unused_idle": "with find_unused_parameters=True DDP walks the autograd graph after every forward to look for unused parameters; nothing was ever unused here.",
    "dist.next.find_unused_idle": "Drop find_unused_parameters=True (or use static_graph=True) to save that traversal each step.",
    # parameters that differ across ranks
    "dist.params_differ": "{count} parameter(s) or buffer(s) differ across ranks at the first step: {names}",
    "dist.cause.params_differ": "each rank initialised or loaded its own values and nothing broadcast them (DDP broadcasts parameters from rank 0 when it wraps the model; buffers with broadcast_buffers=True).",
    "dist.next.params_differ": "Seed every rank the same before building the model, load the checkpoint on every rank, or wrap the model in DistributedDataParallel (it broadcasts rank 0's values).",
    # rank-dependent control flow
    "dist.sequence": "The ranks called different collectives: call {index} is {first} on rank {rank_a} but {second} on rank {rank_b}",
    "dist.cause.sequence": "code around a collective depends on the rank (or on rank-local data such as the loss or the number of batches): the ranks pair up different calls, which hangs or silently mixes tensors.",
    "dist.next.sequence": "Make every rank call the same collectives in the same order: decide early stops and skips from a value all ranks agree on (all_reduce a flag first); give every rank the same number of batches (DistributedSampler, drop_last=True).",
    "dist.counts": "{op} at {where} ran {counts}: the code around it depends on the rank",
    # stalls
    "dist.stall": "The job stalled for {seconds:.0f} s: {summary}",
    "dist.stall_same": "all ranks wait in {op} at {where}",
    "dist.wait": "rank {rank} waits in {op} at {where}",
    "dist.runs": "rank {rank} is not in a collective (at {where})",
    "dist.ended": "rank {rank} has ended ({how})",
    "dist.ended_ok": "its script finished",
    "dist.ended_error": "raised {error}",
    "dist.frozen": "rank {rank} is blocked at {where} (in {function}), inside a call that holds the Python interpreter (its stack from faulthandler)",
    "dist.missing": "rank {rank} did not answer",
    "dist.cause.stall": "a collective completes only when every rank of the group enters the same one; here the ranks are in different places, so none can go on (rank-dependent control flow, an early stop decided from one rank's own loss, a rank with more batches, or a rank that ended).",
    "dist.cause.stall_same": "every rank waits in the same collective: a rank outside the group, the network, or a peer that stopped responding.",
    "dist.next.stall": "Make every rank call the same collectives in the same order: decide early stops from a value all ranks agree on (all_reduce a flag first), use DistributedSampler with drop_last=True for equal batch counts.",
    "dist.stall_exit": "torchtriage: the job stalled in a collective; the report is written and the job ends (exit code {code}).",
    "dist.stall_banner": "torchtriage: rank {rank} made no progress for {seconds:.0f} s in {op}; gathering every rank's stack",
    "dist.op.backward": "the gradient all-reduce of backward()",
    "dist.op.forward": "DDP's forward (buffer broadcast / unused-parameter search)",
    # replay
    "dist.replay_needs_pg": "this step ran under DistributedDataParallel (rank {rank} of {world}): its all-reduce needs the other ranks, so a single-process replay computes the local gradients only",
    "dist.replay_collectives": "the step called collectives ({ops}); a single-process replay cannot run them: replay the whole job under torchrun instead",
}
