"""Multi-teacher offline data builder (OGER §3.1, App. A.1): prompts, sources, filters, stats, builder.

Token counts below are under the embedded SmolLM2 tokenizer, checked by hand from its token lists
(it splits digits one by one):
  "The answer is \\boxed{4}."   -> The | answer | is | \\ | box | ed | { | 4 | }.        = 9
  "So x = \\boxed{5}."          -> So | x | = | \\ | box | ed | { | 5 | }.             = 9
  "The answer is \\boxed{10}."  -> The | answer | is | \\ | box | ed | { | 1 | 0 | }.    = 10
  LONG = " step" * 40 + " \\boxed{4}" -> 40 x step + \\ | box | ed | { | 4 | }           = 46
"""

import json
import os
import pathlib
import sys

import pytest

from trl_explore.data import builder as B
from trl_explore.data import filters, prompts, sources, stats
from trl_explore.data.generation import generated_records, split_finished, teacher_names
from trl_explore.data.prompts import OGER_SYSTEM_PROMPT
from trl_explore.data.sources import ProblemRecord
from trl_explore.data.stats import CompletionVerdict, TeacherStats

RIGHT4 = "The answer is \\boxed{4}."
WRONG5 = "So x = \\boxed{5}."
RIGHT10 = "The answer is \\boxed{10}."
LONG = " step" * 40 + " \\boxed{4}"

# ---------------------------------------------------------------- prompts


def test_build_prompt_default_preset():
    assert prompts.build_prompt("1+1?", prompts.get_prompt_preset("default")) == [
        {"role": "system", "content": prompts.DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": "1+1?"},
    ]


def test_build_prompt_oger_table6_preset():
    preset = prompts.get_prompt_preset("oger")
    assert preset.system == OGER_SYSTEM_PROMPT
    assert OGER_SYSTEM_PROMPT.startswith("Your task is to follow a systematic, thorough reasoning process")
    assert OGER_SYSTEM_PROMPT.endswith("closed-form results like multiple choices or mathematical solutions.")
    assert prompts.build_prompt("Find x {y}.", preset)[1] == {"role": "user",
                                                               "content": "This is the problem: Find x {y}."}


def test_build_prompt_none_preset_and_message_lists():
    assert prompts.build_prompt("Q", prompts.get_prompt_preset("none")) == [{"role": "user", "content": "Q"}]
    messages = [{"role": "system", "content": "mine"}, {"role": "user", "content": "Q"}]
    assert prompts.build_prompt(messages, prompts.get_prompt_preset("oger")) == messages  # kept as given


@pytest.mark.parametrize(
    "bad, message",
    [
        (123, "a prompt must be a string or a non-empty list of messages, got int"),
        ([], "a prompt must be a string or a non-empty list of messages, got list"),
        ("   ", "the problem text is empty"),
        ([{"role": "user"}], "message 0 must be a dict with 'role' and 'content'"),
        ([{"role": "robot", "content": "x"}], "message 0 has role 'robot'"),
        ([{"role": "user", "content": 5}], "message 0 content must be a string, got int"),
        ([{"role": "user", "content": "Q"}, {"role": "assistant", "content": "A"}],
         "the last message must come from the user"),
    ],
)
def test_build_prompt_rejects_bad_prompts(bad, message):
    with pytest.raises(ValueError, match="^row 7: " + message.replace("(", r"\(").replace(")", r"\)")):
        prompts.build_prompt(bad, prompts.get_prompt_preset("default"), where="row 7")


def test_unknown_preset_lists_the_known_ones():
    known = r"choose one of \['default', 'none', 'oger'\]"
    with pytest.raises(ValueError, match=r"Unknown system prompt preset 'table6'; " + known):
        prompts.get_prompt_preset("table6")


# ---------------------------------------------------------------- sources


def champ_conversation(model, solution, error=None, concept_turn=False):
    """A CHAMP-shaped conversation (optionally with a concept-explanation turn first)."""
    turns = [{"role": "System", "text": "You are an expert on mathematics.", "error": None}]
    if concept_turn:
        turns += [
            {"role": "User", "text": "Please explain the following concept: parity.", "error": None},
            {"role": f"Model.{model}", "text": "CONCEPT EXPLANATION", "error": None},
        ]
    turns += [
        {"role": "User", "text": "Solve the following problem. Make sure to show your work.\n\nQ", "error": None},
        {"role": f"Model.{model}", "text": solution, "error": error},
        {"role": "User", "text": "Now, summarize the answer above in one sentence.", "error": None},
        {"role": f"Model.{model}", "text": None if error else "SUMMARY",
         "error": "LENGTH_PREVIOUS" if error else None},
    ]
    return turns


CHAMP_LIKE = [
    {
        "problem_id": "P_1",
        "problem": "Q",
        "answer": "4",
        "conversations": {
            "GPT-4|0-Shot": champ_conversation("GPT-4", "sol A"),
            "GPT-4|Name C w/ H": champ_conversation("GPT-4", "sol B", concept_turn=True),
            "PaLM 2 Medium|0-Shot": champ_conversation("PaLM 2 Medium", "cut", error="LENGTH_CURRENT"),
        },
    }
]


def test_champ_solution_skips_concept_turns():
    solution = sources.champ_solution(champ_conversation("GPT-4", "sol B", concept_turn=True))
    assert solution["text"] == "sol B"


def test_champ_solution_without_solve_request_is_an_error():
    with pytest.raises(ValueError, match="^conv X: no model answer"):
        sources.champ_solution([{"role": "User", "text": "hello", "error": None}], where="conv X")


def test_champ_records_teachers_and_truncation():
    (record,) = list(sources.champ_records(CHAMP_LIKE))
    assert record.completions == [("GPT-4", "sol A"), ("GPT-4", "sol B")]
    assert record.truncated == {"PaLM 2 Medium": 1}
    (only_zero_shot,) = list(sources.champ_records(CHAMP_LIKE, settings=["0-Shot"]))
    assert only_zero_shot.completions == [("GPT-4", "sol A")]


def test_champ_records_unknown_setting():
    with pytest.raises(ValueError, match=r"CHAMP has no setting\(s\) \['0-shot'\]"):
        list(sources.champ_records(CHAMP_LIKE, settings=["0-shot"]))


LUFFY_ROWS = [
    {
        "prompt": [{"role": "user", "content": "What is 2+2?"}],
        "target": [{"role": "assistant", "content": RIGHT4}],
        "reward_model": {"ground_truth": "4", "style": "rule"},
    },
    {
        "prompt": [{"role": "user", "content": "What is 5+5?"}],
        "target": {"role": "assistant", "content": RIGHT10},
        "reward_model": {"ground_truth": "10", "style": "rule"},
    },
]


def test_luffy_records():
    first, second = sources.luffy_records(LUFFY_ROWS)
    assert (first.problem_id, first.answer, first.completions) == ("row-0", "4", [("DeepSeek-R1", RIGHT4)])
    assert first.problem == [{"role": "user", "content": "What is 2+2?"}]
    assert second.completions == [("DeepSeek-R1", RIGHT10)]


@pytest.mark.parametrize(
    "change, message",
    [
        ({"reward_model": {"style": "rule"}}, "row 1: column 'reward_model' has no 'ground_truth' field"),
        ({"target": [{"role": "user", "content": "x"}]}, "row 1: 'target' holds a non-assistant entry"),
        ({"target": [{"role": "assistant", "content": None}]},
         "row 1, target content: a completion must be a string, got NoneType"),
        ({"prompt": "What is 5+5?"},
         "row 1, column 'prompt': a prompt must be a string or a non-empty list of messages, got str"),
    ],
)
def test_luffy_records_bad_rows(change, message):
    rows = [LUFFY_ROWS[0], {**LUFFY_ROWS[1], **change}]
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(").replace(")", r"\)")):
        list(sources.luffy_records(rows))


