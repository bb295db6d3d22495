"""The split checks give the same findings on every engine (issue 17).

The in-process tests of `test_leakage.py` run again with the comparisons forced onto DuckDB
(the out-of-core engine) and onto a local Dask cluster of 2 workers; table files with every
kind of leak are compared finding by finding across the three engines; bad input gives one
line and exit code 2 on every engine.
"""

from __future__ import annotations

import inspect
import json

import numpy as np
import pytest
import tests.test_leakage as in_process

from torchtriage import check_splits
from torchtriage._leakage import _engines

duckdb = pytest.importorskip("duckdb")

SKIP = {"test_import_leaves_pandas_and_pyarrow_out", "test_progress_lines_on_stderr",
        "test_bad_inputs_name_what_was_given", "test_splits_of_different_kinds"}
CASES = [name for name, fn in inspect.getmembers(in_process, inspect.isfunction)
         if name.startswith("test_") and name not in SKIP]


def _forced(monkeypatch, engine):
    """Route check_splits' "auto" to `engine`; returns the list of engines actually chosen."""
    real = _engines.choose
    used: list[str] = []

    def choose(given, sources):
        name = engine if given == "auto" else real(given, sources)
        used.append(name)
        return name

    monkeypatch.setattr(_engines, "choose", choose)
    return used


@pytest.mark.parametrize("name", CASES)
def test_in_process_suite_on_duckdb(name, monkeypatch, request):
    """Every in-process leakage test passes unchanged with DuckDB doing the comparisons."""
    used = _forced(monkeypatch, "duckdb")
    _run_case(name, request)  # the in-process test's own assertions, on DuckDB's answers
    assert used and set(used) == {"duckdb"}, used

@pytest.fixture(scope="module")
def dask_client():
    pytest.importorskip("dask.dataframe")
    distributed = pytest.importorskip("distributed")
    cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                       dashboard_address="127.0.0.1:0",
                                       silence_logs=50)
    client = distributed.Client(cluster)
    try:
        yield client
    finally:
        client.close()
        cluster.close()


DASK_CASES = ["test_seed_writer_overlap_reports_writer_a", "test_exact_duplicates_match_across_dtypes",
              "test_duplicates_inside_test", "test_conflicting_labels_from_tensor_dataset", "test_near_duplicate_text",
              "test_near_duplicate_table_rows", "test_near_duplicate_numbers_flag_copies_not_neighbours",
              "test_time_leakage_with_dates_and_clean_order",
              "test_shared_indices_and_a_real_content_copy_are_told_apart", "test_scaler_fitted_on_all_data"]


@pytest.mark.parametrize("name", DASK_CASES)
def test_in_process_suite_on_dask(name, monkeypatch, request, dask_client):
    """Every in-process leakage test passes unchanged on a local Dask cluster of 2 workers."""
    used = _forced(monkeypatch, "dask")
    _run_case(name, request)  # the in-process test's own assertions, on the cluster's answers
    assert used and set(used) == {"dask"}, used


def _run_case(name, request):
    fn = getattr(in_process, name)
    params = inspect.signature(fn).parameters
    marks = [m for m in getattr(fn, "pytestmark", []) if m.name == "parametrize"]
    kwargs = {p: request.getfixturevalue(p) for p in params if p in ("tmp_path", "capsys")}
    if marks:
        argnames, values = marks[0].args[0], marks[0].args[1]
        names = [a.strip() for a in argnames.split(",")] if isinstance(argnames, str) else list(argnames)
        for v in values:
            v = v if isinstance(v, (tuple, list)) and len(names) > 1 else (v,)
            fn(**kwargs, **dict(zip(names, v)))
    else:
        fn(**kwargs)


# --- table files with every kind of leak, on every engine -----------------------------------

