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
    "cli.version_help": "print the versions of torchtriage, torch and Python, and exit",
    "cli.exit.report": "exit status: 0 the report was rendered; 2 bad input (a missing or unreadable REPORT.json, an unwritable --html path: one line on stderr)",
    "cli.exit.splits": "exit status: 0 nothing leaks; 1 something leaks between the splits; 2 bad input (a missing file, an unknown column or engine: one line on stderr)",
    "cli.exit.replay": "exit status: 0 the step replayed without the recorded fault; 1 the fault reproduced; 2 bad input (a missing or foreign bundle, a factory that fails: one line on stderr)",
    "cli.exit.shrink": "exit status: 0 the minimal bundle was written; 2 bad input (a missing or foreign bundle, a fault that does not reproduce: one line on stderr)",
    "cli.exit.make-test": "exit status: 0 the regression test and FIX.md were written; 2 bad input (a missing or foreign bundle, an unwritable --out: one line on stderr)",
    "cli.exit.env": "exit status: 0 printed; 2 standard output could not be written (one line on stderr)",
    "cli.exit.lab": "exit status: 0 the faults ran and were diagnosed; 2 standard output could not be written (one line on stderr)",
}
