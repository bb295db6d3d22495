"""`torchtriage run` (issue 2 §5, §6): the script runs as `python SCRIPT ARGS...` would, the
report comes first, then the script's own traceback; bad input is one line and exit code 2."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conftest import EXAMPLES, run_cli
from torchtriage._cli import main

PROBE = '''\
import json, os, sys
import torch
import torch.nn as nn

print("argv", json.dumps(sys.argv))
print("name", __name__)
print("path0", sys.path[0])
print("cwd", os.getcwd())
encoder = nn.Linear(4, 2)
decoder = nn.Sequential(nn.Linear(2, 3))
decoder(encoder(torch.randn(5, 4))).sum().backward()  # two models, no optimizer
mode = sys.argv[1]
if mode == "exit3":
    sys.exit(3)
if mode == "exitmsg":
    sys.exit("bye now")
if mode == "raise":
    decoder(torch.randn(5, 4))
print("done")
'''


@pytest.fixture()
def probe(tmp_path):
    (tmp_path / "sub").mkdir()
    path = tmp_path / "sub" / "probe.py"
    path.write_text(PROBE)
    return path


def test_run_behaves_like_python_and_keeps_sys_exit_code(probe, tmp_path):
    proc = run_cli("run", "--json", "r.json", "sub/probe.py", "exit3", "--lr", "0.1", cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.splitlines() == [
        'argv ["sub/probe.py", "exit3", "--lr", "0.1"]', "name __main__", f"path0 {probe.parent}", f"cwd {tmp_path}"]
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["schema"] == "torchtriage.report/1" and report["findings"] == [] and report["primary"] is None
    assert report["meta"]["exit_code"] == 3 and report["meta"]["steps"] == 1
    assert "Traceback" not in proc.stderr


def test_run_reports_then_reraises_the_scripts_error_with_json(probe, tmp_path):
    proc = run_cli("run", "--json", "r.json", str(probe), "raise", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[-1].startswith("cwd ")  # the script's output, untouched
    err = proc.stderr
    report_at, tb_at = err.index("== torchtriage report =="), err.index("Traceback (most recent call last):")
    assert report_at < tb_at
    assert "✗ [shape] 0: Linear expects 2 input features, got 4 (input 5x4, weight.T 2x3)" in err
    traceback_text = err[tb_at:]
    assert traceback_text.splitlines()[1].startswith(f'  File "{probe}", line 18, in <module>')
    assert "torchtriage" not in traceback_text and "runpy" not in traceback_text
    assert traceback_text.rstrip().endswith("RuntimeError: mat1 and mat2 shapes cannot be multiplied (5x4 and 2x3)")
    data = json.loads((tmp_path / "r.json").read_text())
    f = data["findings"][data["primary"]]
    assert (f["category"], f["code"], f["module"], f["stage"], f["file"], f["line"]) == (
        "shape", "shape.linear_in_features", "0", "forward", str(probe), 18)
    assert data["meta"]["exit_code"] == 1


def test_sys_exit_with_a_message_prints_it_and_exits_1(probe, capsys):
    assert main(["run", str(probe), "exitmsg"]) == 1
    out, err = capsys.readouterr()
    assert "bye now" in err.splitlines() and out.splitlines()[0] == f'argv ["{probe}", "exitmsg"]'
    assert main(["run", "--quiet", str(probe), "ok"]) == 0
    out, err = capsys.readouterr()
    assert out.splitlines()[-1] == "done" and err == ""
    assert sys.argv[0] != str(probe)  # restored


EXAMPLE_CASES = [
    # script, exit code, code, module, line of the user's frame (a text on it)
    ("clean_mlp.py", 0, None, None, None),
    ("shape_mismatch.py", 1, "shape.linear_in_features", "head", "return self.head(self.encoder(x))"),
    ("dtype_mismatch.py", 1, "dtype.double_input", "0", "loss = nn.functional.cross_entropy(model(x), y)"),
    ("device_mismatch.py", 1, "device.module_input", "0", "loss = nn.functional.mse_loss(model(x), y)"),
    ("layout_view.py", 1, "layout.view_noncontiguous", "", "return self.out(h.view(x.shape[0], -1))"),
    # the gradient check explains it before backward() raises; triage's generic reading is dropped
    ("grad_no_graph.py", 1, "gradient.loss_no_grad_fn", None, "loss = torch.tensor(mse.item() + 0.01)"),
    ("out_of_memory.py", 1, "memory.oom", "", "scores = torch.empty(seq, seq)"),
    ("file_not_found.py", 1, "environment.file_not_found", None, 'with open("labels.csv") as fh:'),
]


@pytest.mark.parametrize("script, exit_code, code, module, line_text", EXAMPLE_CASES, ids=[c[0] for c in EXAMPLE_CASES])
def test_examples(script, exit_code, code, module, line_text, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)  # not the examples folder: file_not_found.py needs that
    path = EXAMPLES / script
    assert main(["run", "--json", "r.json", str(path)]) == exit_code
    data = json.loads((tmp_path / "r.json").read_text())
    err = capsys.readouterr().err
    if code is None:
        assert data["findings"] == [] and "No finding" in err and "Traceback" not in err
        return
    f = data["findings"][data["primary"]]
    lines = path.read_text().splitlines()
    assert (f["code"], f["module"], f["file"]) == (code, module, str(path))
    assert line_text in lines[f["line"] - 1]
    assert f["category"] == code.split(".")[0] and f["message"] and f["next_check"]
    assert err.index("== torchtriage report ==") < err.index("Traceback (most recent call last):")
    if code == "environment.file_not_found":
        ev = f["evidence"]
        assert (ev["cwd"], ev["resolved"]) == (str(tmp_path), str(tmp_path / "labels.csv"))
        assert ev["next_to_script"] == str(EXAMPLES / "labels.csv") and ev["exists_next_to_script"] is True
        assert f["next_check"].startswith("a file of that name exists next to the script")


def test_every_category_of_issue_2_has_an_example():
    names = {p.name for p in EXAMPLES.glob("*.py")}
    assert {c[0] for c in EXAMPLE_CASES} <= names


@pytest.mark.parametrize("argv, message", [
    (["run", "missing_script.py"], "torchtriage: error: script 'missing_script.py' not found "
                                   "(working directory: {cwd})"),
    (["run", "bad.py"], "torchtriage: error: bad.py:1: syntax error: '(' was never closed"),
    (["run", "--json", "afile/r.json", "ok.py"], "torchtriage: error: --json afile/r.json: "
                                                 "folder {cwd}/afile does not exist"),
    (["run", "--json", ".", "ok.py"], "torchtriage: error: --json .: is a folder, expected a file path"),
    (["run"], "torchtriage: error: run: no script given; usage: torchtriage run [--json PATH] SCRIPT [ARGS...]"),
    (["run", "--checks", "nope", "ok.py"], "torchtriage: error: --checks: unknown check(s) nope; accepted: triage"),
])
def test_bad_input_is_one_line_and_exit_2(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bad.py").write_text("x = (\n")
    (tmp_path / "ok.py").write_text("print('ran')\n")
    (tmp_path / "afile").write_text("")
    assert main(argv) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err.splitlines()) == 1
    assert err.splitlines()[0].startswith(message.format(cwd=os.getcwd()))


def test_unknown_option_is_one_line_and_exit_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["run", "--bogus", "x.py"])
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert err == "torchtriage: error: unrecognized arguments: --bogus (see 'torchtriage --help')\n"


def test_options_after_the_script_belong_to_the_script(tmp_path, capsys):
    script = tmp_path / "echo.py"
    script.write_text("import sys; print(sys.argv[1:])\n")
    assert main(["run", "--quiet", str(script), "--json", "x", "-v"]) == 0
    assert capsys.readouterr().out == "['--json', 'x', '-v']\n"
    assert not Path("x").exists()


SILENT_FAILURE_CASES = [
    # scripts that finish (exit 0) with a wrong run: the primary finding names the user's line
    ("grad_not_in_optimizer.py", "gradient.not_in_optimizer", "head",
     "opt = torch.optim.SGD(model.encoder.parameters()"),
    ("lr_explodes.py", "numerical.nonfinite_forward", "2", "loss = nn.functional.mse_loss(model(x), y)"),
    ("nan_in_forward.py", "numerical.nonfinite_forward", "encoder.2", "return torch.log(x)"),
]


@pytest.mark.parametrize("script, code, module, line_text", SILENT_FAILURE_CASES,
                         ids=[c[0] for c in SILENT_FAILURE_CASES])
def test_scripts_that_finish_but_are_wrong(script, code, module, line_text, tmp_path, capsys):
    path = EXAMPLES / script
    assert main(["run", "--json", str(tmp_path / "r.json"), str(path)]) == 0
    data = json.loads((tmp_path / "r.json").read_text())
    f = data["findings"][data["primary"]]
    assert (f["code"], f["module"], f["file"]) == (code, module, str(path))
    assert line_text in path.read_text().splitlines()[f["line"] - 1]
    assert line_text in capsys.readouterr().err  # the text report shows the line itself


WORKERS = '''\
import sys
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset
from helper import SCALE  # a sibling module next to the script


class Samples(Dataset):
    def __len__(self):
        return 6

    def __getitem__(self, i):
        if MODE == "dataset" and i == 5:
            raise ValueError(f"sample {i} is corrupt")
        size = 5 if MODE == "ragged" and i == 5 else 4
        return torch.full((size,), float(i) * SCALE), torch.zeros(2)


def collate(batch):
    if MODE == "collate":
        raise KeyError("label")
    return torch.utils.data.default_collate(batch)


MODE = sys.argv[1]


def main():
    print("file", __file__)
    model = nn.Linear(4, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    workers = 0 if MODE == "interrupt" else 2  # the default start method
    batches = iter(DataLoader(Samples(), batch_size=4, num_workers=workers, collate_fn=collate))
    try:
        for x, y in batches:
            loss = nn.functional.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
    finally:  # what gc would do later, and slowly (it waits 5 s per worker) in the test process
        getattr(batches, "_shutdown_workers", lambda: None)()
    print("trained")
    if MODE == "interrupt":
        raise KeyboardInterrupt


if __name__ == "__main__":
    main()
'''


@pytest.fixture()
def workers_script(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "helper.py").write_text("SCALE = 0.5\n")
    path = tmp_path / "sub" / "train.py"
    path.write_text(WORKERS)
    return path


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_run_is_python_for_a_main_guarded_script_with_dataloader_workers_and_ctrl_c(workers_script, tmp_path):
    # what `python sub/train.py ok` prints: __file__ is absolute (Python >= 3.9), exit code 0
    ours = run_cli("run", "--json", "r.json", "sub/train.py", "ok", cwd=tmp_path)
    assert (ours.returncode, ours.stdout) == (0, f"file {workers_script}\ntrained\n"), ours.stderr
    data = json.loads((tmp_path / "r.json").read_text())
    assert data["findings"] == [] and data["meta"]["steps"] == 2 and data["meta"]["exit_code"] == 0
    # Ctrl-C: the report and the JSON are still written, then Python's own traceback, exit 130
    ours = run_cli("run", "--json", "k.json", "sub/train.py", "interrupt", cwd=tmp_path)
    assert ours.returncode == 130 and ours.stdout.endswith("trained\n")
    tb = ours.stderr[ours.stderr.index("== torchtriage report =="):]
    tb = tb[tb.index("Traceback (most recent call last):"):].splitlines()
    assert tb[1] == f'  File "{workers_script}", line {_line_of(workers_script, "    main()")}, in <module>'
    assert tb[-1] == "KeyboardInterrupt" and "torchtriage" not in "\n".join(tb)
    assert json.loads((tmp_path / "k.json").read_text())["meta"]["exit_code"] == 130


@pytest.mark.parametrize("mode, expected", [
    # a dataset raising in worker 1 (the second batch): its own line, not the `for` line
    ("dataset", ("other", "other.exception", "data", 1, None, 'raise ValueError(f"sample {i} is corrupt")',
                 "ValueError: sample 5 is corrupt (in DataLoader worker process 1)")),
    ("collate", ("other", "other.exception", "data", 0, None, 'raise KeyError("label")',
                 "KeyError: 'label' (in DataLoader worker process 0)")),
    # the worker's own error is classified; its line is in your collate_fn
    ("ragged", ("shape", "shape.stack", "data", 1, None, "return torch.utils.data.default_collate(batch)",
                "stack: entry 0 is [4] but entry 1 is [5]; stacked tensors must have equal shapes")),
])
def test_errors_inside_dataloader_workers_name_the_workers_line(mode, expected, workers_script, tmp_path,
                                                                monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", list(sys.path))  # the run puts sub/ on it
    assert main(["run", "--json", "r.json", str(workers_script), mode]) == 1
    data = json.loads((tmp_path / "r.json").read_text())
    f = data["findings"][data["primary"]]
    category, code, stage, step, module, line_text, message = expected
    assert (f["category"], f["code"], f["stage"], f["step"], f["module"], f["file"], f["line"], f["message"]) == (
        category, code, stage, step, module, str(workers_script), _line_of(workers_script, line_text), message)
    sys.modules.pop("helper", None)