def test_luffy_records_missing_column():
    with pytest.raises(ValueError, match=r"^row 0: missing column 'target'"):
        list(sources.luffy_records([{"prompt": LUFFY_ROWS[0]["prompt"], "reward_model": {"ground_truth": "4"}}]))


COLUMN_ROWS = [
    {"id": "a", "problem": "2+2?", "answer": "4", "r1": RIGHT4, "qwen": [WRONG5, RIGHT4]},
    {"id": "b", "problem": "5+5?", "answer": 10, "r1": None, "qwen": []},
]


def test_teacher_column_records():
    first, second = sources.teacher_column_records(COLUMN_ROWS, {"r1": "R1", "qwen": "Qwen"}, id_column="id")
    assert (first.problem_id, first.problem, first.answer) == ("a", "2+2?", "4")
    assert first.completions == [("R1", RIGHT4), ("Qwen", WRONG5), ("Qwen", RIGHT4)]
    assert (second.problem_id, second.answer, second.completions) == ("b", "10", [])


def test_teacher_column_records_bad_input():
    with pytest.raises(ValueError, match="^teacher_columns is empty"):
        list(sources.teacher_column_records(COLUMN_ROWS, []))
    with pytest.raises(ValueError, match=r"^row 0: missing column 'gold'"):
        list(sources.teacher_column_records(COLUMN_ROWS, ["r1"], answer_column="gold"))
    with pytest.raises(ValueError, match=r"^row 1, column 'qwen', item 1: a completion must be a string, got int"):
        list(sources.teacher_column_records([COLUMN_ROWS[0], {**COLUMN_ROWS[1], "qwen": ["ok", 3]}], ["r1", "qwen"]))
    with pytest.raises(ValueError, match=r"^row 0, column 'answer': the gold answer must be a non-empty string"):
        list(sources.teacher_column_records([{**COLUMN_ROWS[0], "answer": " "}], ["r1"]))


# ---------------------------------------------------------------- filters


def test_duplicate_flags():
    pairs = [("A", "x"), ("B", "x"), ("A", "x"), ("A", "y"), ("B", "x")]
    assert filters.duplicate_flags(pairs) == [False, False, True, False, True]


