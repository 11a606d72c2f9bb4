"""Errors a user reads in one line (issue 32): closed-set options checked when the config is built, the batch
geometry error naming its options and the recipe, no abbreviations on the command line, unknown options with the
closest names, and the scripts' one-line exit (``trl_explore.cli.user_errors``)."""

import os
import pathlib
import re
import subprocess
import sys
import warnings

import pytest
from trl import GRPOConfig, ModelConfig

from trl_explore import ASEConfig, OGERConfig
from trl_explore.cli import (
    EXIT_USER_ERROR,
    UnknownOptionError,
    closest_options,
    make_parser,
    parse_args,
    unknown_option_message,
    user_errors,
)
from trl_explore.data.training_data import DataArguments
from trl_explore.driver.config import TRL_CHOICES
from trl_explore.evaluation.heldout import HeldoutEvalArguments

ROOT = pathlib.Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "oger_smollm2_ladder_cpu.yaml"


def _config(cls=OGERConfig, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return cls(output_dir="unused", bf16=False, **kwargs)


@pytest.mark.parametrize("option, value, message", [
    ("loss_type", "dr-grpo", "loss_type='dr-grpo' is not a valid loss_type; valid: dapo, grpo, dr_grpo, bnpo, "
                             "cispo, sapo, luspo, vespo (did you mean 'dr_grpo'?)"),
    ("scale_rewards", "grup", "scale_rewards='grup' is not a valid scale_rewards; valid: group, batch, none "
                              "(did you mean 'group'?)"),
    ("importance_sampling_level", "seq", "importance_sampling_level='seq' is not a valid importance_sampling_level; "
                                         "valid: token, sequence"),
    ("multi_objective_aggregation", "sum", "valid: sum_then_normalize, normalize_then_sum"),
    ("vllm_importance_sampling_mode", "token", "valid: sequence_mask, token_mask, token_truncate, sequence_truncate"),
    ("grader_mode", "strictt", "grader_mode='strictt' is not a grader mode; valid: math_verify, trl, strict, boxed "
                               "(did you mean 'strict'?)"),
    ("gold_normalizer", "champs", "(did you mean 'champ'?)"),
    ("replacement_rule", "random_", "replacement_rule='random_' is not a replacement rule; valid: lowest_divergence, "
                                    "random (did you mean 'random'?)"),
])
def test_a_closed_set_option_is_checked_when_the_config_is_built(option, value, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        _config(**{option: value})


def test_the_ase_options_registries_are_checked_when_the_config_is_built():
    with pytest.raises(ValueError, match=re.escape("(did you mean 'reversed'?)")):
        _config(ASEConfig, bank_control="reverse", num_generations=8, per_device_train_batch_size=8)


def test_scale_rewards_true_and_false_spelled_on_the_command_line_are_trls_booleans():
    assert _config(scale_rewards="false").scale_rewards == "none"
    assert _config(scale_rewards="True").scale_rewards == "group"


def test_every_trl_choice_is_named_in_trls_own_help():
    """TRL_CHOICES is read from TRL 1.16's help texts; a renamed or dropped value shows here."""
    fields = GRPOConfig.__dataclass_fields__
    for option, names in TRL_CHOICES.items():
        help_text = fields[option].metadata["help"]
        for name in names:
            if isinstance(name, str) and name != "auto":  # vLLM's own 'auto' model implementation
                assert name in help_text, (option, name)


def test_the_batch_geometry_error_names_the_options_and_the_values_that_fit():
    with pytest.raises(ValueError) as error:
        _config(num_generations=5, per_device_train_batch_size=16)
    assert str(error.value) == (
        "the generation batch must hold whole groups of num_generations completions: generation_batch_size = "
        "per_device_train_batch_size (16) x processes (1) x steps_per_generation (1) = 16 is not a multiple of "
        "num_generations (5); set num_generations to one of [2, 4, 8, 16], or change per_device_train_batch_size / "
        "steps_per_generation (default: gradient_accumulation_steps) so that the product is a multiple of 5")


def _parse(argv, config=OGERConfig):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return parse_args((DataArguments, HeldoutEvalArguments, config, ModelConfig), RECIPE, argv,
                          sections=(DataArguments, HeldoutEvalArguments))


def test_the_batch_geometry_error_names_what_the_recipe_sets():
    recipe = RECIPE.relative_to(ROOT)
    with pytest.raises(ValueError) as error:
        _parse(["--num_generations", "5", "--output_dir", "unused"])
    assert str(error.value).endswith(
        f"[set in the recipe {ROOT / recipe}: per_device_train_batch_size: 16; an option on the command line "
        f"overrides the recipe]")


@pytest.mark.parametrize("argv, message", [
    (["--max_step", "1"], "unknown option --max_step (did you mean --max_steps or --save_steps or --max_pass_rate?)"),
    (["--learning_rat", "1e-5"], "unknown option --learning_rat (did you mean --learning_rate?)"),
    (["--num_replacement", "2"],
     "unknown option --num_replacement (did you mean --num_replacements or --replacement_rule?)"),
    (["--zzz_qqq", "1"], "unknown option --zzz_qqq (--help lists them)"),
])
def test_abbreviations_are_refused_and_unknown_options_get_the_closest_names(argv, message):
    with pytest.raises(UnknownOptionError, match=re.escape(message)):
        _parse(argv)


def test_full_option_names_still_parse():
    _, _, config, _ = _parse(["--max_steps", "3", "--learning_rate", "2e-5"])
    assert (config.max_steps, config.learning_rate) == (3, 2e-5)


def test_an_unknown_recipe_key_names_the_closest_option(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("output_dir: o\nbf16: false\nnum_generation: 4\n")
    with pytest.raises(UnknownOptionError, match=re.escape(
            f"the recipe {recipe}: unknown key 'num_generation' (did you mean num_generations or "
            f"num_generations_eval")):
        _parse(["--config", str(recipe)])


def test_closest_options_and_message_on_hand_made_names():
    assert closest_options("lr_rate", ["learning_rate", "lr_scheduler_type", "seed"]) == ["learning_rate"]
    assert closest_options("xyz", ["learning_rate", "seed"]) == []
    assert closest_options("sed", ["learning_rate", "seed"]) == ["seed"]
    assert unknown_option_message(["sed", "xyz"], ["seed"]) == "unknown option --sed (did you mean --seed?); " \
                                                              "unknown option --xyz"


def test_a_bad_value_for_a_choice_is_one_line(capsys):
    parser = make_parser((DataArguments, OGERConfig, ModelConfig))
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args_into_dataclasses(["--output_dir", "o", "--replacement_rule", "foo"])
    assert exit_.value.code == EXIT_USER_ERROR
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "invalid choice: 'foo'" in err and err.endswith("(--help lists the options)")


def test_user_errors_print_one_line_and_exit_2(capsys, monkeypatch):
    monkeypatch.delenv("RANK", raising=False)
    with pytest.raises(SystemExit) as exit_:
        with user_errors("t"):
            raise KeyError("no component 'x'\nsecond line")
    assert exit_.value.code == EXIT_USER_ERROR
    assert capsys.readouterr().err == ("[t] error: no component 'x' second line (--debug or TRL_EXPLORE_DEBUG=1 "
                                       "shows the traceback)\n")
    with pytest.raises(KeyError):  # --debug: the exception itself
        with user_errors("t", debug=True):
            raise KeyError("x")
    with pytest.raises(ZeroDivisionError):  # not a user error: untouched
        with user_errors("t"):
            raise ZeroDivisionError


def test_a_user_error_on_another_rank_is_not_printed(capsys, monkeypatch):
    monkeypatch.setenv("RANK", "1")
    with pytest.raises(SystemExit):
        with user_errors("t"):
            raise ValueError("x")
    assert capsys.readouterr().err == ""


def _script(*argv, env=None):
    env = {**os.environ, "TRL_EXPLORE_TINY_POLICY": "1", "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1", **(env or {})}
    return subprocess.run([sys.executable, str(ROOT / "examples" / "train_oger.py"), *argv], capture_output=True,
                          text=True, env=env, cwd=ROOT, timeout=600)


@pytest.mark.slow
def test_the_training_script_stops_with_one_line_and_no_traceback():
    result = _script("--loss_type", "dr-grpo", "--output_dir", "unused")
    lines = [line for line in result.stderr.splitlines() if "Warning" not in line and "warnings.warn" not in line]
    assert result.returncode == EXIT_USER_ERROR
    assert lines == ["[train_oger] error: loss_type='dr-grpo' is not a valid loss_type; valid: dapo, grpo, dr_grpo, "
                     "bnpo, cispo, sapo, luspo, vespo (did you mean 'dr_grpo'?) (--debug or TRL_EXPLORE_DEBUG=1 "
                     "shows the traceback)"]
    debug = _script("--max_step", "1", "--debug")
    assert debug.returncode != 0 and "Traceback (most recent call last)" in debug.stderr
    assert "UnknownOptionError: unknown option --max_step" in debug.stderr


@pytest.mark.slow
def test_the_evaluation_script_stops_with_one_line():
    result = subprocess.run([sys.executable, str(ROOT / "examples" / "evaluate.py"), "--num_sample", "2"],
                            capture_output=True, text=True, cwd=ROOT, timeout=600,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert result.returncode == EXIT_USER_ERROR
    assert result.stderr.strip().splitlines()[-1] == (
        "[evaluate] error: unknown option --num_sample (did you mean --num_samples?) (--help lists them) (--debug or "
        "TRL_EXPLORE_DEBUG=1 shows the traceback)")


def _help(argv, full=False):
    from trl_explore.cli import help_text, script_dataclasses

    parser = make_parser(*script_dataclasses(DataArguments, OGERConfig))
    return help_text(parser, argv, RECIPE, full=full)


def test_short_help_names_the_recipe_and_shows_its_values():
    text = _help([])
    assert text.startswith(f"Recipe: {RECIPE} (the defaults shown are its values")
    assert "--adam_beta1" not in text and "--dataloader_num_workers" not in text  # behind --help_all
    assert "--learning_rate" in text and "--eval_fraction" in text and "--readiness_check" in text
    compact = " ".join(text.split())
    assert "--eval_heldout [EVAL_HELDOUT] Before and after training" in compact
    eval_heldout = compact.split("--eval_heldout [EVAL_HELDOUT]")[1].split("--eval_benchmark")[0]
    assert eval_heldout.rstrip().endswith("(default: True)")  # the recipe's value, not the dataclass's False
    embedder = compact.split("--embedding_model EMBEDDING_MODEL")[1].split("--embedding_batch_size")[0]
    assert embedder.rstrip().endswith("(default: embedded)")
    assert "--max-steps" not in text  # no dash-spelled aliases
    assert len(text.splitlines()) < len(_help([], full=True).splitlines()) / 3


def test_full_help_lists_every_option_and_another_recipe_applies(tmp_path):
    recipe = tmp_path / "r.yaml"
    recipe.write_text("output_dir: o\nnum_generations: 8\n")
    text = _help(["--config", str(recipe)], full=True)
    assert text.startswith(f"Recipe: {recipe}") and "--adam_beta1" in text
    generations = " ".join(text.split()).split("--num-generations NUM_GENERATIONS")[1].split(" --")[0]
    assert "(default: 8)" in generations


@pytest.mark.parametrize("script", ["train_oger", "train_ase_grpo", "train_exgrpo", "train_oger_ase", "train_sft"])
def test_short_help_fits_300_lines_cuts_no_sentence_and_gives_no_x_one_line(script):
    """Issue 46: `--help` was 337 lines, cut `--entropy_coef`'s help mid-sentence ("OGER App") and repeated each
    `--X` description under its `--no_X`."""
    result = subprocess.run([sys.executable, str(ROOT / "examples" / f"{script}.py"), "--help"], capture_output=True,
                            text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "80"})
    lines = result.stdout.splitlines()
    assert result.returncode == 0 and len(lines) <= 300, len(lines)
    text = " ".join(result.stdout.split())
    no_x = re.findall(r"--no_(\w+)", text)
    assert no_x and all(f"--no_{name} same as --{name} false" in text for name in no_x)  # no repeated description
    if script in ("train_oger", "train_oger_ase"):
        assert "--entropy_coef=0.01" in result.stdout  # listed with its value; its help in --help_all, whole
    assert "(OGER App (" not in result.stdout


def test_first_sentence_keeps_abbreviations_whole():
    from trl_explore.cli import first_sentence

    assert first_sentence("Entropy bonus coefficient (OGER App. B: 0.01).") == ("Entropy bonus coefficient (OGER "
                                                                                "App. B: 0.01)")
    assert first_sentence("Use e.g. 4. Then more.") == "Use e.g. 4"
    assert first_sentence("One. Two.") == "One"
    assert first_sentence("Ask (as in 'Compute 3 + 4. Put it.') twice. Then.") == "Ask (as in 'Compute 3 + 4. Put " \
                                                                             "it.') twice"
