"""The task ladder (trl_explore.data.ladder): determinism, disjoint splits, correct answers, the prompt format, and
teacher solutions that the default grader scores 1 and that fit a completion."""

import ast
import hashlib
import json
import operator
import re
import subprocess
import sys
from collections import Counter
from fractions import Fraction

import pytest

from trl_explore.data.builder import OFFLINE_COLUMNS, offline_features
from trl_explore.data.ladder import (
    INSTRUCTION,
    LADDER_COLUMNS,
    LEVELS,
    NEUTRAL_INSTRUCTION,
    SPLITS,
    LadderProblem,
    ladder_dataset,
    ladder_features,
    ladder_problems,
    ladder_prompt,
)
from trl_explore.data.ladder_problems import WordSurface
from trl_explore.data.ladder_teachers import MAX_SOLUTION_TOKENS, TEACHER_STYLES, solution
from trl_explore.data.loading import load_split


@pytest.fixture(scope="module")
def ladder():
    """The default ladder (all levels, default sizes)."""
    return ladder_dataset()


def _rows(dataset):
    return [row for split in SPLITS for row in dataset[split]]


def _digest(dataset) -> str:
    blob = json.dumps({split: dataset[split].to_list() for split in SPLITS}, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(blob.encode()).hexdigest()


# --------------------------------------------------------------------------------------------------
# An independent reading of a problem: its canonical expression (from problem_id) evaluated with Fractions
# --------------------------------------------------------------------------------------------------

_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv}


def _evaluate(expression: str) -> Fraction:
    """Value of an ASCII arithmetic expression (Python precedence), exactly, with Fractions."""

    def walk(node):
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.Constant) and isinstance(node.value, int):
            return Fraction(node.value)
        raise AssertionError(f"unexpected syntax in {expression!r}")

    return walk(ast.parse(expression, mode="eval").body)


def _canonical(problem_id: str) -> tuple[str, str, bool]:
    """``(level, ASCII expression, is a word problem)`` from ``ladder:<level>:[word:]<expression>``."""
    prefix, level, rest = problem_id.split(":", 2)
    assert prefix == "ladder"
    word = rest.startswith("word:")
    return level, rest.removeprefix("word:"), word


def _numbers(text: str) -> list[int]:
    return [int(n) for n in re.findall(r"\d+", text)]


def _question(row) -> str:
    """The problem's question: the last user turn, less the instruction that follows it."""
    content = row["prompt"][-1]["content"]
    assert content.endswith(" " + INSTRUCTION)
    return content.removesuffix(" " + INSTRUCTION)


# --------------------------------------------------------------------------------------------------
# Determinism
# --------------------------------------------------------------------------------------------------


def test_same_arguments_give_identical_rows_and_another_seed_differs(ladder):
    assert _digest(ladder_dataset()) == _digest(ladder)
    other = ladder_dataset(seed=1)
    assert _digest(other) != _digest(ladder)
    for split in SPLITS:  # not a reshuffle of the same problems: most problems differ
        same = set(other[split]["problem_id"]) & set(ladder[split]["problem_id"])
        assert len(same) < 0.5 * len(ladder[split])


def test_rows_do_not_depend_on_the_python_hash_seed(ladder):
    code = ("import hashlib, json; from trl_explore.data.ladder import ladder_dataset; d = ladder_dataset(); "
            "print(hashlib.sha256(json.dumps({s: d[s].to_list() for s in ('train', 'validation', 'test')}, "
            "sort_keys=True, ensure_ascii=False).encode()).hexdigest())")
    digests = set()
    for hash_seed in ("1", "12345"):
        env = {**__import__("os").environ, "PYTHONHASHSEED": hash_seed}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        digests.add(done.stdout.strip())
    assert digests == {_digest(ladder)}


def test_test_and_validation_do_not_change_with_train_size_or_the_levels_asked_for(ladder):
    bigger = ladder_dataset(train_size=120)
    for split in ("validation", "test"):
        assert bigger[split].to_list() == ladder[split].to_list()
    assert set(ladder["train"]["problem_id"]) < set(bigger["train"]["problem_id"])
    alone = ladder_dataset(levels=["two_digit_two_ops"])
    for split in SPLITS:
        expected = {r["problem_id"] for r in ladder[split] if r["level"] == "two_digit_two_ops"}
        assert set(alone[split]["problem_id"]) == expected


# --------------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------------