def _leaky_tables(tmp_path, fmt="parquet", shards=2):
    """train/test shards (20 columns) with injected group overlap, time overlap, exact copies,
    repeats inside test, conflicting labels and near copies; returns (train, test) specs."""
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    rng = np.random.default_rng(7)
    n_tr, n_te = 600, 200
    cols = [f"f{i}" for i in range(20)]
    tr = pd.DataFrame(rng.standard_normal((n_tr, 20)).round(6), columns=cols)
    te = pd.DataFrame(rng.standard_normal((n_te, 20)).round(6), columns=cols)
    tr["user"] = [f"u{i % 150}" for i in range(n_tr)]
    te["user"] = [f"u{150 + i % 50}" for i in range(n_te)]
    te.loc[:2, "user"] = ["u3", "u7", "u9"]                           # 3 users in both
    tr["day"] = np.arange(n_tr, dtype=np.float64)
    te["day"] = np.arange(n_tr, n_tr + n_te, dtype=np.float64)
    te.loc[10:13, "day"] = [5.0, 6.0, 7.0, 8.0]                       # 4 test rows before train ends
    tr["label"] = rng.integers(0, 3, n_tr)
    te["label"] = rng.integers(0, 3, n_te)
    te.loc[20:24, cols] = tr.loc[100:104, cols].to_numpy()            # 5 exact copies of train rows
    te.loc[20:24, "label"] = tr.loc[100:104, "label"].to_numpy()
    te.loc[21, "label"] = (tr.loc[101, "label"] + 1) % 3             # one of them with another label
    te.loc[30:31, cols] = te.loc[40:41, cols].to_numpy()              # 2 repeats inside test
    te.loc[50:53, cols] = (tr.loc[200:203, cols] * 1.001).to_numpy()  # 4 near copies
    out = []
    for name, df in (("train", tr), ("test", te)):
        d = tmp_path / name
        d.mkdir()
        for k, part in enumerate(np.array_split(np.arange(len(df)), shards)):
            piece = df.iloc[part]
            path = d / f"part-{k}.{fmt}"
            if fmt == "parquet":
                piece.to_parquet(path, index=False)
            else:
                piece.to_csv(path, index=False)
        out.append(str(d))
    return out


def _comparable(report):
    d = report.to_dict()
    d.pop("meta", None)
    for f in d["findings"]:
        f.pop("file", None), f.pop("line", None)
        f.get("evidence", {}).pop("source_line", None)
    return json.dumps(d, sort_keys=True, default=str)


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_engines_agree_on_sharded_table_files(tmp_path, fmt, dask_client):
    train, test = _leaky_tables(tmp_path, fmt)
    reports = {e: check_splits(train, test, groups="user", time="day", labels="label", engine=e)
               for e in ("memory", "duckdb", "dask")}
    mem = reports["memory"]
    assert [f.code for f in mem.findings] == ["data.group_overlap", "data.time_overlap", "data.exact_duplicate",
                                              "data.test_duplicate", "data.conflicting_labels", "data.near_duplicate"]
    ev = {f.code: f.evidence for f in mem.findings}
    assert ev["data.group_overlap"]["groups"] == ["u3", "u7", "u9"]
    assert ev["data.time_overlap"]["earlier_rows"] == 4
    assert ev["data.exact_duplicate"]["duplicated_rows"] == 5
    assert ev["data.exact_duplicate"]["examples"][0] == {"train": 100, "test": 20}
    assert ev["data.test_duplicate"]["examples"] == [[30, 40], [31, 41]]
    assert ev["data.conflicting_labels"]["inputs_with_conflicting_labels"] == 2  # the copy and the repeat
    assert ev["data.near_duplicate"]["rows_with_near_duplicate"] == 4
    assert {r.meta["engine"] for r in reports.values()} == {"memory", "duckdb", "dask"}
    assert _comparable(reports["duckdb"]) == _comparable(mem)
    assert _comparable(reports["dask"]) == _comparable(mem)


