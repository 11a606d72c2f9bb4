"""Issue 30, timeouts: a grading verdict that ran past the timeout depends on the machine's load, so the offline
builder retries it with a longer budget once the batch is done, never caches it as a verdict, and reports how many
stayed undecided. With an artificially short first timeout, a build gives the data set a quiet build gives.

The gradings are made slow on purpose (``trl_explore.testing.slow_gold_normalizer``: 0.5 s per gold a worker has not
read yet), so that a 0.05 s budget runs out on any machine; each test uses golds of its own, as a grading worker
remembers the golds it read."""

import json
import logging

import pytest

from trl_explore.data import build_cache as V
from trl_explore.data import builder as B
from trl_explore.data import filters
from trl_explore.data.gold_normalizers import GOLD_NORMALIZERS
from trl_explore.data.sources import ProblemRecord
from trl_explore.testing import slow_gold_normalizer

SHORT = 0.05  # seconds: a tenth of a slow grading, as on a machine loaded to the point of stalling


@pytest.fixture(autouse=True)
def slow_golds(monkeypatch):
    monkeypatch.setitem(GOLD_NORMALIZERS._entries, "slow", slow_gold_normalizer)
    monkeypatch.setitem(GOLD_NORMALIZERS._help, "slow", "test only")


def _records(a: int, b: int) -> list[ProblemRecord]:
    return [ProblemRecord("a", f"{a}?", str(a), [("T1", f"So \\boxed{{{a}}}."), ("T1", f"It is \\boxed{{{a + 1}}}."),
                                               ("T2", f"The answer is {a}^(1).")]),
            ProblemRecord("b", f"{b}?", str(b), [("T1", f"\\boxed{{{b}}}"), ("T2", f"The answer is {b} or {b + 1}.")])]


def _build(tokenizer, folder, records, **settings):
    dataset, report = B.build_offline_dataset(records, tokenizer=tokenizer, test_fraction=0.0, show_progress=False,
                                              build_cache=folder, gold_normalizer="slow", **settings)
    return dataset["train"].to_dict(), report


def _entries(folder):
    (path,) = folder.glob("verdicts-*.json")
    return json.loads(path.read_text())["entries"]


def test_a_loaded_machine_builds_the_same_data_set(smollm2_tokenizer, tmp_path, caplog):
    records = _records(11, 12)
    with caplog.at_level(logging.INFO, logger="trl_explore.data.filters"):
        loaded, loaded_report = _build(smollm2_tokenizer, tmp_path / "loaded", records, grading_timeout=SHORT)
    retried = [r.getMessage() for r in caplog.records if "graded again" in r.getMessage()]
    assert "2 gold answers ran past 0.05 s: graded again with 60 s" in retried  # the first budget did run out
    quiet, quiet_report = _build(smollm2_tokenizer, tmp_path / "quiet", records)
    assert loaded == quiet  # was: the timed-out golds' problems left out, and "not parseable" cached for them
    assert quiet["offline_completions"] == [["So \\boxed{11}.", "The answer is 11^(1)."], ["\\boxed{12}"]]
    assert loaded_report.undecided == quiet_report.undecided == 0 and loaded_report.undecided_gold == []
    assert sorted(_entries(tmp_path / "loaded").values()) == sorted(_entries(tmp_path / "quiet").values())


def test_verdicts_that_stay_undecided_are_counted_and_not_cached(smollm2_tokenizer, tmp_path, caplog):
    records = _records(21, 22)
    with caplog.at_level(logging.WARNING, logger="trl_explore.data.filters"):
        _, report = _build(smollm2_tokenizer, tmp_path, records, grading_timeout=SHORT, retry_timeout=SHORT)
    assert report.undecided_gold == ["a", "b"]  # no gold could be read in time: nothing judged, nothing cached
    assert "2 gold answers" in report.markdown() and report.to_dict()["undecided_gold"] == ["a", "b"]
    assert report.train_problems == 0 and report.unparseable_gold == []
    assert not list(tmp_path.glob("verdicts-*.json")) or _entries(tmp_path) == {}
    assert any("2 gold answers" in r.getMessage() and "not cached" in r.getMessage() for r in caplog.records)
    quiet, _ = _build(smollm2_tokenizer, tmp_path, records)  # the same cache folder: nothing stale was kept
    assert quiet["offline_completions"] == [["So \\boxed{21}.", "The answer is 21^(1)."], ["\\boxed{22}"]]


def test_teacher_verdicts_retried_then_undecided(tmp_path, caplog):
    cache = V.VerdictCache(tmp_path, "math_verify", "slow")
    pairs = [("So \\boxed{31}.", "31"), ("It is \\boxed{5}.", "32")]
    with caplog.at_level(logging.INFO, logger="trl_explore.data.filters"):
        verdicts = filters.judge_completions(pairs, show_progress=False, cache=cache, gold_normalizer="slow",
                                             timeout_seconds=SHORT)
    assert verdicts == [True, False]
    assert any("2 teacher solutions ran past" in r.getMessage() for r in caplog.records)
    assert sorted(_entries(tmp_path).values()) == [0, 1]  # the retried verdicts; no "timeout"
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="trl_explore.data.filters"):
        undecided = filters.judge_completions([("\\boxed{33}", "33")], show_progress=False, cache=cache,
                                              gold_normalizer="slow", timeout_seconds=SHORT,
                                              retry_timeout_seconds=SHORT)
    assert undecided == [None]
    assert sorted(_entries(tmp_path).values()) == [0, 1]  # nothing cached for it
    assert any("1 teacher solution" in r.getMessage() and "not cached" in r.getMessage() for r in caplog.records)


def test_a_cached_timeout_of_an_older_build_is_graded_again(tmp_path):
    cache = V.VerdictCache(tmp_path, "math_verify")
    pairs = [("a", "1"), ("b", "1"), ("c", "1")]
    cache.add(pairs, [True, False, None])
    cache._file.put(V.text_key("c", "1"), V.TIMEOUT)  # what earlier versions wrote
    cache.save()
    assert V.VerdictCache(tmp_path, "math_verify").lookup(pairs) == [True, False, None]  # was [True, False, False]
    cache.add([("d", "1")], [V.TIMEOUT])
    assert V.text_key("d", "1") not in cache._file.entries
