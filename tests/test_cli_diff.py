"""`torchtriage diff` end to end (issue 28): two scripts, a saved step record against a module,
a script against itself at a git revision; exit codes 0 / 1 / 2."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from conftest import run_cli

SCRIPT = '''\
import sys
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

torch.manual_seed({seed})
data = TensorDataset(torch.randn(64, 8), torch.randint(0, 4, (64,)))
loader = DataLoader(data, batch_size=16, shuffle=True)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(int(sys.argv[1])):
    for x, y in loader:
        loss = F.cross_entropy(model(x), y{reduction})
        opt.zero_grad()
        loss.backward()
        opt.step()
print("trained")
'''
LOSS_LINE = 14


def write(path, seed=0, reduction=""):
    path.write_text(SCRIPT.format(seed=seed, reduction=reduction))
    return str(path)


def test_two_scripts_part_at_the_changed_reduction(tmp_path):
    a = write(tmp_path / "a.py")
    b = write(tmp_path / "b.py", reduction=', reduction="sum"')
    done = run_cli("diff", "--steps", "2", "--html", "out.html", "--json", "out.json", a, b, "20", cwd=tmp_path)
    assert done.returncode == 1, done.stderr
    lines = done.stdout.splitlines()
    assert ("✗ [silent] the runs part at step 0 (loss): aten::nll_loss_forward in the step's own code gives "
            "other values in B than in A (beyond the float32 tolerance)") in lines
    assert f"    your line: b.py:{LOSS_LINE}    loss = F.cross_entropy(model(x), y, reduction=\"sum\")" in lines
    assert "      B arguments: weight=None, reduction=2, ignore_index=-100" in lines
    html = (tmp_path / "out.html").read_text()
    assert 'class="line b"' in html and "loss A — loss B" in html
    assert '"code": "diff.diverged"' in (tmp_path / "out.json").read_text()


def test_a_saved_record_against_a_module_seeded_differently(tmp_path):
    a = write(tmp_path / "a.py", seed=0)
    write(tmp_path / "b.py", seed=1)
    rec = run_cli("run", "--quiet", "--record", "ref", "--record-steps", "3", a, "1", cwd=tmp_path)
    assert rec.returncode == 0, rec.stderr
    assert "trained" in rec.stdout  # the run goes on after its recorded steps
    done = run_cli("diff", "ref", "b", "1", cwd=tmp_path)  # b: a module, as `python -m b` runs it
    assert done.returncode == 0, done.stdout + done.stderr
    assert ("i [silent] the scripts seed differently (A: [0]; B: [1]); B ran with A's seed values, so both "
            "draw the same random numbers and, where the sampler uses torch's generator, the same data "
            "order") in done.stdout.splitlines()
    assert "no divergence: " in done.stdout


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_script_against_itself_at_a_git_revision(tmp_path):
    def git(*argv):
        subprocess.run(["git", *argv], cwd=tmp_path, check=True, capture_output=True)

    git("init", "-q")
    write(tmp_path / "train.py")
    git("add", "train.py")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "reference")
    write(tmp_path / "train.py", reduction=', reduction="sum"')
    done = run_cli("diff", "--steps", "1", "--git", "HEAD", "train.py", "1", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"    your line: train.py:{LOSS_LINE}    loss = F.cross_entropy(model(x), y, reduction=\"sum\")" \
        in done.stdout.splitlines()


def test_bad_input_is_one_line_and_exit_2(tmp_path):
    a = write(tmp_path / "a.py")
    done = run_cli("diff", a, "missing.py", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr == ("torchtriage: error: missing.py: not found; give a script (.py), a module name "
                           "(as python -m takes it) or a step record folder\n")
    done = run_cli("diff", a, cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("torchtriage: error: diff: give two runs; usage:")
