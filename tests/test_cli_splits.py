"""`torchtriage splits`: findings, exit codes, JSON, --suggest-split, and one line per bad input."""

from __future__ import annotations

import hashlib
import json

import pytest

from conftest import run_cli
from torchtriage._cli import main


class _Done:
    def __init__(self, returncode, stdout, stderr):
        self.returncode, self.stdout, self.stderr = returncode, stdout, stderr


@pytest.fixture
def cli(capsys):
    """The command in-process (same parser and code as the subprocess; no torch start-up each time)."""

    def call(*args):
        code = main(list(args))
        out = capsys.readouterr()
        return _Done(code, out.out, out.err)

    return call


@pytest.fixture
def files(tmp_path):
    tr = tmp_path / "train.csv"
    tr.write_text("writer,x1,x2,label,day\nwriter-a,1,2,0,2024-01-01\nwriter-b,3,4,1,2024-01-05\n")
    te = tmp_path / "test.jsonl"
    te.write_text('{"writer": "writer-a", "x1": 1, "x2": 2, "label": 1, "day": "2024-01-02"}\n'
                  '{"writer": "writer-c", "x1": 5, "x2": 6, "label": 0, "day": "2024-02-01"}\n')
    clean = tmp_path / "clean.csv"
    clean.write_text("writer,x1,x2,label,day\nwriter-d,7,8,0,2024-03-01\nwriter-e,9,10,1,2024-03-02\n")
    return tr, te, clean


def _expect_one_error_line(p, text):
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    assert lines[0] == "torchtriage: error: " + text


def test_finds_group_overlap_time_and_writes_json(files, tmp_path):
    tr, te, _ = files
    out = tmp_path / "report.json"
    p = run_cli("splits", str(tr), str(te), "--group", "writer", "--time", "day", "--label", "label",
                "--json", str(out))
    assert p.returncode == 1, p.stderr
    assert "✗ [data] 1 group(s) occur in both train and test (key: writer): 'writer-a'" in p.stdout
    assert "1 of 2 test rows (50.0%) are earlier than the end of train" in p.stdout
    d = json.loads(out.read_text())
    assert [f["code"] for f in d["findings"]] == ["data.group_overlap", "data.time_overlap",
                                                  "data.exact_duplicate", "data.conflicting_labels"]
    assert {f["category"] for f in d["findings"]} == {"data"}
    assert d["findings"][0]["evidence"]["groups"] == ["writer-a"]


def test_clean_split_exits_zero(files):
    tr, _, clean = files
    p = run_cli("splits", str(tr), str(clean), "--group", "writer", "--time", "day", "--label", "label")
    assert p.returncode == 0, p.stderr
    assert "No finding" in p.stdout


def test_parquet_and_val(files, tmp_path, cli):
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    tr, te, clean = files
    pq = tmp_path / "val.parquet"
    pd.read_csv(clean).to_parquet(pq)
    p = cli("splits", str(tr), str(te), "--val", str(pq), "--group", "writer", "--label", "label")
    assert p.returncode == 1 and "(key: writer): 'writer-a'" in p.stdout


def test_suggest_split_writes_a_new_file_and_leaves_inputs(files, tmp_path, cli):
    tr, te, _ = files
    before = [hashlib.sha256(f.read_bytes()).hexdigest() for f in (tr, te)]
    out = tmp_path / "suggested.csv"
    p = cli("splits", str(tr), str(te), "--group", "writer", "--suggest-split", str(out))
    assert p.returncode == 1
    assert (f"wrote a suggested group-aware split to {out} (4 rows, 3 groups; column 'split'); "
            "your input files were not changed") in p.stderr
    rows = out.read_text().splitlines()
    assert rows[0] == "writer,x1,x2,label,day,split"
    by_writer = {}
    for r in rows[1:]:
        cells = r.split(",")
        by_writer.setdefault(cells[0], set()).add(cells[-1])
    assert all(len(s) == 1 for s in by_writer.values()), by_writer  # no group in two splits
    assert [hashlib.sha256(f.read_bytes()).hexdigest() for f in (tr, te)] == before


def test_suggest_split_refuses_existing_file_and_needs_group(files, cli):
    tr, te, _ = files
    _expect_one_error_line(cli("splits", str(tr), str(te), "--group", "writer", "--suggest-split", str(tr)),
                    f"--suggest-split {tr}: the file exists; give a new path (input files are never overwritten)")
    _expect_one_error_line(cli("splits", str(tr), str(te), "--suggest-split", str(tr) + ".new.csv"),
                    "--suggest-split needs --group COL (the suggested split keeps each group in one split)")


def test_missing_column(files, cli):
    tr, te, _ = files
    _expect_one_error_line(cli("splits", str(tr), str(te), "--group", "patient"),
                    "groups: column 'patient' is not in the train split; its columns: writer, x1, x2, label, day")


def test_unreadable_and_unsupported_files(files, tmp_path, cli):
    tr, _, _ = files
    missing = tmp_path / "nope.csv"
    _expect_one_error_line(cli("splits", str(tr), str(missing)), f"cannot read {missing}: no such file")
    xlsx = tmp_path / "test.xlsx"
    xlsx.write_bytes(b"PK")
    _expect_one_error_line(cli("splits", str(tr), str(xlsx)),
                    f"{xlsx}: unsupported file format .xlsx; accepted: .csv, .jsonl, .ndjson, .parquet, .pq, .tsv")
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"writer": "a"}\n[1, 2]\n')
    _expect_one_error_line(cli("splits", str(tr), str(broken)),
                    f"cannot read {broken}: line 2: a JSON list, expected an object per line")


def test_splits_with_different_columns_and_bad_threshold(files, tmp_path, cli):
    tr, _, _ = files
    other = tmp_path / "other.csv"
    other.write_text("writer,x1\nwriter-z,1\n")
    _expect_one_error_line(cli("splits", str(tr), str(other), "--group", "writer"),
                    "the test split lacks column(s) day, label, x2 that train has; its columns: writer, x1")
    _expect_one_error_line(cli("splits", str(tr), str(other), "--near-threshold", "0"),
                    "near_threshold=0.0; accepted: a number in (0, 1]")


def test_damaged_parquet_empty_split_and_bad_encoding_name_the_file(files, tmp_path, cli):
    pytest.importorskip("pyarrow")
    tr, _, _ = files
    damaged = tmp_path / "damaged.parquet"
    damaged.write_bytes(b"not a parquet file at all" * 40)
    _expect_one_error_line(cli("splits", str(tr), str(damaged)),
                    f"cannot read {damaged}: Parquet magic bytes not found in footer. "
                    "Either the file is corrupted or this is not a parquet file.")
    empty = tmp_path / "empty.csv"
    empty.write_text("writer,x1,x2,label,day\n")
    _expect_one_error_line(cli("splits", str(tr), str(empty)),
                    f"the test split (file {empty}) has no rows; accepted: splits with at least one row")
    latin = tmp_path / "latin.csv"
    latin.write_bytes("writer,x1,x2,label,day\nJos\xe9,1,2,0,2024-01-01\n".encode("latin-1"))
    p = cli("splits", str(tr), str(latin))
    assert p.returncode == 2 and p.stderr.startswith(f"torchtriage: error: cannot read {latin}: 'utf-8' codec")
    assert len(p.stderr.strip().splitlines()) == 1