def test_duckdb_engine_runs_under_a_memory_cap(tmp_path):
    train, test = _leaky_tables(tmp_path)
    r = check_splits(train, test, groups="user", engine="duckdb", memory_limit="64MB")
    assert r.meta["engine"] == "duckdb" and "data.group_overlap" in [f.code for f in r.findings]
    with pytest.raises(ValueError, match="memory limit 'lots' was refused by DuckDB"):
        check_splits(train, test, engine="duckdb", memory_limit="lots")


def test_bad_engine_names_the_accepted_ones(tmp_path):
    train, test = _leaky_tables(tmp_path)
    with pytest.raises(ValueError, match=r"^engine='spark'; accepted: auto, memory, duckdb, dask$"):
        check_splits(train, test, engine="spark")


@pytest.fixture
def cli(capsys):
    from torchtriage._cli import main

    def call(*args):
        code = main(list(args))
        out = capsys.readouterr()
        return code, out.out, out.err

    return call


@pytest.mark.parametrize("engine", ["memory", "duckdb", "dask"])
def test_cli_engine_finds_and_bad_input_is_one_line(tmp_path, engine, cli, dask_client):
    train, test = _leaky_tables(tmp_path)
    code, out, err = cli("splits", train, test, "--group", "user", "--engine", engine, "--no-near")
    assert code == 1, err
    assert "✗ [data] 3 group(s) occur in both train and test (key: user): 'u3', 'u7', 'u9'" in out

    def one_line(*args):
        code, out, err = cli("splits", *args, "--engine", engine)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
        return lines[0]

    assert one_line(train, test, "--group", "nope").startswith(
        "torchtriage: error: groups: column 'nope' is not in the train split; its columns: f0, f1")
    mixed = tmp_path / "mixed"
    mixed.mkdir()
    pd = pytest.importorskip("pandas")
    pd.DataFrame({"a": [1.0], "b": [2.0]}).to_parquet(mixed / "p0.parquet")
    pd.DataFrame({"a": [1.0], "c": [2.0]}).to_parquet(mixed / "p1.parquet")
    assert one_line(str(mixed), test) == (
        f"torchtriage: error: {mixed / 'p1.parquet'} has other columns than {mixed / 'p0.parquet'} "
        "(extra: c; missing: b); accepted: shards of one split with the same columns")
    broken = tmp_path / "broken"
    broken.mkdir()
    pd.DataFrame({"a": [1.0]}).to_parquet(broken / "p0.parquet")
    (broken / "p1.parquet").write_bytes(b"PAR1 this is not a parquet file")
    assert one_line(str(broken), test).startswith(f"torchtriage: error: cannot read {broken / 'p1.parquet'}: ")
    assert one_line(str(tmp_path / "empty-*.parquet"), test) == (
        f"torchtriage: error: {tmp_path / 'empty-*.parquet'}: no table files there; accepted: a folder or a glob "
        "pattern of .csv, .jsonl, .ndjson, .parquet, .pq, .tsv files")


def test_duckdb_out_of_memory_is_one_line(tmp_path, cli):
    """A query that does not fit DuckDB's cap gives one line and exit code 2, never a traceback."""
    train, test = _leaky_tables(tmp_path)
    code, out, err = cli("splits", train, test, "--group", "user", "--engine", "duckdb", "--memory-limit", "1MB")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("torchtriage: error: the duckdb engine failed: ")
    assert lines[0].endswith(
        "a larger --memory-limit (or memory_limit=) or more free disk for its spill folder may help")


# --- DuckDB's queries spill: answers under a cap far below their working set ----------------

