"""Where an optimizer built before `watch()` was built: its line read from the user's source
(`_built_at.construction_line`), scored by the literal keyword arguments against the
optimizer's settings; no line when two calls are equally likely."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch
import torch.nn as nn

from torchtriage._built_at import construction_line


def _write(tmp_path, text):
    path = tmp_path / "train.py"
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_the_call_whose_arguments_agree_is_the_line(tmp_path):
    path = _write(tmp_path, """\
        import torch
        from torch import optim

        def build(model):
            warmup = optim.SGD(model.parameters(), lr=0.1)
            opt = optim.SGD(model.parameters(), lr=0.001, momentum=0.9)
            return warmup, opt
        """)
    opt = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.001, momentum=0.9)
    f = construction_line(opt, [path])
    assert (f.file, f.line, f.function) == (path, 6, "build")
    assert f.source == "opt = optim.SGD(model.parameters(), lr=0.001, momentum=0.9)"


def test_two_equally_likely_calls_are_no_answer(tmp_path):
    path = _write(tmp_path, """\
        import torch
        a = torch.optim.AdamW(params_a, lr=lr)
        b = torch.optim.AdamW(params_b, lr=lr)
        """)
    opt = torch.optim.AdamW(nn.Linear(2, 1).parameters(), lr=1e-3)
    assert construction_line(opt, [path]) is None


def test_no_call_of_that_class_and_unreadable_files_are_no_answer(tmp_path):
    path = _write(tmp_path, "import torch\nopt = torch.optim.Adam(p, lr=0.1)\n")
    opt = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)
    assert construction_line(opt, [path, str(tmp_path / "missing.py")]) is None
    (tmp_path / "broken.py").write_text("def (:\n")
    assert construction_line(opt, [str(tmp_path / "broken.py")]) is None


def test_a_watched_optimizer_built_before_the_session_gets_its_line_in_the_finding(tmp_path):
    """The tutorial's bug (the model rebuilt after its optimizer) under `watch(model, opt)`:
    the optimizer was built before the session, and the finding still names its line."""
    script = tmp_path / "stale.py"
    script.write_text(textwrap.dedent("""\
        import torch
        import torch.nn as nn
        import torchtriage

        torch.manual_seed(0)
        net = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        net = nn.Linear(4, 2)
        with torchtriage.watch(net, optimizer, on_anomaly="record", report=False) as s:
            for _ in range(3):
                loss = net(torch.randn(8, 4)).pow(2).mean()
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
        f = s.report.primary
        print(f.code, f.file == __file__, f.line)
        """))
    p = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "gradient.optimizer_stale True 7"
