"""English: the rerun of a script whose non-finite value the run could not localize (issue 27)."""

MESSAGES = {
    "nonfinite.rerun.start": ("torchtriage: the non-finite value of step {step} could not be localized in this run; "
                              "rerunning the script up to that step with the step recorded (--no-rerun turns this off)"),
    "nonfinite.rerun.cost": "the script rerun from the start: {steps} step(s) in {seconds} s",
    "nonfinite.rerun.failed": "the rerun did not hand back its findings ({error})",
    "nonfinite.rerun.bundle": "torchtriage: the rerun's repro bundle (the failing step recorded whole) replaces {path}",
    "nonfinite.rerun.unseeded": ("the script does not seed torch: its seed was {a} in the run and {b} in the rerun, so "
                                 "the rerun drew other data and weights; call torch.manual_seed(...) at the start"),
    "nonfinite.rerun.cudnn_benchmark": ("torch.backends.cudnn.benchmark is on: cuDNN picks its kernels by timing, "
                                        "so two runs differ; set it to False to reproduce"),
    "nonfinite.rerun.kernels": ("the rerun's loss differs from step {step} on ({a} vs {b}): non-deterministic "
                                "kernels (atomic adds); torch.use_deterministic_algorithms(True) makes runs repeat"),
    "nonfinite.rerun.parted": ("the rerun's loss differs from step {step} on ({a} vs {b}): the data or the state "
                               "differs between runs (an unseeded loader, a random source outside torch, files "
                               "changed between runs)"),
    "nonfinite.rerun.gone": ("the rerun reached step {step} and its values stayed finite: the value depends on "
                             "something outside the seeded script (the time, the environment, another process)"),
    "nonfinite.why.no_rerun_watch": ("inside watch() no rerun follows, and this step was not recorded: run the script "
                                     "under `torchtriage run` (seed it with torch.manual_seed(...) so that the rerun "
                                     "draws the same data), which reruns it up to this step to localize the value, or "
                                     "pass step_tape='always' to watch() to record every step"),
    "nonfinite.rerun.rank": "rank {rank} of {world}, alone (a process group of one: DDP averaged this rank's gradients only)",
}
