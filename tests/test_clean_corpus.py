"""Quiet on real code (issue 13): correct training loops taken from public projects
(`tests/corpus/`, one file per loop, each naming its source and commit) run under every default
check, both as `watch(models, optimizers)` would see them and as the discovering session of
`torchtriage run` sees them, and produce no warning, no error and no TriageInternalWarning."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path

import pytest
import torch

import corpus
import torchtriage
from conftest import run_cli
from torchtriage import Severity, TriageInternalWarning
from torchtriage._session import Session


def _build(name):
    mod = corpus.load(name)
    for need in getattr(mod, "NEEDS", ()):
        pytest.importorskip(need)
    return mod


def _loud(report):
    return [(f.severity.value, f.code, f.module, f.message) for f in report if f.severity is not Severity.INFO]


def _run(name, mode):
    mod = _build(name)
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # record every warning; the library's own are not ours to judge
        if mode == "watch":
            models, optimizers, train = mod.build()
            with torchtriage.watch(models, optimizers, on_anomaly="record", report=False) as s:
                train()
        else:  # as `torchtriage run` does: models and optimizers are found as the script builds them
            with Session(discover=True, on_anomaly="record", report=False) as s:
                mod.build()[2]()
    internal = [str(w.message) for w in caught if issubclass(w.category, TriageInternalWarning)]
    return s, internal


@pytest.mark.parametrize("mode", ["watch", "discover"])
@pytest.mark.parametrize("name", corpus.LOOPS)
def test_corpus_loop_is_quiet(name, mode):
    s, internal = _run(name, mode)
    assert s.steps_seen >= 2, "the loop did not run its steps"
    assert not internal, internal
    assert not _loud(s.report), str(s.report)


SOURCE = re.compile(r"Source: ([\w.-]+/[\w.-]+), (\S+?\.py)\b.*?commit ([0-9a-f]{40})", re.S)


def test_corpus_size_and_headers():
    """At least 60 loops from 60 distinct source files, each header naming its source repository,
    the path of the file the loop comes from and a full commit id. (nanoGPT's train.py gives two
    loops: pretraining, and fine-tuning from a checkpoint followed by sample.py's sampling.)"""
    sources = []
    for name in corpus.LOOPS:
        doc = corpus.load(name).__doc__ or ""
        found = SOURCE.search(doc)
        assert found, f"{name}: header must name source repository, path and commit"
        sources.append(found.group(1, 2))
        assert hasattr(corpus.load(name), "build"), name
    assert len(set(sources)) >= 60, sorted(sources)


CLI_SCRIPT = """\
import sys
sys.path.insert(0, {tests!r})
from corpus import {name}
{name}.build()[2]()
print("trained")
"""


@pytest.mark.parametrize("name", ["tutorial_dcgan_faces", "hf_mlm_no_trainer", "hf_clm_reentrant_checkpointing"])
def test_corpus_loop_through_the_cli_is_quiet(tmp_path, name):
    _build(name)
    script = tmp_path / "train.py"
    script.write_text(CLI_SCRIPT.format(tests=str(Path(__file__).parent), name=name), encoding="utf-8")
    out = tmp_path / "report.json"
    p = run_cli("run", "--json", str(out), str(script), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert "trained" in p.stdout
    loud = [f for f in json.loads(out.read_text(encoding="utf-8"))["findings"] if f["severity"] != "info"]
    assert loud == [], loud