def _digest_parts(n_train, n_test, chunk=1 << 17):
    """Parts as `_scan` makes them for 18 random numeric columns: exact copies (1 test row in
    1,000), near copies (x 1.001: the same SimHash, another digest), 3 of the copies with another
    label; returns ({split: [Part]}, {split: Scan}) with the same rows."""
    from torchtriage._leakage import _near
    from torchtriage._leakage._scan import Part, Scan

    rng = np.random.default_rng(17)
    x = {"train": rng.standard_normal((n_train, 18)), "test": rng.standard_normal((n_test, 18))}
    exact = {"train": rng.integers(0, 2**63, n_train, dtype=np.uint64),
             "test": rng.integers(0, 2**63, n_test, dtype=np.uint64)}
    labels = {s: rng.integers(0, 10, len(e)).astype(np.uint64) for s, e in exact.items()}
    j = np.arange(n_test)
    src = j * 7919 % n_train
    copy, near = j % 1000 == 0, j % 1000 == 1
    x["test"][copy | near] = x["train"][src[copy | near]] * np.where(near[copy | near], 1.001, 1.0)[:, None]
    exact["test"][copy] = exact["train"][src[copy]]
    labels["test"][copy] = labels["train"][src[copy]]
    labels["test"][np.nonzero(copy)[0][:3]] += 1
    parts, scans = {}, {}
    for s in ("train", "test"):
        z, valid = _near.per_sample_normalize(x[s])
        sig = _near.simhash(z)
        parts[s] = [Part(k, min(chunk, len(z) - k), exact[s][k:k + chunk], labels[s][k:k + chunk],
                         sig=sig[k:k + chunk], valid=valid[k:k + chunk]) for k in range(0, len(z), chunk)]
        scans[s] = Scan(None, len(z), exact[s], labels[s], near_kind="num", near_sig=sig, near_valid=valid)
    return parts, scans


def test_duckdb_queries_spill_under_a_small_cap():
    """500 k rows: the near-pair search under a 24 MB cap answers as in process, and so do the
    label conflicts and the exact copies.

    The search's first form (one query: a window over every band key, a DISTINCT over the
    joined pairs, the signatures joined in) ran out of DuckDB's memory here, as it did at 30 M
    rows under 2 GB; each step is now one join or one group-by of its own, which spill.
    """
    from torchtriage._leakage._duck import DuckStore
    from torchtriage._leakage._store import MemoryStore

    parts, scans = _digest_parts(400_000, 100_000)
    mem = MemoryStore()
    for s, scan in scans.items():
        mem.put(s, scan)
    duck = DuckStore(memory_limit="24MB", threads=2)
    try:
        for s in ("train", "test"):
            for p in parts[s]:
                duck.add(s, p)
        duck.finish()
        settings = dict(duck.con.execute("SELECT name, value FROM duckdb_settings() WHERE name IN "
                                         "('preserve_insertion_order', 'temp_directory')").fetchall())
        assert settings["preserve_insertion_order"] == "false" and settings["temp_directory"].startswith(duck._dir)
        near, want = duck.near("train", "test", 0.9), mem.near("train", "test", 0.9)
        assert near.rows == want.rows and near.rows >= 200  # 100 copies, 100 near copies, and look-alikes
        assert near.examples == want.examples
        # The band tables follow the threshold: rebuilt at the numbers' default (3 bands of 43 bits).
        strict, want = duck.near("train", "test", 0.98), mem.near("train", "test", 0.98)
        assert strict == want and strict.rows == 100  # the near copies only (exact copies are told apart)
        assert duck.con.execute("SELECT count(DISTINCT band) FROM b_train").fetchone()[0] == 3
        assert duck.con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name LIKE 'n\\_%' "
                                "ESCAPE '\\'").fetchone()[0] == 0  # the search's step tables are dropped
        # A group-by's own floor at 2 threads is above 24 MB: the other answers get 48 MB.
        duck.con.execute("SET memory_limit = '48MB'")
        conflicts = duck.conflicts(["train", "test"])
        assert conflicts == mem.conflicts(["train", "test"]) and conflicts.count == 3
        assert duck.exact("train", "test") == mem.exact("train", "test")
    finally:
        duck.close()
