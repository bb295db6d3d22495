"""English: TensorBoard / W&B logging, the notebook magic and the CLI conventions (issue 18)."""

MESSAGES = {
    "dashboard.bad_tensorboard": "tensorboard={value!r}: expected a log folder (str or os.PathLike) or a "
                                 "torch.utils.tensorboard.SummaryWriter",
    "dashboard.bad_wandb": "wandb={value!r}: expected True (the active run, or a new one) or a wandb run object",
    "cli.exit_codes": "exit status:\n"
                      "  0    done; for `run`, the script's own exit status (0 when it ended normally)\n"
                      "  1    the script raised (its traceback follows the report); `splits`: something leaks\n"
                      "  2    bad input: a missing file, an unknown option, an unwritable path (one line on stderr)\n"
                      "  130  interrupted (Ctrl-C)",
    "cli.run_exit_codes": "exit status: the script's own (0 when it ends normally, its sys.exit code), "
                          "1 when it raises (the report, then its traceback), 2 for bad input (one line on "
                          "stderr), 130 when interrupted. Findings alone do not change the exit status.",
    "cli.lab.help": "run four common faults in memory (a broadcast loss, a cut graph, an exp overflow, a writer in both splits) and diagnose them",
    "cli.lab.description": "Run four common faults in memory (a broadcast loss, a cut graph, an exp overflow, a writer in both splits) and print what torchtriage's checks found.",
    "integration.nothing_found": "torchtriage: nothing found over {steps} step(s)",
    "integration.bad_report": "report={value!r}: expected \"auto\" (print the report when something was found, "
                              "else one line), True (always) or False (never)",
    "integration.no_tensorboard_logger": "tensorboard=True: the trainer has no TensorBoard logger; give a "
                                         "log folder (tensorboard=\"runs/x\") or add lightning's TensorBoardLogger",
    "pytest.not_ok": "torchtriage found a problem in this test's training code:",
}
