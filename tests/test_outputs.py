"""Output paths behave like a shell redirection and are checked before the script runs
(issue 10): regular files atomically, symlinks followed, FIFOs and devices written in place and
never replaced, `-` is stdout, a write error is one line and exit 2, never a traceback."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from conftest import run_cli
from torchtriage._outputs import OutputError, check_output, write_output

OK_SCRIPT = "open('ran.txt', 'w').write('ran')\nprint('script output')\n"


def _script(tmp_path: Path) -> Path:
    script = tmp_path / "ok.py"
    script.write_text(OK_SCRIPT, encoding="utf-8")
    return script


def _one_error_line(stderr: str, expected: str) -> None:
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("torchtriage: error:")]
    assert errors == [expected], stderr


# ------------------------------------------------------------------------------ the helper itself
def test_regular_file_is_replaced_atomically_keeping_its_mode(tmp_path):
    target = tmp_path / "r.json"
    target.write_text("old")
    os.chmod(target, 0o640)
    inode = target.stat().st_ino
    write_output(str(target), "new\n", "--json")
    assert target.read_text() == "new\n"
    assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert target.stat().st_ino != inode  # a new file renamed over the old one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.json"]  # no temporary file left


def test_new_file_gets_the_umask_mode(tmp_path):
    old = os.umask(0o022)
    try:
        write_output(str(tmp_path / "n.json"), b"{}", "--json")
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / "n.json").stat().st_mode) == 0o644


def test_symlink_is_followed_and_stays_a_link(tmp_path):
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "t.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    dangling = tmp_path / "dangling.json"
    dangling.symlink_to(tmp_path / "real" / "created.json")
    write_output(str(link), "via link", "--json")
    write_output(str(dangling), "created", "--json")
    assert link.is_symlink() and dangling.is_symlink()
    assert target.read_text() == "via link"
    assert (tmp_path / "real" / "created.json").read_text() == "created"


def test_fifo_is_written_in_place(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    assert check_output(str(fifo), "--json") is None
    write_output(str(fifo), "through the pipe", "--json")
    reader.join(timeout=30)
    assert got == [b"through the pipe"]
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


def test_devices_are_written_in_place_and_dev_full_fails_in_one_line():
    assert check_output("/dev/null", "--json") is None
    write_output("/dev/null", "x" * 10000, "--json")
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    assert check_output("/dev/full", "--json") is None  # writable; only the write can fail
    with pytest.raises(OutputError) as e:
        write_output("/dev/full", "x", "--json")
    assert str(e.value) == "--json /dev/full: cannot write the output: No space left on device"
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_dash_is_stdout(capfd):
    write_output("-", "to stdout\n", "--json")
    assert capfd.readouterr().out == "to stdout\n"
    assert check_output("-", "--json") is None


def test_unwritable_paths_are_found_before_writing(tmp_path):
    (tmp_path / "afile").write_text("")
    assert check_output(str(tmp_path / "no" / "r.json"), "--json") == (
        f"--json {tmp_path / 'no' / 'r.json'}: folder {tmp_path / 'no'} does not exist")
    assert check_output(str(tmp_path), "--html") == f"--html {tmp_path}: is a folder, expected a file path"
    assert check_output("/proc/r.json", "--json").startswith("--json /proc/r.json: not writable (")
    assert check_output(str(tmp_path / "afile" / "r.json"), "--json").endswith("does not exist")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]  # the probe left nothing


# ------------------------------------------------------------------------------ through the commands
def test_run_json_to_dev_full_is_one_line_and_exit_2(tmp_path):
    p = run_cli("run", "--json", "/dev/full", str(_script(tmp_path)), cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    _one_error_line(p.stderr, "torchtriage: error: --json /dev/full: cannot write the output: No space left on device")
    assert stat.S_ISCHR(os.stat("/dev/full").st_mode)


def test_run_outputs_to_link_fifo_dev_null_and_stdout(tmp_path):
    (tmp_path / "t.json").write_text("old")
    (tmp_path / "link.json").symlink_to(tmp_path / "t.json")
    os.mkfifo(tmp_path / "pipe")
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append((tmp_path / "pipe").read_bytes()))
    reader.start()
    p = run_cli("run", "--json", "link.json", "--html", "pipe", str(_script(tmp_path)), cwd=tmp_path)
    reader.join(timeout=60)
    assert p.returncode == 0, p.stderr
    assert (tmp_path / "link.json").is_symlink()
    assert json.loads((tmp_path / "t.json").read_text())["schema"] == "torchtriage.report/1"
    assert got and got[0].startswith(b"<!DOCTYPE html>") and stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)
    p = run_cli("run", "--json", "-", "--html", "/dev/null", str(_script(tmp_path)), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.startswith("script output\n")
    assert json.loads(p.stdout.split("\n", 1)[1])["schema"] == "torchtriage.report/1"
    assert not (tmp_path / "-").exists() and stat.S_ISCHR(os.stat("/dev/null").st_mode)


@pytest.mark.parametrize("flag, path", [("--json", "/proc/r.json"), ("--html", "/sys/x.html")])
def test_run_refuses_an_unwritable_output_before_the_script_runs(tmp_path, flag, path):
    p = run_cli("run", flag, path, str(_script(tmp_path)), cwd=tmp_path)
    assert p.returncode == 2
    assert "Traceback" not in p.stderr and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith(f"torchtriage: error: {flag} {path}: not writable ("), p.stderr
    assert not (tmp_path / "ran.txt").exists(), "the script ran before the output was checked"


def test_report_html_outputs(tmp_path):
    run = run_cli("run", "--json", "r.json", str(_script(tmp_path)), cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    p = run_cli("report", "r.json", "--html", "/sys/x.html", cwd=tmp_path)
    assert p.returncode == 2
    assert (p.stderr.startswith("torchtriage: error: --html /sys/x.html: not writable (") and len(p.stderr.splitlines())
            == 1)
    p = run_cli("report", "r.json", "--html", "/dev/full", cwd=tmp_path)
    assert p.returncode == 2
    _one_error_line(p.stderr, "torchtriage: error: --html /dev/full: cannot write the output: No space left on device")
    p = run_cli("report", "r.json", "--html", "-", cwd=tmp_path)
    assert p.returncode == 0 and p.stdout.startswith("<!DOCTYPE html>")


def test_splits_json_to_dev_full(tmp_path):
    for name in ("train", "test"):
        (tmp_path / f"{name}.csv").write_text(f"x,y\n1,{name}\n")
    p = run_cli("splits", "train.csv", "test.csv", "--json", "/dev/full", cwd=tmp_path)
    assert p.returncode == 2
    _one_error_line(p.stderr, "torchtriage: error: --json /dev/full: cannot write the output: No space left on device")


def _no_file_growth() -> None:
    # a file-size limit of 0: every write to a regular file fails (EFBIG; Python ignores SIGXFSZ)
    import resource

    resource.setrlimit(resource.RLIMIT_FSIZE, (0, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))


def _cli_no_file_growth(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1", PYTHONDONTWRITEBYTECODE="1")
    return subprocess.run([sys.executable, "-m", "torchtriage", *args], capture_output=True, text=True,
                          cwd=tmp_path, env=env, timeout=180, preexec_fn=_no_file_growth)


def test_write_errors_on_regular_files_are_one_line_and_keep_the_old_file(tmp_path):
    (tmp_path / "r.json").write_text("old")
    p = _cli_no_file_growth(tmp_path, "run", "--json", "r.json", str(_script(tmp_path)))
    assert p.returncode == 2
    _one_error_line(p.stderr, "torchtriage: error: --json r.json: cannot write the output: File too large")
    assert (tmp_path / "r.json").read_text() == "old"
    for name in ("train", "test"):
        (tmp_path / f"{name}.csv").write_text(f"x,y\n1,{name}\n2,{name}\n")
    p = _cli_no_file_growth(tmp_path, "splits", "train.csv", "test.csv", "--group", "x", "--suggest-split", "s.csv")
    assert p.returncode == 2
    _one_error_line(p.stderr, "torchtriage: error: --suggest-split s.csv: cannot write the output: File too large")
    left = sorted(f.name for f in tmp_path.iterdir())
    assert "s.csv" not in left and not [n for n in left if n.startswith(".") or n.endswith(".partial")], left


def test_run_bundle_folder_is_checked_before_the_script_runs(tmp_path):
    (tmp_path / "afile").write_text("")
    p = run_cli("run", "--bundle", "afile", str(_script(tmp_path)), cwd=tmp_path)
    assert (p.returncode, p.stderr) == (2, "torchtriage: error: --bundle afile: exists and is not a folder\n")
    p = run_cli("run", "--bundle", "/proc/b", str(_script(tmp_path)), cwd=tmp_path)
    assert p.returncode == 2 and p.stderr.startswith("torchtriage: error: --bundle /proc/b: not writable ("), p.stderr
    assert not (tmp_path / "ran.txt").exists()


@pytest.mark.parametrize("command", ["shrink", "make-test"])
def test_repro_out_folder_is_checked_first(tmp_path, command):
    p = run_cli(command, "some-bundle", "--out", "/proc/out", cwd=tmp_path)
    assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
    assert p.stderr.startswith("torchtriage: error: --out /proc/out: not writable ("), p.stderr


def test_notebook_magic_outputs_like_the_cli(tmp_path, monkeypatch, capsys):
    """`%%torchtriage --json/--html`: checked before the cell runs (one-line ConfigError), a
    symlink followed, a write error (/dev/full) one line on stderr with the report still shown."""
    pytest.importorskip("IPython")
    from IPython.core.interactiveshell import InteractiveShell

    from torchtriage._errors import ConfigError
    from torchtriage._notebook import run_cell

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))
    shell = InteractiveShell.instance()
    try:
        with pytest.raises(ConfigError) as e:
            run_cell(shell, "--json /proc/r.json", "ran = 1")
        assert str(e.value).startswith("%%torchtriage: --json /proc/r.json: not writable ("), str(e.value)
        assert "ran" not in shell.user_ns  # the cell did not run
        (tmp_path / "t.html").write_text("old")
        (tmp_path / "link.html").symlink_to(tmp_path / "t.html")
        capsys.readouterr()
        run_cell(shell, "--json /dev/full --html link.html", "ran = 1")
        err = capsys.readouterr()
        assert shell.user_ns["ran"] == 1
        assert [line for line in err.err.splitlines() if "error" in line] == [
            "torchtriage: error: --json /dev/full: cannot write the output: No space left on device"]
        assert "== torchtriage report ==" in err.out
        assert (tmp_path / "link.html").is_symlink() and (tmp_path / "t.html").read_text().startswith("<!DOCTYPE html>")
    finally:
        InteractiveShell.clear_instance()


@pytest.mark.parametrize("command", [["env"], ["report", "r.json"], ["splits", "train.csv", "test.csv"],
                                     ["--help"], ["run", "--help"]],
                         ids=["env", "report", "splits", "help", "run-help"])
def test_stdout_to_dev_full_is_one_line_and_exit_2(tmp_path, command):
    """`torchtriage COMMAND > /dev/full`: one line, exit 2, no traceback (nor Python's own
    "Exception ignored" at exit)."""
    (tmp_path / "r.json").write_text(json.dumps({"schema": "torchtriage.report/1", "findings": [], "meta": {}}))
    for name in ("train", "test"):
        (tmp_path / f"{name}.csv").write_text(f"x,y\n1,{name}\n")
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    with open("/dev/full", "w") as full:
        p = subprocess.run([sys.executable, "-m", "torchtriage", *command], stdout=full, stderr=subprocess.PIPE,
                           text=True, cwd=tmp_path, env=env, timeout=180)
    assert (p.returncode, p.stderr) == (
        2, "torchtriage: error: standard output: cannot write the output: No space left on device\n")


def test_stdout_closed_by_the_reader_ends_quietly(tmp_path):
    """`torchtriage env | head -1`: the reader went away; no traceback, SIGPIPE's status."""
    read, write = os.pipe()
    os.close(read)  # the reader is gone before the command writes
    try:
        p = subprocess.run([sys.executable, "-m", "torchtriage", "env"], stdout=write, stderr=subprocess.PIPE,
                           text=True, cwd=tmp_path, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=180)
    finally:
        os.close(write)
    assert (p.returncode, p.stderr) == (141, "")


def test_device_nodes_in_a_writable_folder_are_never_replaced(tmp_path):
    """As root, in a temporary (writable) folder: a rename over the node would succeed there, so
    the node surviving shows it was written in place."""
    full, null = tmp_path / "full", tmp_path / "null"
    try:
        os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
        os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    except (PermissionError, OSError) as e:
        pytest.skip(f"cannot create device nodes here: {e}")
    script = _script(tmp_path)
    p = run_cli("run", "--json", str(full), "--html", str(null), str(script), cwd=tmp_path)
    assert p.returncode == 2
    _one_error_line(p.stderr, f"torchtriage: error: --json {full}: cannot write the output: No space left on device")
    p = run_cli("run", "--json", str(null), str(script), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert stat.S_ISCHR(os.stat(full).st_mode) and stat.S_ISCHR(os.stat(null).st_mode)
    assert sorted(f.name for f in tmp_path.iterdir()) == ["full", "null", "ok.py", "ran.txt"]
