"""`torchtriage splits` / `check_splits` recognize row-id columns (issue 14): a column unique
within each split and disjoint across splits is an id, not content; the report says so, and
`--ignore` / `--content` override it."""

from __future__ import annotations

import json

import numpy as np
import pytest

from torchtriage import check_splits
from torchtriage._cli import main


def write_csv(path, header, rows):
    path.write_text(",".join(header) + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows))
    return path


@pytest.fixture
def tables(tmp_path):
    """30 train and 10 test rows with an `id` column; test rows 3 and 7 repeat train rows 5 and
    11 under new ids (the copies a content comparison must find)."""
    rng = np.random.default_rng(0)
    feats = np.round(rng.normal(size=(40, 3)), 4)
    feats[33], feats[37] = feats[5], feats[11]
    header = ["id", "f1", "f2", "f3", "label"]
    rows = [[f"r{i:04d}", *feats[i], i % 2] for i in range(40)]
    rows[33][4], rows[37][4] = rows[5][4], rows[11][4]
    return (write_csv(tmp_path / "train.csv", header, rows[:30]),
            write_csv(tmp_path / "test.csv", header, rows[30:]))


def run(capsys, *args):
    code = main(list(args))
    return code, capsys.readouterr().out


def test_id_column_is_recognized_and_duplicates_found_under_new_ids(tables, capsys, tmp_path):
    tr, te = tables
    out = tmp_path / "r.json"
    code, text = run(capsys, "splits", str(tr), str(te), "--label", "label", "--no-near", "--json", str(out))
    assert code == 1
    findings = json.loads(out.read_text())["findings"]
    by_code = {f["code"]: f for f in findings}
    assert by_code["data.exact_duplicate"]["message"] == (
        "2 of 10 test rows (20.0%) have an exact copy in train (compared by content, not by name)")
    ident = by_code["data.id_column"]
    assert ident["severity"] == "info" and ident["evidence"]["column"] == "id"
    assert ident["message"] == ("column 'id' is unique within each split and disjoint across splits: "
                                "treated as a row id, not compared as content")
    assert "column 'id' is unique within each split" in text


def test_content_flag_keeps_the_column_as_content(tables, capsys, tmp_path):
    tr, te = tables
    out = tmp_path / "r.json"
    code, _ = run(capsys, "splits", str(tr), str(te), "--label", "label", "--no-near", "--content", "id",
                  "--json", str(out))
    assert code == 0 and json.loads(out.read_text())["findings"] == []  # every row unique by its id


def test_ignore_flag_declares_the_id_and_no_auto_detection_is_reported(tables, capsys, tmp_path):
    tr, te = tables
    out = tmp_path / "r.json"
    code, _ = run(capsys, "splits", str(tr), str(te), "--label", "label", "--no-near", "--ignore", "id",
                  "--json", str(out))
    codes = [f["code"] for f in json.loads(out.read_text())["findings"]]
    assert code == 1 and codes == ["data.exact_duplicate"]


def test_not_ids_text_real_values_shared_or_repeated_values():
    pd = pytest.importorskip("pandas")
    n = 30
    rng = np.random.default_rng(1)
    train = pd.DataFrame({"text": [f"a review number {i}" for i in range(n)],  # free text: content
                          "score": rng.normal(size=n),  # real-valued: content
                          "user": [i % 7 for i in range(n)],  # repeats inside the split
                          "row": list(range(n))})  # an id
    test = pd.DataFrame({"text": [f"a review number {i}" for i in range(n, n + 10)], "score": rng.normal(size=10),
                         "user": [i % 7 for i in range(10)], "row": list(range(n, n + 10))})
    report = check_splits(train, test, near=False)
    assert [(f.code, f.evidence["column"]) for f in report.findings] == [("data.id_column", "row")]
    shared = test.assign(row=list(range(10)))  # ids reused in test: not disjoint, so content
    assert [f.code for f in check_splits(train, shared, near=False).findings] == []


def test_arrays_and_small_tables_have_no_id_detection():
    rng = np.random.default_rng(2)
    assert check_splits(rng.normal(size=(30, 3)), rng.normal(size=(10, 3)), near=False).findings == ()
    pd = pytest.importorskip("pandas")
    small = check_splits(pd.DataFrame({"k": [1, 2], "v": [0.5, 0.7]}), pd.DataFrame({"k": [3], "v": [0.9]}),
                         near=False)
    assert small.findings == ()
