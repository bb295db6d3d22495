"""English: a periodic learning-rate change whose test never holds."""

MESSAGES = {
    "dynamics.lr_decay_never_due":
        "the learning rate never changed: the branch `if {test}:` that changes it never ran, although the quantity "
        "its periodic test divides, `{dividend}`, went from {low} to {high}, passing {due} multiples of "
        "{divisor}; the test held {held} time(s) past its start in {evals} steps and the lr stayed constant at {lr} "
        "for the whole run",
    "dynamics.lr_decay_never_due.target":
        "the learning rate never changed: the branch `if {test}:` that changes it never ran, although "
        "`{dividend}` went from {low} to {high}, passing {targets}, the value(s) the test names; the test never held "
        "in {evals} steps and the lr stayed constant at {lr} for the whole run",
    "dynamics.lr_decay_never_due.cause":
        "operator precedence (`%` binds tighter than `+` and `-`: `i + epoch * n % step == 0` computes "
        "i + ((epoch * n) % step), almost never 0), a residue compared with the divisor itself, or a milestone of "
        "another type ('30' read from a config as text against the int 30): the schedule the code describes is "
        "never applied",
    "dynamics.lr_decay_never_due.next":
        "parenthesize the counter before the modulo, e.g. `(i + epoch * n) % step == 0`, or use a scheduler "
        "(StepLR) stepped once per iteration",
}