def test_splits_are_disjoint_by_canonical_form_and_hold_no_duplicate(ladder):
    forms = {}
    for split in SPLITS:
        ids = ladder[split]["problem_id"]
        canonical = [_canonical(pid)[1:] for pid in ids]
        assert len(set(ids)) == len(ids) and len(set(canonical)) == len(canonical), split
        forms[split] = set(canonical)
    assert not forms["train"] & forms["validation"]
    assert not forms["train"] & forms["test"]
    assert not forms["validation"] & forms["test"]
    examples = {(LEVELS[name].example.canonical.removeprefix("word:"), LEVELS[name].word) for name in LEVELS}
    assert not examples & set().union(*forms.values())  # the prompts' worked examples are in no split


def test_split_sizes_per_level_and_a_level_mix():
    dataset = ladder_dataset(train_size={"one_digit": 10, "word": 3}, validation_size=5, test_size=7)
    assert Counter(dataset["train"]["level"]) == {"one_digit": 10, "word": 3}
    assert Counter(dataset["validation"]["level"]) == dict.fromkeys(LEVELS, 5)
    assert Counter(dataset["test"]["level"]) == dict.fromkeys(LEVELS, 7)
    levels = dataset["test"]["level"][:10]  # rows are shuffled: the first rows of a split mix its levels
    assert len(set(levels)) > 2


def _space(name: str) -> set[str]:
    """Every canonical form of a level, enumerated independently of the generator's draws."""
    forms = set()
    if name == "one_digit":
        for a in range(10):
            for b in range(10):
                forms |= {f"{min(a, b)}+{max(a, b)}", f"{min(a, b)}*{max(a, b)}", f"{max(a, b)}-{min(a, b)}"}
                if b:
                    forms.add(f"{a * b}/{b}")
    elif name == "two_plus_one":
        forms = {f"{b}+{a}" for a in range(10, 100) for b in range(1, 10)}
        forms |= {f"{a}-{b}" for a in range(10, 100) for b in range(1, 10)}
    elif name == "two_digit":
        pairs = [(a, b) for a in range(10, 100) for b in range(a, 100)]
        forms = {f"{a}+{b}" for a, b in pairs} | {f"{b}-{a}" for a, b in pairs}
    elif name == "one_digit_two_ops":
        triples = [(a, b, c) for a in range(10) for b in range(10) for c in range(10)]
        forms = {f"{a}{o}{b}{p}{c}" for a, b, c in triples for o in "+-" for p in "+-"
                 if _evaluate(f"{a}{o}{b}") >= 0 and _evaluate(f"{a}{o}{b}{p}{c}") >= 0}
    elif name == "word":
        forms = {f"word:{b}+{a}" for a in range(2, 21) for b in range(2, 10) if b <= a}
        forms |= {f"word:{a}+{b}" for a in range(2, 21) for b in range(2, 10) if a < b}
        forms |= {f"word:{a}-{b}" for a in range(5, 21) for b in range(2, a - 1)}
        forms |= {f"word:{a}*{b}" for a in range(2, 10) for b in range(a, 10)}
        forms |= {f"word:{b * q}/{b}" for b in range(2, 10) for q in range(2, 10)}
    return forms


_SMALL_LEVELS = [("one_digit", 255), ("one_digit_two_ops", 2605), ("two_plus_one", 1620), ("two_digit", 8190),
                 ("word", 376)]


@pytest.mark.parametrize("name, size", _SMALL_LEVELS)
def test_level_spaces_have_the_documented_size_and_the_generator_stays_inside(ladder, name, size):
    space = _space(name)
    assert len(space) == size
    drawn = {_canonical(r["problem_id"])[1] for r in _rows(ladder) if r["level"] == name}
    drawn = {("word:" if name == "word" else "") + form for form in drawn}
    assert drawn <= space
    for other, _ in _SMALL_LEVELS:  # the levels are disjoint by construction
        if other != name:
            assert not space & _space(other)


def test_asking_a_level_for_more_problems_than_it_holds_names_the_level():
    with pytest.raises(ValueError, match="'one_digit' holds too few distinct problems"):
        ladder_dataset(levels=["one_digit"], train_size={"one_digit": 200})
    # a size beyond one_digit's 255 problems is fine for a level that holds more, when one_digit is not asked for
    assert len(ladder_dataset(levels=["two_digit"], train_size=300)["train"]) == 300


