"""check_splits / check_preprocessing: each check on small real splits, and clean splits."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset

from torchtriage import Category, Severity, Stage, check_preprocessing, check_splits
from zoo import leakage as zoo

pd = pytest.importorskip("pandas")


def codes(report):
    return [f.code for f in report.findings]


def only(report, code):
    found = report.filter(code=code)
    assert len(found) == 1, codes(report)
    f = found[0]
    assert f.category is Category.DATA and f.stage is Stage.DATA
    return f


# --- group overlap ------------------------------------------------------------------------

def test_seed_writer_overlap_reports_writer_a():
    r = check_splits(["img1.png", "img2.png"], ["img3.png", "img4.png"],
                     groups=(zoo.WRITERS_TRAIN, zoo.WRITERS_TEST))
    f = only(r, "data.group_overlap")
    assert f.evidence["groups"] == ["writer-a"]
    assert f.severity is Severity.ERROR
    assert f.message == "1 group(s) occur in both train and test (key: groups): 'writer-a'"
    assert f.evidence["rows_in_train"] == 1 and f.evidence["groups_in_test"] == 2
    assert f.file == __file__  # the user's line: this call
    assert r.primary is f and codes(r) == ["data.group_overlap"]


def test_group_overlap_per_pair_with_val_from_dataframe_column():
    train = pd.DataFrame({"patient": ["p1", "p1", "p2", "p3"], "x": [1.0, 2.0, 3.0, 4.0]})
    val = pd.DataFrame({"patient": ["p4", "p3"], "x": [5.0, 6.0]})
    test = pd.DataFrame({"patient": ["p1", "p5", "p4"], "x": [7.0, 8.0, 9.0]})
    r = check_splits(train, test, val=val, groups="patient")
    found = {f.evidence["pair"]: f for f in r.filter(code="data.group_overlap")}
    assert set(found) == {"train/test", "train/val", "val/test"}
    assert found["train/test"].evidence["groups"] == ["p1"]
    assert found["train/test"].evidence["rows_in_train"] == 2
    assert found["train/val"].evidence["groups"] == ["p3"]
    assert found["val/test"].evidence["groups"] == ["p4"]
    assert found["train/test"].message == "1 group(s) occur in both train and test (key: patient): 'p1'"


def test_group_key_as_callable_on_dict_samples():
    train = [{"text": "alpha beta", "doc": "d1"}, {"text": "gamma", "doc": "d2"}]
    test = [{"text": "delta", "doc": "d2"}]
    r = check_splits(train, test, groups=lambda s: s["doc"])
    assert only(r, "data.group_overlap").evidence["groups"] == ["d2"]
    assert check_splits(train, test, groups="doc").filter(code="data.group_overlap")[0].evidence["groups"] == ["d2"]
    # a dict sample without an input key: its group key is not part of the compared content
    r = check_splits([{"a": 1.0, "doc": "d1"}], [{"a": 1.0, "doc": "d2"}], groups="doc")
    assert codes(r) == ["data.exact_duplicate"]


# --- subsets of one dataset ---------------------------------------------------------------

def test_subsets_from_two_random_splits_share_indices():
    train, test = zoo.subsets_from_two_random_splits()
    r = check_splits(train, test)
    f = only(r, "data.subset_index_overlap")
    shared = sorted(set(train.indices) & set(test.indices))
    assert f.evidence["shared_indices"] == len(shared) > 0
    assert f.evidence["examples"] == shared[:5]
    assert f.message == (f"train and test share {len(shared)} index(es) into the same TensorDataset: "
                         "those samples are in both splits")
    # one cause, said once: the shared indices are not reported again as content duplicates
    assert codes(r) == ["data.subset_index_overlap"]


def test_shared_indices_and_a_real_content_copy_are_told_apart():
    x = torch.arange(40, dtype=torch.float32).reshape(20, 2)
    x[15] = x[2]  # a content copy at another index
    ds = TensorDataset(x, torch.zeros(20))
    r = check_splits(torch.utils.data.Subset(ds, range(12)), torch.utils.data.Subset(ds, range(10, 20)))
    assert only(r, "data.subset_index_overlap").evidence["examples"] == [10, 11]
    f = only(r, "data.exact_duplicate")
    assert ((f.evidence["duplicated_rows"], f.evidence["examples"][0]["train"], f.evidence["examples"][0]["test"])
            == (1, 2, 5))


def test_clean_random_split_has_zero_findings():
    train, test = zoo.clean_random_split()
    r = check_splits(train, test)
    assert r.findings == () and r.ok


def test_dataloaders_with_overlapping_samplers():
    ds = TensorDataset(torch.randn(20, 8), torch.zeros(20))
    a = DataLoader(ds, sampler=SubsetRandomSampler(list(range(12))))
    b = DataLoader(ds, sampler=SubsetRandomSampler(list(range(10, 20))))
    f = only(check_splits(a, b), "data.subset_index_overlap")
    assert f.evidence["shared_indices"] == 2 and f.evidence["examples"] == [10, 11]
    clean = DataLoader(ds, sampler=SubsetRandomSampler(list(range(12, 20))))
    assert "data.subset_index_overlap" not in codes(check_splits(a, clean))


# --- exact duplicates ---------------------------------------------------------------------

def test_exact_duplicates_match_across_dtypes():
    train = np.arange(40, dtype=np.int64).reshape(10, 4)
    test = torch.tensor([[4.0, 5.0, 6.0, 7.0], [100.0, 1.0, 2.0, 3.0]], dtype=torch.float32)
    f = only(check_splits(train, test), "data.exact_duplicate")
    assert f.evidence["duplicated_rows"] == 1
    assert f.evidence["examples"][0]["train"] == 1 and f.evidence["examples"][0]["test"] == 0
    assert f.message == "1 of 2 test rows (50.0%) have an exact copy in train (compared by content, not by name)"


def test_exact_duplicates_of_tensors_strings_and_bytes_in_lists():
    t = torch.tensor([1.0, 2.0, 3.0])
    r = check_splits([(t, 0), ("hello", 1), (b"\x00raw", 0)],
                     [(t.double().numpy(), 0), ("hello!", 1), (b"\x00raw", 0)])
    f = only(r, "data.exact_duplicate")
    assert f.evidence["duplicated_rows"] == 2
    assert [e["test"] for e in f.evidence["examples"]] == [0, 2]


def test_files_are_compared_by_bytes_not_names(tmp_path):
    (tmp_path / "a.png").write_bytes(b"same pixels")
    (tmp_path / "renamed_copy.png").write_bytes(b"same pixels")
    (tmp_path / "other.png").write_bytes(b"other pixels")
    train = [pathlib.Path(tmp_path / "a.png")]
    f = only(check_splits(train, [pathlib.Path(tmp_path / "renamed_copy.png")]), "data.exact_duplicate")
    assert f.evidence["duplicated_rows"] == 1
    assert check_splits(train, [pathlib.Path(tmp_path / "other.png")]).findings == ()
    # a table column of paths, with files=
    tr = pd.DataFrame({"path": [str(tmp_path / "a.png")], "y": [0]})
    te = pd.DataFrame({"path": [str(tmp_path / "renamed_copy.png")], "y": [0]})
    assert only(check_splits(tr, te, files="path"), "data.exact_duplicate").evidence["duplicated_rows"] == 1
    assert check_splits(tr, te).findings == ()  # by name they differ


def test_duplicates_inside_test():
    test = np.array([[1.0, 2.0], [3.0, 4.0], [1.0, 2.0], [1.0, 2.0], [5.0, 6.0]])
    f = only(check_splits(np.zeros((3, 2)) + 9, test), "data.test_duplicate")
    assert f.evidence["repeated_rows"] == 2 and f.evidence["examples"] == [[0, 2, 3]]
    assert f.message == "2 row(s) of test repeat an earlier row of test (1 input(s) occur more than once)"


def test_conflicting_labels_from_tensor_dataset():
    x = torch.randn(6, 4)
    train = TensorDataset(x[:4], torch.tensor([0, 1, 0, 1]))
    test = TensorDataset(torch.stack([x[1], x[5]]), torch.tensor([0, 1]))
    r = check_splits(train, test)
    f = only(r, "data.conflicting_labels")
    assert f.evidence["examples"] == [[{"row": "train[1]", "label": "1"}, {"row": "test[0]", "label": "0"}]]
    assert f.message == "1 input(s) appear with different labels"
    same = TensorDataset(torch.stack([x[1], x[5]]), torch.tensor([1, 1]))
    assert "data.conflicting_labels" not in codes(check_splits(train, same))


# --- near duplicates ----------------------------------------------------------------------

TEXTS = [
    "The quick brown fox jumps over the lazy dog near the river bank at sunset.",
    "Gradient descent minimizes a loss by stepping against the gradient direction.",
    "A patient was admitted with a fever and discharged after three days of care.",
    "Stock prices fell sharply after the central bank raised interest rates again.",
]


def test_near_duplicate_text():
    test = ["the quick brown fox jumps over the lazy dog near the river bank at sunset!",
            "An entirely different sentence about cooking pasta with fresh tomatoes."]
    r = check_splits(TEXTS, test, near_threshold=0.8)
    f = only(r, "data.near_duplicate")
    assert f.evidence["rows_with_near_duplicate"] == 1
    ex = f.evidence["examples"][0]
    assert ex["train"] == 0 and ex["test"] == 0 and ex["similarity"] >= 0.8
    assert ex["test_input"].startswith("the quick brown fox")
    assert "exact_duplicate" not in " ".join(codes(r))
    assert check_splits(TEXTS, test[1:]).findings == ()


def test_near_duplicate_images_brightened_copies():
    base = zoo.smooth_images(12, seed=0)
    train = zoo.ImagesWithBrightenedCopies(base)
    test = zoo.ImagesWithBrightenedCopies(base[:3], copies=True)
    f = only(check_splits(train, test), "data.near_duplicate")
    assert f.evidence["rows_with_near_duplicate"] == 3
    assert sorted((e["train"], e["test"]) for e in f.evidence["examples"]) == [(0, 0), (1, 1), (2, 2)]
    other = zoo.ImagesWithBrightenedCopies(zoo.smooth_images(6, seed=1), copies=True)
    assert check_splits(train, other).findings == ()


def test_near_duplicate_table_rows():
    rng = np.random.default_rng(0)
    train = rng.standard_normal((200, 12))
    test = rng.standard_normal((50, 12))
    test[:4] = train[:4] + 1e-3 * rng.standard_normal((4, 12))
    f = only(check_splits(train, test), "data.near_duplicate")
    assert f.evidence["rows_with_near_duplicate"] == 4
    assert check_splits(train, test[4:]).findings == ()


def test_near_duplicate_numbers_flag_copies_not_neighbours():
    """Numbers default to SimHash 0.98 (at most 2 of 128 bits differ, about 3 degrees): a test
    row 8 degrees from a train row is a neighbour, not a copy (SimHash 0.9 is an 18-degree
    cone, which millions of low-dimensional rows fill by chance); near_threshold=0.9 still
    reports it. The copy moved by up to 2% per value is reported either way."""
    rng = np.random.default_rng(3)
    train = rng.standard_normal((300, 12))
    test = rng.standard_normal((40, 12))
    u = train[7] / np.linalg.norm(train[7])
    w = rng.standard_normal(12)
    w -= (w @ u) * u
    w /= np.linalg.norm(w)
    test[5] = np.linalg.norm(train[7]) * (np.cos(np.radians(8)) * u + np.sin(np.radians(8)) * w)
    test[9] = (train[11] * (1 + 0.02 * rng.uniform(-1, 1, 12))).round(4)  # a re-measured copy
    f = only(check_splits(train, test), "data.near_duplicate")
    assert f.evidence["threshold"] == 0.98 and f.evidence["rows_with_near_duplicate"] == 1
    assert [(e["train"], e["test"]) for e in f.evidence["examples"]] == [(11, 9)]
    loose = only(check_splits(train, test, near_threshold=0.9), "data.near_duplicate")
    assert loose.evidence["rows_with_near_duplicate"] == 2
    pairs = {(e["train"], e["test"]): e["similarity"] for e in loose.evidence["examples"]}
    assert set(pairs) == {(7, 5), (11, 9)} and 0.9 <= pairs[(7, 5)] < 0.98


# --- preprocessing fitted before the split -------------------------------------------------

def test_scaler_fitted_on_all_data():
    rng = np.random.default_rng(0)
    train, test = rng.normal(0, 1, (80, 3)), rng.normal(0.5, 2, (20, 3))
    leaky = zoo.ScalerFittedOnAllData().fit(np.concatenate([train, test]))
    r = check_preprocessing(leaky, train, test)
    f = only(r, "data.preprocessing_fit_on_all")
    assert f.message == ("ScalerFittedOnAllData's mean equals the statistic of all splits together, "
                         "not of train alone: it was fitted before the split")
    assert f.evidence["statistic"] == "mean" and f.op == "ScalerFittedOnAllData"
    honest = zoo.ScalerFittedOnAllData().fit(train)
    assert check_preprocessing(honest, train, test).findings == ()
    # via check_splits(preprocessors=...) on DataFrames, columns by order
    cols = ["a", "b", "c"]
    r2 = check_splits(pd.DataFrame(train, columns=cols), pd.DataFrame(test, columns=cols), preprocessors=[leaky])
    assert "data.preprocessing_fit_on_all" in codes(r2)


@pytest.mark.parametrize("name, stat", [("StandardScaler", "mean"), ("MinMaxScaler", "min"),
                                        ("MaxAbsScaler", "maxabs")])
def test_real_scikit_learn_scalers_fitted_on_all_data(name, stat):
    preprocessing = pytest.importorskip("sklearn.preprocessing")
    rng = np.random.default_rng(0)
    train, test = rng.normal(0, 1, (80, 3)), rng.normal(0.5, 2, (20, 3))
    scaler = getattr(preprocessing, name)
    f = only(check_preprocessing(scaler().fit(np.concatenate([train, test])), train, test),
             "data.preprocessing_fit_on_all")
    assert (f.op, f.evidence["statistic"], f.evidence["layout"], f.severity) == (name, stat, "columns", Severity.ERROR)
    assert f.message == (f"{name}'s {stat} equals the statistic of all splits together, "
                         "not of train alone: it was fitted before the split")
    assert check_preprocessing(scaler().fit(train), train, test).findings == ()


def test_real_scikit_learn_vectorizer_and_unsupported_robust_scaler():
    text = pytest.importorskip("sklearn.feature_extraction.text")
    preprocessing = pytest.importorskip("sklearn.preprocessing")
    leaky = text.CountVectorizer().fit(zoo.TEXT_TRAIN + zoo.TEXT_TEST)
    f = only(check_preprocessing(leaky, zoo.TEXT_TRAIN, zoo.TEXT_TEST), "data.vocabulary_from_test")
    assert (f.op, f.evidence["pair"]) == ("CountVectorizer", "train/test")
    assert f.evidence["tokens"] == ["an", "fish", "hoots", "in", "midnight", "owl", "pond", "swims"]
    assert check_preprocessing(text.CountVectorizer().fit(zoo.TEXT_TRAIN), zoo.TEXT_TRAIN, zoo.TEXT_TEST).findings == ()
    x = np.random.default_rng(0).normal(size=(20, 2))
    with pytest.raises(TypeError, match=re.escape("preprocessor RobustScaler: not recognized; accepted: ")):
        check_preprocessing(preprocessing.RobustScaler().fit(x), x, x)


def test_normalize_constants_from_all_pixels():
    g = torch.Generator().manual_seed(0)
    train = torch.randint(0, 200, (30, 3, 8, 8), generator=g, dtype=torch.uint8)
    test = torch.randint(50, 256, (10, 3, 8, 8), generator=g, dtype=torch.uint8)
    leaky = zoo.normalize_from_all_pixels(train, test)
    f = only(check_preprocessing(leaky, train, test), "data.preprocessing_fit_on_all")
    assert f.evidence["layout"] == "channels_first"
    honest = zoo.normalize_from_all_pixels(train, train[:0])
    assert check_preprocessing(honest, train, test).findings == ()
    imagenet = zoo.Normalize((0.485, 0.456, 0.406), (0.229, 0.224, 0.225))
    assert check_preprocessing(imagenet, train, test).findings == ()
    mean, std = leaky.mean, leaky.std
    assert check_preprocessing((mean, std), train, test).primary.code == "data.preprocessing_fit_on_all"


def test_vocabulary_holding_test_only_tokens():
    r = check_preprocessing(zoo.vocabulary_built_on_all_text(), zoo.TEXT_TRAIN, zoo.TEXT_TEST)
    f = only(r, "data.vocabulary_from_test")
    assert f.evidence["tokens"] == ["an", "fish", "hoots", "in", "midnight", "owl", "pond", "swims"]
    assert f.message == ("the vocabulary holds 8 token(s) that occur in test but never in train: "
                         "it was built before the split")
    assert check_preprocessing(zoo.vocabulary_built_on_train(), zoo.TEXT_TRAIN, zoo.TEXT_TEST).findings == ()


# --- time ---------------------------------------------------------------------------------

def test_time_leakage_with_dates_and_clean_order():
    train = pd.DataFrame({"day": pd.to_datetime(["2024-01-01", "2024-03-01"]), "x": [1.0, 2.0]})
    test = pd.DataFrame({"day": pd.to_datetime(["2024-02-01", "2024-04-01"]), "x": [3.0, 4.0]})
    f = only(check_splits(train, test, time="day"), "data.time_overlap")
    assert f.evidence["train_end"] == "2024-03-01T00:00:00Z"
    assert f.evidence["examples"] == [{"row": 0, "time": "2024-02-01T00:00:00Z"}]
    assert f.message == "1 of 2 test rows (50.0%) are earlier than the end of train"
    later = pd.DataFrame({"day": pd.to_datetime(["2024-03-02", "2024-04-01"]), "x": [3.0, 4.0]})
    assert check_splits(train, later, time="day").findings == ()
    seqs = check_splits([1, 2], [3, 4], time=([10, 30], [20, 40]))
    assert only(seqs, "data.time_overlap").evidence["earlier_rows"] == 1


# --- files and formats --------------------------------------------------------------------

def _write_tables(tmp_path):
    tr = tmp_path / "train.csv"
    tr.write_text("writer,x1,x2,label\nwriter-a,1,2,0\nwriter-b,3,4,1\n")
    te = tmp_path / "test.jsonl"
    te.write_text('{"writer": "writer-a", "x1": 1, "x2": 2.0, "label": 1}\n'
                  '{"writer": "writer-c", "x1": 5, "x2": 6, "label": 0}\n')
    pq = tmp_path / "test.parquet"
    pd.read_json(te, lines=True).to_parquet(pq)
    return tr, te, pq


def test_csv_jsonl_parquet_files(tmp_path):
    pytest.importorskip("pyarrow")
    tr, te, pq = _write_tables(tmp_path)
    for test in (te, pq, str(te)):
        r = check_splits(tr, test, groups="writer", labels="label")
        assert codes(r) == ["data.group_overlap", "data.exact_duplicate", "data.conflicting_labels"], test
        assert only(r, "data.group_overlap").evidence["groups"] == ["writer-a"]
    from torchtriage.report import render_json

    d = json.loads(render_json(r))
    assert {f["category"] for f in d["findings"]} == {"data"}
    assert {f["stage"] for f in d["findings"]} == {"data"}


# --- bad input ----------------------------------------------------------------------------

def test_splits_of_different_kinds():
    with pytest.raises(TypeError, match=re.escape("the splits are of different kinds: train is DataFrame 2×1 "
                                                  "(a table); test is list of 2 items (samples); accepted:")):
        check_splits(pd.DataFrame({"x": [1, 2]}), [1, 2])


def test_bad_inputs_name_what_was_given(tmp_path):
    with pytest.raises(TypeError, match=re.escape("train split: got builtins.set; accepted: torch Dataset")):
        check_splits({1, 2}, [1])
    with pytest.raises(ValueError, match=re.escape("groups: column 'writer' is not in the train split; "
                                                   "its columns: x")):
        check_splits(pd.DataFrame({"x": [1]}), pd.DataFrame({"x": [2]}), groups="writer")
    bad = tmp_path / "train.xlsx"
    bad.write_text("x")
    with pytest.raises(ValueError, match=re.escape(f"{bad}: unsupported file format .xlsx; accepted: .csv, .jsonl")):
        check_splits(bad, bad)
    with pytest.raises(ValueError, match=re.escape(f"cannot read {tmp_path / 'nope.csv'}: no such file")):
        check_splits(tmp_path / "nope.csv", tmp_path / "nope.csv")
    with pytest.raises(ValueError, match=re.escape("groups: 1 values given for the test split, which has 2 rows")):
        check_splits([1, 2], [3, 4], groups=(["a", "b"], ["c"]))
    with pytest.raises(TypeError, match=re.escape("groups: got builtins.int; accepted: a column name")):
        check_splits([1], [2], groups=3)
    with pytest.raises(ValueError, match=re.escape("near_threshold=1.5; accepted: a number in (0, 1]")):
        check_splits([1], [2], near_threshold=1.5)
    with pytest.raises(TypeError, match=re.escape("preprocessor object: not recognized; accepted:")):
        check_splits([1], [2], preprocessors=[object()])
    with pytest.raises(ValueError, match=re.escape("time key of the train split: cannot read 'soon' as a time")):
        check_splits([1], [2], time=(["soon"], ["2024-01-01"]))
    with pytest.raises(ValueError, match=re.escape("the test split lacks column(s) b that train has")):
        check_splits(pd.DataFrame({"a": [1], "b": [2]}), pd.DataFrame({"a": [1]}))


def test_progress_lines_on_stderr(capsys):
    check_splits(np.zeros((5, 2)), np.ones((5, 2)), chunk_size=2, progress=True)
    err = capsys.readouterr().err
    assert "torchtriage: hashing train: 2/5 rows" in err and "hashing test: 5/5 rows" in err


def test_import_leaves_pandas_and_pyarrow_out():
    code = "import sys, torchtriage; print([m for m in ('pandas', 'pyarrow') if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
