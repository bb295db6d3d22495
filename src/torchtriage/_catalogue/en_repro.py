"""English: repro bundles, replay, shrink, make-test, env."""

MESSAGES = {
    # writing
    "repro.written": "torchtriage: repro bundle written to {path} ({what} at step {step}, {mb} MB)",
    "repro.skipped": ("torchtriage: repro bundle: the {part} ({mb} MB) does not fit in --max-bundle-mb "
                      "({limit} MB) and was left out; a replay rebuilds it from your code"),
    "repro.write_failed": "torchtriage: could not write the repro bundle to {path}: {error}",
    # loading
    "repro.missing": "bundle {path}: not found",
    "repro.not_folder": "bundle {path}: is not a folder (a repro bundle is a folder)",
    "repro.no_manifest": "bundle {path}: manifest.json is missing, so this is not a complete torchtriage bundle",
    "repro.bad_manifest": "bundle {path}: manifest.json has no file list",
    "repro.format": "bundle {path}: format {got!r} is not supported; this torchtriage reads {expected!r}",
    "repro.version": ("bundle {path}: written by torchtriage {got}, this is torchtriage {expected}; "
                      "replay it with torchtriage {got}, or pass --allow-other-version "
                      "(allow_other_version=True) to try anyway"),
    "repro.unknown_file": ("bundle {path}: the manifest lists {file!r}, which is not a bundle file "
                           "(accepted: JSON, text and .safetensors files); refusing to open it"),
    "repro.file_missing": "bundle {path}: {file} is missing (the bundle is incomplete)",
    "repro.checksum": ("bundle {path}: {file} does not match its SHA-256 checksum ({size} bytes, "
                       "{expected} recorded): it was truncated or edited after the bundle was written"),
    "repro.pickle": ("bundle {path}: {file} looks like a pickle payload (by its name or its structure); "
                     "a torchtriage bundle never holds pickles, and opening one could run code, "
                     "so the bundle is refused"),
    "repro.no_batch": "bundle {path}: holds no batch (it did not fit or the failure came before the model ran)",
    # replay
    "repro.replay.yes": "reproduced: {what}",
    "repro.replay.no": "not reproduced: expected {what}; the replay found {seen}; exception: {exc}",
    "repro.note.custom_checks": ("note: the recorded run also used custom checks ({names}); pass them with "
                                 "checks=[...] or a factory returning {{'checks': [...]}}"),
    "repro.note.no_model_state": ("note: the bundle holds no model state (too large or not captured); "
                                  "the replay used your model's own weights"),
    "repro.note.no_optimizer_state": "note: the bundle holds no optimizer state; the replay used your optimizer as built",
    "repro.note.forward_only": ("note: no loss was recorded with a target, so the replay ran the forward only; "
                                "give step_fn (or --script) to replay backward and the update"),
    "repro.mismatch": ("the model does not match the bundle's state (model {got}, bundle recorded {expected}): "
                       "{details}"),
    "repro.mismatch.missing": "missing in the bundle: {keys}",
    "repro.mismatch.extra": "not in the model: {keys}",
    "repro.mismatch.shape": "shape differs: {keys}",
    "repro.mismatch.optimizer": ("the optimizer does not match the bundle's optimizer state "
                                 "(optimizer {got}, bundle recorded {expected}): {error}"),
    "repro.factory_result": ("{where}() returned a {got}; a factory returns a model, (model, optimizer), "
                             "or a dict with 'model' and optionally 'optimizer', 'step_fn', 'checks' "
                             "(several models: 'models' {{label: model}} and 'optimizers' [...])"),
    "repro.need_model": "replay() needs model=, factory= or script=; got model of type {got}",
    "repro.no_script": "script {script!r} not found",
    "repro.no_model_called": ("the script {script} never called a model of class {cls} with the bundle's "
                              "parameters, so the failing step could not be replayed"),
    # shrink
    "repro.shrink.progress": "shrink: replay {n}: {size} sample(s) {samples}, prefix {prefix} -> {verdict}",
    "repro.shrink.yes": "reproduced",
    "repro.shrink.no": "gone",
    "repro.shrink.not_reproduced": ("shrink: the full batch does not reproduce the finding, so there is nothing "
                                    "to shrink ({describe})"),
    "repro.shrink.done": ("shrink: {replays} replays; {kept} of {n} sample(s) remain: {samples}; "
                          "sequence prefix: {prefix}; minimal bundle written to {out}"),
    # make-test
    "repro.make_test.source": "make-test needs exactly one of --factory MODULE:FUNCTION or --script SCRIPT",
    "repro.make_test.done": "make-test: wrote {test}, {fix} and the minimal bundle {bundle}",
    "repro.cli.need_source": ("give --factory MODULE:FUNCTION or --script SCRIPT (the bundle records no "
                              "script that still exists: {script})"),
    "repro.cli.factory_syntax": "--factory {value!r}: expected MODULE:FUNCTION, e.g. mymodels:make_model",
    "repro.cli.factory_import": "--factory {value!r}: cannot import it ({error})",
    "repro.fix_template": """# Fix record: {symptom}

Written by `torchtriage make-test` on {date}. Fill in the blanks marked TODO; keep this file
next to `{test}`, which fails while the bug is there and passes once it is fixed.

## Symptom
- {message}
- step {step}, stage {stage}, module `{module}`, op `{op}`, your line {line}
- command: `{command}` (working directory `{cwd}`)

## Minimal input
- samples {samples} of the original batch of {batch_size}; sequence prefix {prefix}
  (found by `torchtriage shrink` in {replays} replays)
- input shapes: {shapes}
- bundle: `{bundle}/` (pre-step model and optimizer state, batch, RNG; no pickle)

## Cause
TODO: the first bad value, the line that produced it, and why.

## Change
TODO: the diff or commit that fixes it.

## Results
| | the finding |
|---|---|
| before the fix | reproduced (`torchtriage replay`) |
| after the fix | TODO: run `pytest {test}` |
""",
}