@pytest.mark.parametrize("kwargs, message", [
    (dict(levels=["three_digit"]), "unknown ladder level"),
    (dict(train_size=-1), "train_size must be a non-negative int"),
    (dict(test_size={"one_digt": 3}), "test_size must be"),
    (dict(styles=["terse", "terse"]), "styles must be distinct"),
    (dict(max_length=0), "max_length must be a positive"),
    (dict(prompt_format="few_shot"), "unknown prompt_format"),
])
def test_bad_options_are_refused_with_the_option_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ladder_dataset(**kwargs)


# --------------------------------------------------------------------------------------------------
# Answers and prompts
# --------------------------------------------------------------------------------------------------


def test_every_answer_is_the_exact_value_of_its_problem(ladder):
    for row in _rows(ladder):
        level, expression, word = _canonical(row["problem_id"])
        value = _evaluate(expression)
        assert value.denominator == 1 and value >= 0, row["problem_id"]
        assert row["answer"] == str(value.numerator), row["problem_id"]
        assert row["level"] == level and LEVELS[level].word == word
        question = _question(row)
        operands = _numbers(expression)
        assert sorted(_numbers(question)) == sorted(operands), row["problem_id"]  # the question states the operands
        if not word:  # the bare question, read on its own, has the same value
            text = question.removeprefix("What is ").removesuffix("?").replace("×", "*").replace("÷", "/")
            assert _evaluate(text) == value, row["problem_id"]
        else:  # a word problem states the numbers in the order its (one) operation takes them
            op = re.sub(r"\d", "", expression)
            a, b = _numbers(question)
            assert _evaluate(f"{a}{op}{b}") == value, row["problem_id"]


def test_prompt_is_the_worked_example_as_a_first_exchange_then_the_problem(ladder, smollm2_tokenizer):
    for row in _rows(ladder):
        example = LEVELS[row["level"]].example
        assert row["prompt"] == [
            {"role": "user", "content": f"{example.question} {INSTRUCTION}"},
            {"role": "assistant", "content": solution(example, "terse")},
            {"role": "user", "content": f"{_question(row)} {INSTRUCTION}"},
        ]
        assert example.canonical not in row["problem_id"]
        # nothing of the answer in the problem's turn: no "=", no filled box, only the operands as numbers
        question = _question(row)
        assert "=" not in question and "boxed" not in question
        assert sorted(_numbers(question)) == sorted(_numbers(_canonical(row["problem_id"])[1]))
    first = ladder["test"][0]
    rendered = smollm2_tokenizer.apply_chat_template(first["prompt"], tokenize=False, add_generation_prompt=True)
    assert rendered.count("<|im_start|>user\n") == 2 and rendered.count("<|im_start|>assistant\n") == 2
    assert rendered.endswith(f"{_question(first)} {INSTRUCTION}<|im_end|>\n<|im_start|>assistant\n")


@pytest.mark.parametrize("prompt_format, roles", [
    ("user_example", ["user"]), ("system_example", ["system", "user"]), ("plain", ["user"]),
])
def test_other_prompt_formats(prompt_format, roles):
    row = ladder_dataset(levels=["two_digit"], prompt_format=prompt_format)["test"][0]
    example = LEVELS["two_digit"].example
    assert [m["role"] for m in row["prompt"]] == roles
    text = "\n".join(m["content"] for m in row["prompt"])
    assert text.startswith(INSTRUCTION)
    shown = f"Problem: {example.question}\nSolution: {solution(example, 'terse')}"
    assert (shown in text) == (prompt_format != "plain")
    question = text.rsplit("Problem: ", 1)[1]
    assert row["prompt"][-1]["content"].endswith(question) and "=" not in question
    assert sorted(_numbers(question)) == sorted(_numbers(_canonical(row["problem_id"])[1]))


@pytest.mark.parametrize("problem, text", [
    (LadderProblem("one_digit", (3, 4), ("+",)), "Compute 3 + 4. Put the final answer in \\boxed{}."),
    (LadderProblem("one_digit", (56, 8), ("/",)), "Compute 56 ÷ 8. Put the final answer in \\boxed{}."),
    (LadderProblem("one_digit", (6, 7), ("*",)), "Compute 6 × 7. Put the final answer in \\boxed{}."),
    (LadderProblem("two_digit", (81, 27), ("-",)), "Compute 81 - 27. Put the final answer in \\boxed{}."),
    (LadderProblem("one_digit_two_ops", (5, 3, 4), ("+", "-")),
     "Compute 5 + 3 - 4. Put the final answer in \\boxed{}."),
    (LadderProblem("word", (12, 5), ("+",), WordSurface(1, "Mia", "She", "shells")),
     "There are 12 shells in a box. Mia puts 5 more shells in the box. How many shells are in the box now? Put the "
     "final answer in \\boxed{}."),
])
def test_neutral_prompt_is_one_user_turn_without_the_example_or_the_training_wording(problem, text):
    assert ladder_prompt(problem, "neutral") == [{"role": "user", "content": text}]
    training = "\n".join(m["content"] for m in ladder_prompt(problem, "chat_example"))
    assert INSTRUCTION in training and INSTRUCTION not in text and "What is" not in text
    assert text.endswith(NEUTRAL_INSTRUCTION) and LEVELS[problem.level].example.question not in text