def test_token_lengths_by_hand(smollm2_tokenizer):
    texts = [RIGHT4, WRONG5, RIGHT10, LONG, ""]
    assert filters.token_lengths(texts, smollm2_tokenizer, batch_size=2) == [9, 9, 10, 46, 0]


# ---------------------------------------------------------------- split


def test_split_problem_ids_sizes_and_disjointness():
    ids = [f"p{i}" for i in range(10)]
    train, test = B.split_problem_ids(ids, 0.3, seed=0)
    assert (len(train), len(test)) == (7, 3)
    assert train | test == set(ids) and not train & test
    assert B.split_problem_ids(list(reversed(ids)) + ids[:2], 0.3, seed=0) == (train, test)  # depends on the set only
    assert B.split_problem_ids(ids, 0.0, seed=0) == (set(ids), set())
    assert any(B.split_problem_ids(ids, 0.3, seed=s)[1] != test for s in range(1, 5))


@pytest.mark.parametrize("fraction", [-0.1, 1.0, 1.5])
def test_split_problem_ids_rejects_bad_fraction(fraction):
    with pytest.raises(ValueError, match=r"test_fraction must be in \[0, 1\)"):
        B.split_problem_ids(["a"], fraction, seed=0)


# ---------------------------------------------------------------- stats


VERDICTS = [
    CompletionVerdict("p1", "A", 9, True),
    CompletionVerdict("p1", "A", 9, False),
    CompletionVerdict("p1", "A", 9, None, duplicate=True),
    CompletionVerdict("p1", "B", 46, True),  # correct but too long for max_length=20
    CompletionVerdict("p1", "B", 9, True),
    CompletionVerdict("p2", "A", 6, None),  # gold unparseable ("\\boxed{7}": \\ | box | ed | { | 7 | })
    CompletionVerdict("p3", "A", 9, False),
    CompletionVerdict("p4", "B", 10, True),
]
EXPECTED_A = TeacherStats("A", valid=1, mean_length=9.0, accuracy=100 / 3, judged=3, correct=1, too_long=0,
                          duplicates=1, truncated=0, unjudged=1)
EXPECTED_B = TeacherStats("B", valid=2, mean_length=9.5, accuracy=100.0, judged=3, correct=3, too_long=1,
                          duplicates=0, truncated=2, unjudged=0)


def test_teacher_stats_by_hand():
    assert stats.teacher_stats(VERDICTS, max_length=20, truncated={"B": 2}) == [EXPECTED_A, EXPECTED_B]


def test_teacher_stats_teacher_with_only_truncations():
    (row,) = stats.teacher_stats([], max_length=20, truncated={"C": 3})
    assert row == TeacherStats("C", 0, None, None, 0, 0, 0, 0, 3, 0)


def test_total_stats_by_hand():
    total = stats.total_stats([EXPECTED_A, EXPECTED_B])
    assert total == TeacherStats("All", 3, 28 / 3, 400 / 6, 6, 4, 1, 1, 2, 1)


def test_stats_markdown_exact():
    lines = stats.stats_markdown([EXPECTED_A, EXPECTED_B]).splitlines()
    assert lines[0] == (
        "| Teacher | Valid Samples | Avg. Length | Accuracy (%) | Judged | Correct | Too long | Duplicates "
        "| Truncated | Unjudged |"
    )
    assert lines[2:] == [
        "| A | 1 | 9.00 | 33.33 | 3 | 1 | 0 | 1 | 0 | 1 |",
        "| B | 2 | 9.50 | 100.00 | 3 | 3 | 1 | 0 | 2 | 0 |",
        "| All | 3 | 9.33 | 66.67 | 6 | 4 | 1 | 1 | 2 | 1 |",
    ]


def test_correct_lengths_by_teacher():
    assert stats.correct_lengths_by_teacher(VERDICTS) == {"A": [9], "B": [46, 9, 10]}


