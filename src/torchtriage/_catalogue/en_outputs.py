"""English: writing output files (`_outputs.py`)."""

MESSAGES = {
    "outputs.not_folder": "{flag} {path}: exists and is not a folder",
    "outputs.no_folder": "{flag} {path}: folder {folder} does not exist",
    "outputs.is_folder": "{flag} {path}: is a folder, expected a file path",
    "outputs.unwritable": "{flag} {path}: not writable ({reason})",
    "outputs.write_failed": "{flag} {path}: cannot write the output: {reason}",
    "outputs.stdout_failed": "standard output: cannot write the output: {reason}",
}
