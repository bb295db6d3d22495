"""CLI conventions (issue 18): global options before or after the command, `--json -` on
standard output, `run -m MODULE` like `python -m`, exit codes in `--help`."""

from __future__ import annotations

import json

from conftest import EXAMPLES, run_cli

NAN_SCRIPT = str(EXAMPLES / "nan_in_forward.py")

MODULE = '''\
import json, sys
import torch
import torch.nn as nn

print("argv", json.dumps(sys.argv[1:]), "name", __name__, "file", __file__.endswith("train.py"))
model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
x = torch.randn(8, 3)
for _ in range(2):
    loss = torch.log(model(x) * 0).mean()  # log(0) = -inf: the fault under test
    opt.zero_grad()
    loss.backward()
    opt.step()
'''


def test_lang_after_the_command_is_accepted():
    # Before issue 18: "unrecognized arguments: --lang zh" (only `torchtriage --lang zh run` worked).
    after = run_cli("run", "--lang", "zh", NAN_SCRIPT)
    assert after.returncode == 0, after.stderr
    assert "== torchtriage 诊断报告 ==\n-- 首要问题 --\n" in after.stderr
    from torchtriage._cli import build_parser

    for argv in (["run", "--lang", "zh", "x.py"], ["--lang", "zh", "run", "x.py"]):
        args = build_parser().parse_args(argv)
        assert (args.lang, args.script, args.args) == ("zh", "x.py", [])
    args = build_parser().parse_args(["--lang", "zh", "run", "x.py"])
    assert args.lang == "zh"  # the command's parser does not reset a value given before it


def test_lang_after_the_script_belongs_to_the_script(tmp_path):
    script = tmp_path / "echo.py"
    script.write_text("import sys; print(sys.argv[1:])\n", encoding="utf-8")
    proc = run_cli("run", str(script), "--lang", "zh")
    assert proc.returncode == 0
    assert proc.stdout == "['--lang', 'zh']\n"
    assert "== torchtriage report ==" in proc.stderr  # English: the option was the script's


def test_json_dash_writes_the_report_to_stdout_after_the_scripts_output():
    proc = run_cli("run", "--json", "-", NAN_SCRIPT)
    assert proc.returncode == 0, proc.stderr
    script_lines, _, rest = proc.stdout.partition("{")
    assert script_lines.startswith("step 0: loss nan")
    data = json.loads("{" + rest)
    assert data["schema"] == "torchtriage.report/1"
    assert data["findings"][data["primary"]]["code"] == "numerical.nonfinite_forward"
    assert data["findings"][data["primary"]]["module"] == "encoder.2"