def test_plot_length_distribution_writes_a_png(tmp_path):
    path = stats.plot_length_distribution({"A": [9], "B": [46, 9, 10]}, 20, tmp_path / "fig" / "lengths.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


# ---------------------------------------------------------------- merge


def test_merge_records_concatenates_by_id():
    merged = B.merge_records(
        [
            ProblemRecord("p", "Q", "4", [("A", "x")], {"A": 1}),
            ProblemRecord("q", "Q2", "5"),
            ProblemRecord("p", "Q", " 4 ", [("B", "y")], {"A": 2, "B": 1}),
        ]
    )
    assert [r.problem_id for r in merged] == ["p", "q"]
    assert merged[0].completions == [("A", "x"), ("B", "y")] and merged[0].truncated == {"A": 3, "B": 1}


@pytest.mark.parametrize(
    "record, message",
    [
        (ProblemRecord("p", "Q", "5"), "problem 'p' appears twice with different answers"),
        (ProblemRecord("p", "Other", "4"), "problem 'p' appears twice with different problems"),
        (ProblemRecord("", "Q", "4"), "record 1: problem_id must be a non-empty string"),
        (ProblemRecord("r", "Q", None), "problem 'r': field 'answer' must be a non-empty string"),
        (ProblemRecord("r", "Q", "4", [("A", 42)]),
         "problem 'r': completion 0 of teacher 'A' is not a string \\(int\\)"),
        (ProblemRecord("r", "Q", "4", ["just text"]),
         "problem 'r': completion 0 must be a \\(teacher name, text\\) pair"),
    ],
)
def test_merge_records_bad_input(record, message):
    with pytest.raises(ValueError, match="^" + message):
        B.merge_records([ProblemRecord("p", "Q", "4"), record])


# ---------------------------------------------------------------- builder on a small in-memory set

SMALL = [
    ProblemRecord("p1", "2+2?", "4", [("A", RIGHT4), ("A", WRONG5), ("A", RIGHT4), ("B", LONG), ("B", RIGHT4)]),
    ProblemRecord("p2", "Prove it.", "See the proof.", [("A", "\\boxed{7}")]),  # gold not parseable
    ProblemRecord("p3", "5+5?", "10", [("A", WRONG5)], {"B": 2}),  # no valid completion, 2 truncated
    ProblemRecord("p4", "9+1?", "10", [("B", RIGHT10)]),
]


@pytest.fixture(scope="module")
def small_build(smollm2_tokenizer):
    return B.build_offline_dataset(SMALL, tokenizer=smollm2_tokenizer, max_length=20, test_fraction=0.0,
                                   show_progress=False)


def test_small_build_rows(small_build):
    dataset, _ = small_build
    assert set(dataset) == {"train", "test"} and dataset["test"].num_rows == 0
    assert dataset["train"].column_names == list(B.OFFLINE_COLUMNS)
    rows = dataset["train"].to_list()
    assert [r["problem_id"] for r in rows] == ["p1", "p3", "p4"]  # p2 (unparseable gold) left out
    assert rows[0]["offline_completions"] == [RIGHT4, RIGHT4] and rows[0]["offline_teachers"] == ["A", "B"]
    assert rows[1]["offline_completions"] == [] and rows[1]["offline_teachers"] == []  # kept, empty
    assert rows[2]["offline_completions"] == [RIGHT10] and rows[2]["offline_teachers"] == ["B"]
    assert rows[0]["prompt"] == [
        {"role": "system", "content": prompts.DEFAULT_SYSTEM_PROMPT},
        {"role": "user", "content": "2+2?"},
    ]
    assert rows[2]["answer"] == "10"


def test_small_build_report(small_build, tmp_path):
    _, report = small_build
    assert report.teachers == [EXPECTED_A, EXPECTED_B]  # same numbers as the hand-made verdicts
    assert (report.problems, report.unparseable_gold, report.without_valid) == (4, ["p2"], 1)
    assert (report.train_problems, report.test_problems, report.max_length) == (3, 0, 20)
    assert report.lengths == {"A": [9], "B": [46, 9, 10]}
    paths = report.save(tmp_path)
    saved = json.loads(paths["json"].read_text())
    assert saved["total"]["valid"] == 3 and saved["teachers"][1]["too_long"] == 1
    assert "| A | 1 | 9.00 | 33.33 |" in paths["markdown"].read_text()
    assert paths["figure"].stat().st_size > 0


def test_build_split_is_disjoint_and_seeded(smollm2_tokenizer):
    records = [ProblemRecord(f"q{i}", f"{i}+0?", str(i), [("A", f"\\boxed{{{i}}}")]) for i in range(10)]
    dataset, report = B.build_offline_dataset(records, tokenizer=smollm2_tokenizer, test_fraction=0.2, seed=3,
                                              show_progress=False)
    train, test = set(dataset["train"]["problem_id"]), set(dataset["test"]["problem_id"])
    assert (len(train), len(test)) == (8, 2) and not train & test
    assert test == B.split_problem_ids([r.problem_id for r in records], 0.2, 3)[1]
    assert dataset["test"][0]["offline_completions"]  # test rows keep their completions
    assert report.teachers[0].valid == 10


def test_build_rejects_tokenizer_without_chat_template(smollm2_tokenizer):
    import copy

    bare = copy.deepcopy(smollm2_tokenizer)
    bare.chat_template = None
    with pytest.raises(ValueError, match="has no chat template, but the offline data set has conversational prompts"):
        B.build_offline_dataset(SMALL, tokenizer=bare, show_progress=False)


@pytest.mark.parametrize(
    "records, message",
    [
        ([ProblemRecord("p9", 123, "4")],
         "problem 'p9': a prompt must be a string or a non-empty list of messages, got int"),
        ([], "The sources yielded no problem"),
    ],
)
def test_build_bad_input(smollm2_tokenizer, records, message):
    with pytest.raises(ValueError, match=message):
        B.build_offline_dataset(records, tokenizer=smollm2_tokenizer, show_progress=False)


def test_build_rejects_non_record_items(smollm2_tokenizer):
    with pytest.raises(TypeError, match="record 0: sources must yield ProblemRecord, got dict"):
        B.build_offline_dataset([{"problem_id": "x"}], tokenizer=smollm2_tokenizer, show_progress=False)


def test_build_from_luffy_and_columns_merged(smollm2_tokenizer):
    luffy = sources.luffy_records(LUFFY_ROWS, id_column=None)
    columns = sources.teacher_column_records(
        [{"problem": [{"role": "user", "content": "What is 2+2?"}], "answer": "4", "qwen": WRONG5}], ["qwen"]
    )
    dataset, report = B.build_offline_dataset(luffy, columns, tokenizer=smollm2_tokenizer, test_fraction=0.0,
                                              show_progress=False)
    rows = dataset["train"].to_list()
    assert [r["offline_teachers"] for r in rows] == [["DeepSeek-R1"], ["DeepSeek-R1"]]
    assert rows[0]["prompt"] == [{"role": "user", "content": "What is 2+2?"}]  # message prompts kept as given
    assert [(t.teacher, t.judged, t.correct) for t in report.teachers] == [("DeepSeek-R1", 2, 2), ("qwen", 1, 0)]


# ---------------------------------------------------------------- generation (tiny model)


def test_teacher_names():
    assert teacher_names(["Qwen/Qwen3-32B", "/m/glm/"]) == {"Qwen3-32B": "Qwen/Qwen3-32B", "glm": "/m/glm/"}
    assert teacher_names({"R1": "x"}) == {"R1": "x"}
    with pytest.raises(ValueError, match="No teacher model given"):
        teacher_names([])
    with pytest.raises(ValueError, match="Two teachers are both named 'm'"):
        teacher_names(["/a/m", "/b/m"])


def test_split_finished():
    assert split_finished([5, 6, 2, 7], {2}) == ([5, 6], True)
    assert split_finished([5, 6, 7], {2}) == ([5, 6, 7], False)
    assert split_finished([2], {2, 0}) == ([], True)


@pytest.fixture(scope="module")
def tiny_teacher(smollm2_tokenizer, tmp_path_factory):
    from trl_explore.testing import make_tiny_causal_lm

    folder = tmp_path_factory.mktemp("tiny_teacher")
    make_tiny_causal_lm(smollm2_tokenizer).save_pretrained(folder)
    smollm2_tokenizer.save_pretrained(folder)
    return str(folder)


def test_generated_records_with_transformers(tiny_teacher):
    problems = [ProblemRecord("p1", "2+2?", "4", [("A", RIGHT4)]), ProblemRecord("p2", "3+3?", "6")]
    kwargs = dict(num_samples=2, max_new_tokens=4, temperature=1.0, batch_size=2, backend="transformers", seed=0,
                  show_progress=False)
    records = list(generated_records(problems, {"tiny": tiny_teacher}, **kwargs))
    assert [r.problem_id for r in records] == ["p1", "p2"]
    for r in records:
        assert all(t == "tiny" and isinstance(text, str) for t, text in r.completions)
        assert len(r.completions) + r.truncated.get("tiny", 0) == 2  # every sample accounted for
        assert ("A", RIGHT4) not in r.completions  # input completions are not repeated
    again = list(generated_records(problems, {"tiny": tiny_teacher}, **kwargs))
    assert [(r.completions, r.truncated) for r in again] == [(r.completions, r.truncated) for r in records]


def test_generated_records_sample_as_the_v0_1_teacher_loop(tiny_model, smollm2_tokenizer, tmp_path):
    """generated_records (through trl_explore.sampling) gives the samples of the builder's own loop before the
    sampling stack (written out here): one torch.manual_seed(seed) per teacher, batches of prompts with
    num_return_sequences, text prompts tokenised without special tokens, top_k left at the generation config's, a
    completion without EOS counted as truncated."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_explore.data.prompts import build_prompt, get_prompt_preset

    tok = smollm2_tokenizer
    model = tiny_model.eval()
    ids = tok.apply_chat_template([{"role": "user", "content": "What is 3 + 4?"}], add_generation_prompt=True,
                                  return_tensors="pt", return_dict=True)["input_ids"]
    with torch.no_grad():  # make EOS likely (within the default top-50), so both outcomes occur
        hidden = model.model(ids).last_hidden_state[0]
        direction = hidden.mean(0) / hidden.mean(0).norm()
        model.lm_head.weight[tok.eos_token_id] = 3.0 / (hidden @ direction).mean() * direction
    model.save_pretrained(tmp_path / "teacher")
    tok.save_pretrained(tmp_path / "teacher")
    teacher = str(tmp_path / "teacher")
    problems = [ProblemRecord(f"p{i}", f"What is {i} times {i}?", str(i * i)) for i in range(3)]
    settings = dict(num_samples=2, max_new_tokens=8, temperature=1.0, top_p=0.95, batch_size=2, seed=0)
    records = list(generated_records(problems, {"tiny": teacher}, backend="transformers", show_progress=False,
                                     **settings))

    prompts = [build_prompt(p.problem, get_prompt_preset("default")) for p in problems]
    ref_tok = AutoTokenizer.from_pretrained(teacher, padding_side="left")
    ref_model = AutoModelForCausalLM.from_pretrained(teacher).eval()
    from trl_explore.sampling.decode import fast_generate

    torch.manual_seed(settings["seed"])
    samples = []
    for start in range(0, len(prompts), settings["batch_size"]):
        texts = [ref_tok.apply_chat_template(p, tokenize=False, add_generation_prompt=True)
                 for p in prompts[start : start + settings["batch_size"]]]
        inputs = ref_tok(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            inputs = {k: v.repeat_interleave(2, dim=0) for k, v in inputs.items()}  # 2 samples a prompt, in order
            out = fast_generate(ref_model, **inputs, max_new_tokens=8, do_sample=True,  # the default decoder
                                temperature=1.0, top_p=0.95, pad_token_id=ref_tok.pad_token_id)
        new = out[:, inputs["input_ids"].shape[1] :].tolist()
        samples += [split_finished(row, {ref_tok.eos_token_id}) for row in new]
    for i, record in enumerate(records):
        mine = samples[2 * i : 2 * i + 2]
        kept = [("tiny", ref_tok.decode(ids, skip_special_tokens=True)) for ids, done in mine if done]
        assert record.completions == kept
        assert record.truncated.get("tiny", 0) == sum(not done for _, done in mine)
    assert 0 < sum(r.truncated.get("tiny", 0) for r in records) < 6  # both outcomes were compared


def test_generated_records_bad_backend():
    with pytest.raises(ValueError, match="backend must be 'auto', 'vllm' or 'transformers', got 'tgi'"):
        list(generated_records([ProblemRecord("p", "Q", "1")], ["m"], backend="tgi"))


# ---------------------------------------------------------------- command line


def test_cli_on_teacher_columns(tmp_path, smollm2_tokenizer):
    sys.path.insert(0, str(pathlib.Path(__file__).parents[1] / "examples"))
    import build_offline_dataset as cli
    from datasets import load_from_disk
    from trl import TrlParser

    data = tmp_path / "sols.jsonl"
    data.write_text("\n".join(json.dumps({k: v for k, v in r.items() if k != "id"}) for r in COLUMN_ROWS[:1]))
    out = tmp_path / "out"
    (args,) = TrlParser(cli.ScriptArguments).parse_args_and_config(
        ["--output_dir", str(out), "--source", "columns", "--data_files", str(data), "--teacher_columns", "r1", "qwen",
         "--max_length", "50", "--test_fraction", "0", "--system_prompt", "oger",
         "--build_cache", str(tmp_path / "v")]
    )
    cli.main(args)
    assert len(list((tmp_path / "v").glob("verdicts-math_verify-*.json"))) == 1
    dataset = load_from_disk(str(out))
    assert dataset["train"][0]["offline_teachers"] == ["r1", "qwen"]
    assert dataset["train"][0]["prompt"][1]["content"] == "This is the problem: 2+2?"
    assert {p.name for p in out.iterdir()} >= {"offline_stats.md", "offline_stats.json", "offline_lengths.png",
                                               "dataset_dict.json"}


# ---------------------------------------------------------------- CHAMP: verdicts checked by hand

# 20 zero-shot CHAMP solutions drawn at random (random.Random(1234) over the 0-Shot completions with a
# parseable gold answer). For each one I read the end of the solution and the gold answer and decided
# whether the FINAL answer matches the gold (the question the correctness filter asks; the reasoning
# itself is not graded). 15/20 agree with the verifier; the 5 disagreements are the verifier missing
# a correct answer written in prose without \boxed{} (false negatives: such a solution is dropped,
# never a wrong one kept).
HAND_CHECKED = [
    ("P_Combinatorics_20", "PaLM 2 Medium", False, "boxed 10, gold 87"),
    ("P_Number-Theory_27", "GPT-4", False, "says 2, gold 0"),
    ("P_Number-Theory_79", "GPT-4", False, "says 989, gold 0"),
    ("P_Inequality_19", "GPT-4 Turbo", False, "says three, gold 2 inequalities"),
    ("P_Number-Theory_44", "GPT-4", True, "(x, y) = (0, 0) = gold x=y=0"),
    ("P_Polynomial_7", "PaLM 2 Medium", False, "says remainder 0, gold -2x+2"),
    ("P_Number-Theory_73", "GPT-3.5", False, "says 2 and 319, gold 0"),
    ("P_Number-Theory_58", "GPT-3.5", True, "says 0 (bogus derivation), gold 0"),
    ("P_Number-Theory_31", "GPT-3.5", True, "x = 2 and y = 1 = gold x=2, y=1"),
    ("P_Inequality_3", "GPT-4 Turbo", True, "\\frac{1}{3} = gold 1/3"),
    ("P_Inequality_29", "GPT-4", True, "2 * 2^m = gold 2^(m+1)"),
    ("P_Combinatorics_20", "GPT-4 Turbo", False, "says 22, gold 87"),
    ("P_Number-Theory_39", "PaLM 2 Medium", False, "lists (-2,-2), (0,2), (2,4), ...; gold (0,2), (9,11)"),
    ("P_Sequence_20", "GPT-4 Turbo", True, "a_10 = 89 = gold"),
    ("P_Combinatorics_1", "PaLM 2 Medium", False, "boxed 3, gold 239"),
    ("P_Sequence_26", "GPT-4 Turbo", True, "limit exists and equals 2 = gold"),
    ("P_Number-Theory_27", "GPT-3.5", True, "says 0 = gold"),
    ("P_Number-Theory_50", "GPT-4 Turbo", False, "says 10401, gold 21978"),
    ("P_Number-Theory_65", "GPT-4 Turbo", False, "only (3, 2); gold adds (5, 3), itself wrong: 25-18=7"),
    ("P_Number-Theory_52", "GPT-3.5", True, "says 0 = gold"),
]
VERIFIER_MISSES = {
    ("P_Number-Theory_44", "GPT-4"): "ends '(x, y) = (0, 0).': the unboxed tail is read as '0).'",
    ("P_Number-Theory_31", "GPT-3.5"): "'x = 2 and y = 1' is read as the single number 1",
    ("P_Inequality_29", "GPT-4"): "'is 2 * 2^m.' at the end of prose: nothing extracted",
    ("P_Sequence_20", "GPT-4 Turbo"): "a sentence after the answer ends with 'at most 1': 1 is read",
    ("P_Number-Theory_52", "GPT-3.5"): "'values of n mod 9 are 0.': the 9 of 'mod 9' is read",
}


@pytest.fixture(scope="module")
def champ_by_id():
    from trl_explore.defaults import champ_problems

    return {p["problem_id"]: p for p in champ_problems()}


@pytest.mark.parametrize(
    "problem_id, teacher, mine, why",
    [
        pytest.param(*case, marks=pytest.mark.xfail(strict=True, reason=VERIFIER_MISSES[case[:2]]))
        if case[:2] in VERIFIER_MISSES
        else case
        for case in HAND_CHECKED
    ],
)
def test_champ_verdict_checked_by_hand(champ_by_id, problem_id, teacher, mine, why):
    from trl_explore.data.champ_answers import gold_alternatives
    from trl_explore.rewards.math_verify_reward import verify_answer

    problem = champ_by_id[problem_id]
    solution = sources.champ_solution(problem["conversations"][f"{teacher}|0-Shot"])
    assert verify_answer(solution["text"], problem["answer"], gold_normalizer=gold_alternatives) is mine, why


# ---------------------------------------------------------------- CHAMP: regression of the whole build

# CHAMP 0-Shot, default settings (max_length 8192, test_fraction 0.1, seed 0), the default grader (Math-Verify's
# semantics; version 0.1's strict rule gave 30 / 47 / 58 / 12 correct, 149 problems without a valid trajectory).
CHAMP_0SHOT_TABLE = {
    # teacher: (valid, judged, correct, too_long, duplicates, truncated, unjudged)
    "GPT-3.5": (33, 238, 33, 0, 0, 6, 26),
    # GPT-4: 55 before the guard-rails of rewards/guards.py, 54 with them; 57 with operator_fragment (issue 30): four
    # plain-text expressions read whole (2^(n-1), 2^n, 2^n / (1+n), 1/n), "3*(abc)^(1/3) - (a+b+c)" no longer read as 3
    "GPT-4": (57, 241, 57, 0, 0, 2, 27),
    # GPT-4 Turbo: one more read whole (2^(n-1)); one solution (P_Combinatorics_30, "(x+y+z)^{1999}") that no grading
    # finishes within 5 s nor 60 s is undecided (unjudged), where it was cached as "timeout" and counted wrong
    "GPT-4 Turbo": (76, 238, 76, 0, 0, 4, 28),
    "PaLM 2 Medium": (15, 243, 15, 0, 0, 0, 27),
}


@pytest.fixture(scope="module")
def champ_zero_shot(tmp_path_factory):
    root = tmp_path_factory.mktemp("offline_cache")
    dataset = B.load_default_offline_dataset(settings=("0-Shot",), cache_root=root)
    (folder,) = root.glob("champ-*")
    return root, folder, dataset


@pytest.mark.slow
def test_champ_zero_shot_table(champ_zero_shot):
    _, folder, _ = champ_zero_shot
    saved = json.loads((folder / "offline_stats.json").read_text())
    table = {
        t["teacher"]: (t["valid"], t["judged"], t["correct"], t["too_long"], t["duplicates"], t["truncated"],
                       t["unjudged"])
        for t in saved["teachers"]
    }
    assert table == CHAMP_0SHOT_TABLE
    # 137 without a valid solution before operator_fragment: 3 problems gained their first (issue 30)
    assert (saved["problems"], len(saved["unparseable_gold"]), saved["without_valid"]) == (270, 27, 134)
    assert (saved["train_problems"], saved["test_problems"]) == (219, 24)
    assert round(saved["total"]["accuracy"], 2) == 18.85  # 181 / 960
    assert saved["undecided"] == 1 and saved["undecided_gold"] == []
    assert (folder / "offline_lengths.png").stat().st_size > 0


def test_champ_zero_shot_rows(champ_zero_shot):
    _, _, dataset = champ_zero_shot
    train, test = dataset["train"], dataset["test"]
    assert (train.num_rows, test.num_rows) == (219, 24)
    assert not set(train["problem_id"]) & set(test["problem_id"])
    assert sum(len(c) for c in train["offline_completions"]) + sum(len(c) for c in test["offline_completions"]) == 181
    for row in train:
        assert len(row["offline_completions"]) == len(row["offline_teachers"])
        assert set(row["offline_teachers"]) <= set(CHAMP_0SHOT_TABLE)


def test_default_offline_dataset_is_cached(champ_zero_shot, monkeypatch):
    root, folder, dataset = champ_zero_shot

    def no_rebuild(*args, **kwargs):
        raise AssertionError("rebuilt instead of loading the cache")

    monkeypatch.setattr(B.OfflineDatasetBuilder, "build", no_rebuild)
    again = B.load_default_offline_dataset(settings=["0-Shot"], cache_root=root)
    assert again["train"]["problem_id"] == dataset["train"]["problem_id"]
    assert json.loads((folder / "build_args.json").read_text())["settings"] == ["0-Shot"]
    assert sorted(p.name for p in root.iterdir()) == ["build_cache", folder.name]  # no temporary folder left


def test_sum_truncated():
    records = [ProblemRecord("a", "Q", "1", truncated={"A": 1}),
               ProblemRecord("b", "Q", "1", truncated={"A": 2, "B": 5})]
    assert B.sum_truncated(records) == {"A": 3, "B": 5}


@pytest.mark.parametrize(
    "settings, message",
    [
        ({"max_length": 0}, "max_length must be a positive number of tokens, got 0"),
        ({"test_fraction": 1.0}, r"test_fraction must be in \[0, 1\), got 1.0"),
        ({"num_proc": 0}, "num_proc must be a positive integer, got 0"),
        ({"grader_mode": "lenient"}, "grader_mode='lenient' is not a grader mode"),
    ],
)
def test_builder_rejects_bad_settings_before_any_work(settings, message):
    with pytest.raises(ValueError, match=message):
        B.OfflineDatasetBuilder(tokenizer="never loaded", **settings).build(SMALL)


# All 18 CHAMP settings = load_default_offline_dataset(): 1.5 to 5 minutes on one core, so it runs only
# when TRL_EXPLORE_FULL_CHAMP=1 is set (the numbers come from such a run).
CHAMP_ALL_TABLE = {
    # teacher: (valid, judged, correct, too_long, duplicates, truncated, unjudged)
    # (the default grader; version 0.1's strict rule gave 389 / 609 / 718 / 220 correct and 50 problems without one;
    # before the guard-rails of rewards/guards.py 490 / 743 / 877 / 277)
    "GPT-3.5": (486, 2968, 486, 0, 1429, 154, 309),
    "GPT-4": (738, 3033, 738, 0, 1482, 31, 314),
    "GPT-4 Turbo": (877, 3010, 877, 0, 1466, 76, 308),
    "PaLM 2 Medium": (276, 3051, 276, 0, 1494, 0, 315),
}


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("TRL_EXPLORE_FULL_CHAMP"), reason="5 min build; set TRL_EXPLORE_FULL_CHAMP=1")
def test_champ_all_settings_table(tmp_path):
    dataset = B.load_default_offline_dataset(cache_root=tmp_path)
    (folder,) = tmp_path.glob("champ-*")
    saved = json.loads((folder / "offline_stats.json").read_text())
    table = {
        t["teacher"]: (t["valid"], t["judged"], t["correct"], t["too_long"], t["duplicates"], t["truncated"],
                       t["unjudged"])
        for t in saved["teachers"]
    }
    assert table == CHAMP_ALL_TABLE
    assert sum(judged + dup + cut + unjudged for _, judged, _, _, dup, cut, unjudged in table.values()) == 270 * 72
    assert (saved["without_valid"], dataset["train"].num_rows, dataset["test"].num_rows) == (37, 219, 24)


def test_outputs_go_under_the_git_ignored_outputs_folder(load_script):
    from trl_explore.evaluation.plots import default_plot_dir

    root = pathlib.Path(__file__).resolve().parents[1]
    example = load_script("examples/build_offline_dataset.py", "build_example")
    assert example.ScriptArguments().output_dir == B.DEFAULT_OUTPUT_DIR == "outputs/offline_dataset"
    assert default_plot_dir(["outputs/a", "outputs/b"]).parts[:2] == ("outputs", "plots")
    ignored = (root / ".gitignore").read_text().split()
    assert {"outputs/", "__pycache__/", "*.egg-info/", ".venv*/"} <= set(ignored)
