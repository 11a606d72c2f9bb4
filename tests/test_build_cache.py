"""What offline builds share, cached: teacher verdicts per (solution, gold, grader mode, grader version), gold
readability, token lengths per (text, tokenizer): trl_explore.data.build_cache."""

import json
import logging
import subprocess
import sys
import textwrap

import pytest

from trl_explore.data import build_cache as V
from trl_explore.data import builder as B
from trl_explore.data import filters
from trl_explore.data.sources import ProblemRecord

RECORDS = [
    ProblemRecord("a", "2+2?", "4", [("T1", "So \\boxed{4}."), ("T1", "It is \\boxed{5}."),
                                     ("T2", "The answer is 4, " * 20)]),
    ProblemRecord("b", "3+4?", "7", [("T1", "\\boxed{7}"), ("T2", "The answer is 7 or 8.")]),
]


def _build(tokenizer, folder, **settings):
    return B.build_offline_dataset(RECORDS, tokenizer=tokenizer, test_fraction=0.0, show_progress=False,
                                   build_cache=folder, **settings)  # fmt: skip


def test_a_second_build_with_other_settings_grades_nothing(smollm2_tokenizer, tmp_path, monkeypatch):
    first, report = _build(smollm2_tokenizer, tmp_path, max_length=8192)
    (path,) = tmp_path.glob("verdicts-math_verify-*.json")
    assert len(json.loads(path.read_text())["entries"]) == 5 + 2  # the verdicts and the two golds
    (lengths,) = tmp_path.glob("lengths-*.json")
    assert len(json.loads(lengths.read_text())["entries"]) == 5
    assert first["train"]["offline_completions"][1] == ["\\boxed{7}"]  # the hedge "7 or 8" is not valid

    def no_grading(*args, **kwargs):
        raise AssertionError("computed again instead of reading the cache")

    monkeypatch.setattr("trl_explore.rewards.math_verify_reward.grade_batch", no_grading)
    monkeypatch.setattr("trl_explore.rewards.math_verify_reward.golds_parseable", no_grading)
    monkeypatch.setattr(type(smollm2_tokenizer), "__call__", no_grading)
    second, report = _build(smollm2_tokenizer, tmp_path, max_length=12, system_prompt="none")
    assert second["train"]["offline_completions"] == [["So \\boxed{4}."], ["\\boxed{7}"]]  # the long one is cut
    assert [t.judged for t in report.teachers] == [3, 2]


def test_the_grader_mode_and_version_are_part_of_the_key(tmp_path, monkeypatch):
    pair = [("\\boxed{4}", "4")]
    cache = V.VerdictCache(tmp_path, "math_verify")
    cache.add(pair, [True])
    cache.save()
    assert V.VerdictCache(tmp_path, "math_verify").lookup(pair) == [True]
    assert V.VerdictCache(tmp_path, "strict").lookup(pair) == [None]
    monkeypatch.setattr(V, "grader_version", lambda: "another-version")
    assert V.VerdictCache(tmp_path, "math_verify").lookup(pair) == [None]
    with pytest.raises(ValueError, match="grader_mode='lenient' is not a grader mode"):
        V.VerdictCache(tmp_path, "lenient")
    with pytest.raises(ValueError, match="holds grader_mode='strict' verdicts, not 'math_verify'"):
        filters.judge_completions(pair, cache=V.VerdictCache(tmp_path, "strict"), show_progress=False)


def test_grader_version_follows_the_grader_code(monkeypatch):
    version = V.grader_version()
    assert len(version) == 16 and version == V.grader_version()
    V.grader_version.cache_clear()
    monkeypatch.setattr(V, "GRADER_VERSION", "999")
    try:
        assert V.grader_version() != version
    finally:
        V.grader_version.cache_clear()


def test_only_verdicts_are_cached_not_timeouts_nor_errors(tmp_path):
    # issue 30: a timeout depends on the machine's load; tests/test_build_timeouts.py retries it
    cache = V.VerdictCache(tmp_path, "math_verify")
    pairs = [("a", "1"), ("b", "1"), ("c", "1"), ("d", "1"), ("e", "1")]
    cache.add(pairs, [True, False, V.TIMEOUT, None, "error"])
    cache.save()
    assert V.VerdictCache(tmp_path, "math_verify").lookup(pairs) == [True, False, None, None, None]
    assert sorted(json.loads(cache.path.read_text())["entries"].values()) == [0, 1]