def test_neutral_format_keeps_the_rows_their_order_and_answers():
    training = ladder_dataset(levels=["one_digit", "word"], prompt_format="chat_example")["test"]
    neutral = ladder_dataset(levels=["one_digit", "word"], prompt_format="neutral")["test"]
    for column in ("problem_id", "answer", "offline_completions", "level"):
        assert neutral[column] == training[column]
    assert neutral["prompt"] != training["prompt"] and all(len(p) == 1 for p in neutral["prompt"])


def test_word_problems_use_every_template_and_operator(ladder):
    questions = [(_canonical(r["problem_id"])[1], _question(r)) for r in _rows(ladder) if r["level"] == "word"]
    ops = Counter(re.sub(r"\d", "", expression) for expression, _ in questions)
    assert set(ops) == {"+", "-", "*", "/"}
    openings = {question.split(" ", 3)[1] for _, question in questions}  # "has", "are", "found", "shares", ...
    assert len(openings) >= 6


# --------------------------------------------------------------------------------------------------
# Teachers
# --------------------------------------------------------------------------------------------------

_EQUATION = re.compile(r"(\d+(?:\s*[-+×÷]\s*\d+)+)\s*=\s*(\d+)")


def test_teacher_solutions_state_only_true_equations_and_end_with_one_box(ladder):
    for row in _rows(ladder):
        assert row["offline_teachers"] == list(TEACHER_STYLES)
        assert len(set(row["offline_completions"])) == len(TEACHER_STYLES)
        for text in row["offline_completions"]:
            assert text.count("\\boxed{") == 1 and text.endswith(f"\\boxed{{{row['answer']}}}."), text
            equations = _EQUATION.findall(text)
            for lhs, rhs in equations:  # every check and step restates true values
                assert _evaluate(lhs.replace("×", "*").replace("÷", "/")) == int(rhs), (text, lhs, rhs)
            assert not re.search(r"\b(wait|or|maybe|actually|no)\b", text, re.IGNORECASE), text


def test_every_teacher_solution_scores_1_with_the_default_grader(ladder, smollm2_tokenizer):
    """Over every split, called as TRL calls the trainers' default reward (prompt, completion ids with EOS)."""
    from trl_explore.rewards.math_verify_reward import MathVerifyReward

    rows = [(row, text) for row in _rows(ladder) for text in row["offline_completions"]]
    ids = smollm2_tokenizer([text for _, text in rows], add_special_tokens=False)["input_ids"]
    scores = MathVerifyReward()(
        prompts=[row["prompt"] for row, _ in rows],
        completions=[[{"role": "assistant", "content": text}] for _, text in rows],
        completion_ids=[i + [smollm2_tokenizer.eos_token_id] for i in ids],
        answer=[row["answer"] for row, _ in rows],
        problem_id=[row["problem_id"] for row, _ in rows],
    )
    wrong = [text for (_, text), score in zip(rows, scores) if score != 1.0]
    assert not wrong, wrong[:5]


def test_teacher_solutions_fit_the_token_bound(ladder, smollm2_tokenizer):
    texts = [text for row in _rows(ladder) for text in row["offline_completions"]]
    lengths = [len(i) for i in smollm2_tokenizer(texts, add_special_tokens=False)["input_ids"]]
    assert max(lengths) <= MAX_SOLUTION_TOKENS