def test_run_dash_m_runs_a_module_like_python_dash_m(tmp_path):
    pkg = tmp_path / "proj"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("", encoding="utf-8")
    (pkg / "train.py").write_text(MODULE, encoding="utf-8")
    proc = run_cli("run", "--json", "r.json", "-m", "proj.train", "--epochs", "2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == 'argv ["--epochs", "2"] name __main__ file True\n'
    report = json.loads((tmp_path / "r.json").read_text(encoding="utf-8"))
    primary = report["findings"][report["primary"]]
    assert (primary["code"], primary["step"], primary["op"]) == ("numerical.nonfinite_loss", 0, "aten::log")
    assert report["meta"]["module"] == "proj.train"
    assert report["meta"]["argv"] == ["-m", "proj.train", "--epochs", "2"]


def test_run_dash_m_unknown_module_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    from torchtriage._cli import main

    monkeypatch.chdir(tmp_path)
    assert main(["run", "-m", "no_such_pkg.train"]) == 2
    assert capsys.readouterr().err == (f"torchtriage: error: -m no_such_pkg.train: no module named "
                                       f"'no_such_pkg.train' (No module named 'no_such_pkg'; working directory: "
                                       f"{tmp_path})\n")
    assert main(["run", "-m"]) == 2
    assert capsys.readouterr().err == ("torchtriage: error: run -m: no module given; usage: torchtriage run "
                                       "[--json PATH] -m MODULE [ARGS...]\n")


def test_exit_codes_are_documented_in_help():
    from torchtriage._cli import build_parser

    parser = build_parser()
    top = parser.format_help()
    assert "exit status:" in top
    for line in ("  0    done;", "  1    the script raised", "  2    bad input", "  130  interrupted"):
        assert line in top
    run = parser._subparsers._group_actions[0].choices["run"].format_help()
    assert "exit status: the script's own" in run
    assert "run a module as `python -m MODULE ARGS...`" in run
    assert "--tensorboard DIR" in run and "--wandb" in run


ARGS = {"run": ["x.py"], "env": [], "lab": [], "splits": ["a.csv", "b.csv"], "replay": ["B"], "shrink": ["B"],
        "make-test": ["B"], "report": ["r.json"], "diff": ["a.py", "b.py"]}


def test_every_command_takes_the_global_options_before_or_after_it():
    import pytest

    from torchtriage._cli import build_parser

    parser = build_parser()
    commands = parser._subparsers._group_actions[0].choices
    assert sorted(commands) == sorted(ARGS)
    for command, args in ARGS.items():
        for argv in (["--lang", "zh", command, *args], [command, "--lang", "zh", *args]):
            ns = parser.parse_args(argv)
            # `report --lang` is the report's headings' language (dest report_lang)
            assert "zh" in (ns.lang, getattr(ns, "report_lang", None)), argv
    with pytest.raises(SystemExit) as e:
        parser.parse_args(["env", "--lang", "fr"])
    assert e.value.code == 2


# Words that only mean something to a reader of the method's source text (its chapters,
# appendices, question numbers). User-facing text names the faults plainly (issue 18 §6).
_INSIDER = r"(?i)\bthe seed'?s?\b|\bchapter\b|\bappendix\b|\bQ[1-6]\b|附录|第\s*\d+\s*章|章节"


def test_user_facing_text_has_no_words_from_the_methods_source():
    import re

    import torchtriage
    from torchtriage._catalogue import catalogue
    from torchtriage._cli import build_parser

    bad = [(lang, key, text) for lang, table in catalogue().items() for key, text in table.items()
           if re.search(_INSIDER, text)]
    assert bad == []
    parser = build_parser()
    helps = [parser.format_help()] + [p.format_help() for p in parser._subparsers._group_actions[0].choices.values()]
    assert [h for h in helps if re.search(_INSIDER, h)] == []
    import inspect

    docs = {name: inspect.getdoc(getattr(torchtriage, name)) or "" for name in torchtriage.__all__}
    assert {name: re.findall(_INSIDER, doc) for name, doc in docs.items() if re.search(_INSIDER, doc)} == {}


def test_help_names_the_faults_plainly_in_the_language_asked_for():
    en = run_cli("lab", "--help")
    assert ("Run four common faults in memory (a broadcast loss, a cut graph, an exp overflow, a writer in "
            "both splits)") in " ".join(en.stdout.split())
    # Before: the description said "an item() rebuild" and "a group leak", in English for --lang zh too.
    for argv in (["--lang", "zh", "lab", "--help"], ["lab", "--lang", "zh", "--help"]):
        zh = run_cli(*argv)
        assert ("在内存中运行四个常见故障（广播的损失、被切断的计算图、指数溢出、"
                "同一书写者出现在两个划分中）") in zh.stdout
    top = run_cli("--lang", "zh", "--help")
    assert "退出码：\n" in top.stdout


def test_help_language_is_read_before_the_scripts_arguments():
    from torchtriage._cli import _help_language

    assert _help_language(["--lang", "zh", "run", "x.py"]) == "zh"
    assert _help_language(["run", "--lang=zh", "--help"]) == "zh"
    assert _help_language(["run", "x.py", "--lang", "zh"]) is None  # the script's own option
    assert _help_language(["run", "-m", "pkg", "--lang", "zh"]) is None
    assert _help_language(["--lang", "fr", "lab"]) is None  # argparse reports it


def test_version_names_torchtriage_torch_and_python():
    import platform

    import torch

    import torchtriage

    p = run_cli("--version")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == (f"torchtriage {torchtriage.__version__} (torch {torch.__version__}, "
                           f"Python {platform.python_version()})")


def test_every_commands_help_ends_with_its_exit_codes():
    from torchtriage._cli import build_parser

    commands = build_parser()._subparsers._group_actions[0].choices
    assert set(commands) == set(ARGS)
    for name, parser in commands.items():
        text = parser.format_help()
        assert "exit status" in text.lower(), name
        assert "2 " in text.lower().split("exit status", 1)[1], name
    splits = commands["splits"].format_help()
    assert "0 nothing leaks; 1 something leaks between the splits; 2 bad input" in splits
    replay = commands["replay"].format_help()
    assert "1 the fault reproduced" in replay


def test_a_dim_is_printed_as_the_user_wrote_it():
    from torchtriage._triage._explain import as_written

    assert as_written("18446744073709551615") == "-1"  # -1 through a C++ size_t
    assert as_written("18446744073709551614") == "-2"
    assert as_written("5") == "5" and as_written("-3") == "-3"
    err = RuntimeError("Dimension out of range (expected to be in range of [-2, 1], but got 18446744073709551615)")
    import torchtriage

    finding = torchtriage.triage_exception(err).primary
    assert finding.code == "shape.dim_range"
    assert "dim -1 does not exist" in finding.message and "1844" not in finding.message