def test_judge_completions_grades_only_what_is_missing(tmp_path, monkeypatch):
    cache = V.VerdictCache(tmp_path, "math_verify")
    cache.add([("\\boxed{4}", "4")], [True])
    seen = []
    import trl_explore.rewards.math_verify_reward as reward  # judge_completions imports grade_batch when called

    original = reward.grade_batch

    def counting(completions, golds, **kwargs):
        seen.extend(completions)
        return original(completions, golds, **kwargs)

    monkeypatch.setattr(reward, "grade_batch", counting)
    verdicts = filters.judge_completions([("\\boxed{4}", "4"), ("\\boxed{5}", "4")], cache=cache, show_progress=False)
    assert verdicts == [True, False] and seen == ["\\boxed{5}"]
    assert V.VerdictCache(tmp_path, "math_verify").lookup([("\\boxed{5}", "4")]) == [False]  # saved


@pytest.mark.parametrize("content", ["{not json", json.dumps({"format": 1, "entries": []}), "\x00\x01",
                                     json.dumps({"format": 1, "grader_mode": "math_verify", "entries": {"k": 7}})])
def test_a_corrupt_file_is_ignored_with_one_warning_and_rewritten(tmp_path, content, caplog):
    path = V.VerdictCache(tmp_path, "math_verify").path
    path.write_text(content)
    with caplog.at_level(logging.WARNING, logger="trl_explore.data.verdict_cache"):
        cache = V.VerdictCache(tmp_path, "math_verify")
    (record,) = caplog.records
    assert "Ignoring the corrupt build cache file" in record.getMessage() and "\n" not in record.getMessage()
    assert cache.lookup([("x", "1")]) == [None]
    cache.add([("x", "1")], [True])
    cache.save()
    assert V.VerdictCache(tmp_path, "math_verify").lookup([("x", "1")]) == [True]


_WRITER = textwrap.dedent("""
    import sys
    from trl_explore.data.build_cache import VerdictCache
    folder, name = sys.argv[1], sys.argv[2]
    for round in range(25):
        cache = VerdictCache(folder, "math_verify")
        cache.add([(f"{name}-{round}-{i}", "1") for i in range(20)], [i % 2 == 0 for i in range(20)])
        cache.save()
""")


def test_concurrent_writers_keep_every_verdict(tmp_path):
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, str(tmp_path), name]) for name in ("p", "q", "r")]
    assert [w.wait(timeout=120) for w in writers] == [0, 0, 0]
    cache = V.VerdictCache(tmp_path, "math_verify")
    assert len(cache) == 3 * 25 * 20
    assert cache.lookup([("q-24-18", "1"), ("r-0-1", "1")]) == [True, False]
    assert [p.name for p in tmp_path.iterdir() if p.suffix == ".tmp"] == []  # no temporary file left


def test_the_progress_bar_says_what_it_does(smollm2_tokenizer, tmp_path, monkeypatch):
    descriptions = []
    original = filters.tqdm

    def recording(*args, **kwargs):
        descriptions.append(kwargs.get("desc"))
        return original(*args, **kwargs)

    monkeypatch.setattr(filters, "tqdm", recording)
    _build(smollm2_tokenizer, tmp_path)
    assert descriptions == ["Verifying teacher answers (cached after the first build)"]


def test_golds_parseable_in_one_call():
    assert filters.golds_parseable(["4", "See the proof.", "2^(n-1)"], num_proc=2) == [True, False, True]


def test_token_lengths_are_cached_per_tokenizer(smollm2_tokenizer, tmp_path):
    cache = V.TokenLengthCache(tmp_path, smollm2_tokenizer)
    texts = ["one two three", "four", "one two three"]
    expected = filters.token_lengths(texts, smollm2_tokenizer)
    assert filters.token_lengths(texts, smollm2_tokenizer, cache=cache) == expected
    again = V.TokenLengthCache(tmp_path, smollm2_tokenizer)
    assert again.lookup(["four", "five"]) == [filters.token_lengths(["four"], smollm2_tokenizer)[0], None]
    assert V.tokenizer_fingerprint(smollm2_tokenizer) == V.tokenizer_fingerprint(smollm2_tokenizer)
    assert again.path.name == f"lengths-{V.tokenizer_fingerprint(smollm2_tokenizer)}.json"


def test_gold_readability_is_cached(tmp_path, monkeypatch):
    cache = V.VerdictCache(tmp_path, "math_verify")
    assert filters.golds_parseable(["4", "See the proof."], cache=cache) == [True, False]
    monkeypatch.setattr("trl_explore.rewards.math_verify_reward.golds_parseable", lambda *a, **k: 1 / 0)
    again = V.VerdictCache(tmp_path, "math_verify")
    assert filters.golds_parseable(["4", "See the proof."], cache=again) == [True, False]
