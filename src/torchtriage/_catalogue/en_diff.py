"""English: `torchtriage diff`, the first place where two runs part (issue 28)."""

MESSAGES = {
    "diff.step_code": "the step's own code",
    "diff.nothing": "nothing there",
    "diff.op": "the runs part at step {step} ({stage}): A runs {a}, B runs {b}",
    "diff.shape": "the runs part at step {step} ({stage}): {op} in {module} makes {a} in A but {b} in B",
    "diff.dtype": "the runs part at step {step} ({stage}): {op} in {module} makes {a} in A but {b} in B",
    "diff.value": ("the runs part at step {step} ({stage}): {op} in {module} gives other values in B than in A "
                   "(beyond the {dtype} tolerance)"),
    "diff.randomness": ("the runs part at step {step} ({stage}): {op} in {module} draws other random numbers "
                        "in B than in A"),
    "diff.cause.line": "this line, or a value it reads, computes something else in B",
    "diff.cause.args": "the op is called with other arguments (see both sides' arguments)",
    "diff.cause.mode": "a module runs in eval mode in one run and in training mode in the other",
    "diff.cause.input": "the batch differs: other data, another order or other preprocessing",
    "diff.next": ("open both lines side by side: the change between them is the first that alters the "
                  "computation; everything after it differs because of it"),
    "diff.structure": ("the programs are structurally different: only {pairs} of {total} ops align "
                       "(first unmatched: A runs {a}, B runs {b}); no divergence is reported"),
    "diff.structure_next": ("compare two versions of one model (the same layers and loss), or record fewer "
                            "steps of the part they share"),
    "diff.same": "no divergence: {ops} ops over {steps} step(s) agree within the dtype's tolerance",
    "diff.params": "{count} of {total} parameters' updates part first at step {step}: {names}",
    "diff.seeds": "the scripts seed differently (A: {a}; B: {b})",
    "diff.seeds_aligned": ("the scripts seed differently (A: {a}; B: {b}); B ran with A's seed values, so "
                           "both draw the same random numbers and, where the sampler uses torch's "
                           "generator, the same data order"),
    "diff.init": "B's initial weights were set from A's: {copied} of {total} tensors, matched by {how}",
    "diff.mode_a": "A runs {modules} in eval mode, B in training mode",
    "diff.mode_b": "B runs {modules} in eval mode, A in training mode",
    "diff.rng": "the random number generator's state already differs at the start of step {step}",
    "diff.no_side": "{side}: not found; give a script (.py), a module name (as python -m takes it) or a step record folder",
    "diff.side_failed": ("{side} ended with exit code {code} before its {steps} step(s) were recorded; "
                         "its last lines:\n{tail}"),
    "diff.git_failed": "--git {rev}: cannot check out {path} at that revision: {reason}",
    "diff.raised": "the runs part at step {step}: {side} raises {error}, where {other} goes on",
    "diff.no_steps": ("{side} ran no training step that torchtriage could see (no model call, no backward); "
                      "nothing to compare"),
}
