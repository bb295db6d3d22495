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
    "integration.nothing_found": "torchtriage: nothing found over {steps} step(s)",
    "integration.bad_report": "report={value!r}: expected \"auto\" (print the report when something was found, "
                              "else one line), True (always) or False (never)",
    "integration.no_tensorboard_logger": "tensorboard=True: the trainer has no TensorBoard logger; give a "
                                         "log folder (tensorboard=\"runs/x\") or add lightning's TensorBoardLogger",
    "triage.data.target_out_of_range": "loss: target class {target} has no logit: the labels hold a class "
                                       "index the model does not output",
    "triage.data.target_out_of_range.cause": "cross_entropy / nll_loss take class indices in [0, C), C being the "
                                             "size of the logits' class axis (num_labels, out_features); a label "
                                             "is C or more (or negative and not ignore_index)",
    "triage.data.target_out_of_range.next": "count the classes in the labels (e.g. sorted(set(labels))) and set "
                                            "the model's number of outputs to match, or remap the labels to 0..C-1",
    "pytest.not_ok": "torchtriage found a problem in this test's training code:",
}