def test_max_length_drops_the_longer_solutions(smollm2_tokenizer):
    sizes = dict(levels=["two_digit_two_ops"], train_size=8, validation_size=0, test_size=0)
    full, cut = ladder_dataset(**sizes)["train"], ladder_dataset(**sizes, max_length=30)["train"]
    for a, b in zip(full, cut):
        lengths = [len(smollm2_tokenizer(t, add_special_tokens=False)["input_ids"]) for t in a["offline_completions"]]
        assert b["offline_completions"] == [t for t, n in zip(a["offline_completions"], lengths) if n <= 30]
        assert b["offline_teachers"] == [s for s, n in zip(a["offline_teachers"], lengths) if n <= 30]
    assert "terse" in cut[0]["offline_teachers"] and "check" not in cut[0]["offline_teachers"]


# --------------------------------------------------------------------------------------------------
# Layout and trainers
# --------------------------------------------------------------------------------------------------


def test_columns_and_features_are_the_champ_layout_plus_level(ladder):
    assert LADDER_COLUMNS[: len(OFFLINE_COLUMNS)] == OFFLINE_COLUMNS and LADDER_COLUMNS[-1] == "level"
    for split in SPLITS:
        assert tuple(ladder[split].column_names) == LADDER_COLUMNS
        assert ladder[split].features == ladder_features()
        for name, feature in offline_features().items():
            assert ladder[split].features[name] == feature


def test_load_split_by_name(ladder):
    assert load_split("ladder", "validation").to_list() == ladder["validation"].to_list()
    assert set(load_split("ladder", "train", levels=["word"])["level"]) == {"word"}
    with pytest.raises(KeyError, match="splits: \\['test', 'train', 'validation'\\]"):
        load_split("ladder", "dev")


def test_ladder_problems_gives_structured_problems_in_level_order():
    problems = ladder_problems(train_size=2, validation_size=1, test_size=1)
    assert [p.level for p in problems["train"]] == [name for name in LEVELS for _ in range(2)]
    for problem in problems["test"]:
        assert problem.answer == _evaluate(problem.canonical.removeprefix("word:"))


@pytest.mark.slow
def test_oger_trainer_takes_ladder_rows_and_trains_one_step(tmp_path, smollm2_tokenizer):
    """A tiny model, one OGER step on ladder rows: the construction-time row checks pass, the teacher row is a
    ladder solution graded 1."""
    import torch

    from trl_explore import OGERConfig, OGERTrainer
    from trl_explore.testing import make_tiny_causal_lm

    train = ladder_dataset(levels=["one_digit", "word"], train_size=4, validation_size=0, test_size=0,
                           max_length=23)["train"]  # solutions that fit 24 completion tokens with their EOS
    model = make_tiny_causal_lm(smollm2_tokenizer)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    args = OGERConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=24, max_steps=1, learning_rate=1e-3, logging_steps=1, report_to="none",
                      save_strategy="no", use_cpu=True, bf16=False, embedding_model="embedded", seed=0,
                      log_completions=True, num_completions_to_print=0)
    trainer = OGERTrainer(model, args=args, train_dataset=train, processing_class=smollm2_tokenizer)
    trainer.train()
    import pandas as pd

    table = pd.concat(pd.read_parquet(f) for f in sorted((tmp_path / "out" / "completions").glob("*.parquet")))
    offline = table[table["is_offline"]]
    assert len(offline) == 1 and offline["math_reward"].tolist() == [1.0]
    assert offline["teacher"].iloc[0] in TEACHER_STYLES
    assert any(not torch.equal(p.detach(), before[n]) for n, p in model.named_parameters())


def test_train_oger_script_loads_the_ladder_recipe_training_rows(load_script):
    """examples/train_oger.py's load_train_dataset on recipes/oger_smollm2_ladder_cpu.yaml: the recipe's level mix,
    every teacher solution kept (all fit max_completion_length - 1 tokens)."""
    import pathlib

    from trl import ModelConfig

    from trl_explore import OGERConfig
    from trl_explore.cli import parse_args
    from trl_explore.evaluation.heldout import HeldoutEvalArguments

    root = pathlib.Path(__file__).resolve().parent.parent
    script = load_script("examples/train_oger.py")
    recipe = root / "recipes" / "oger_smollm2_ladder_cpu.yaml"
    script_args, _, training_args, _ = parse_args((script.ScriptArguments, HeldoutEvalArguments, OGERConfig,
                                                   ModelConfig), recipe, ["--config", str(recipe)])
    from trl_explore.data.training_data import load_training_data

    rows = load_training_data(script_args, training_args.max_completion_length)
    assert set(rows["level"]) == set(script_args.ladder_levels)
    assert len(rows) == 100 * len(script_args.ladder_levels)
    assert all(teachers == list(TEACHER_STYLES) for teachers in rows["offline_teachers"])
