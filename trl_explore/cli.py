"""The command line the example scripts share: ``TrlParser`` with each method's options first, under its own heading,
and the script's default recipe when no ``--config`` is given.

``TrlParser`` (``HfArgumentParser``) puts every field of a training config in one list, TRL's and Transformers' ~200
options first; :func:`make_parser` moves the fields of each method's options class
(:class:`~trl_explore.config.ComponentOptions`, e.g. ``OGEROptions``) into an argument group of its own, titled by the
class's ``section``, and lists those groups before the rest. Parsing is unchanged: the fields stay fields of the same
config class.
"""

from __future__ import annotations

import dataclasses
import pathlib
import sys
from collections.abc import Sequence

from trl import GRPOConfig, TrlParser

from trl_explore.config import ExplorationConfig, options_classes


def make_parser(dataclass_types: Sequence[type], sections: Sequence[type] = ()) -> TrlParser:
    """A ``TrlParser`` over ``dataclass_types`` whose method options come first in ``--help``.

    Args:
        dataclass_types: as for ``TrlParser`` (script arguments, a training config, ``ModelConfig``, ...).
        sections: dataclasses to show first, each under its own heading (its ``section`` attribute, else its name),
            e.g. the script's arguments; then the options classes found among the training configs' bases
            (``OGERConfig`` -> ``OGEROptions``).

    Returns:
        The parser.
    """
    parser = TrlParser(tuple(dataclass_types), usage="%(prog)s [--config RECIPE.yaml] [--option value ...]")
    found = list(sections) + [cls for dtype in dataclass_types for cls in reversed(options_classes(dtype))]
    groups = []
    for section_cls in dict.fromkeys(found):  # keep the order, drop repeats
        names = {f.name for f in dataclasses.fields(section_cls)}
        group = parser.add_argument_group(getattr(section_cls, "section", section_cls.__name__))
        for action in list(parser._optionals._group_actions):  # argparse keeps the actions of a group in this list
            if action.dest in names:
                parser._optionals._group_actions.remove(action)
                group._group_actions.append(action)
        groups.append(group)
    shared = {f.name for f in dataclasses.fields(ExplorationConfig)} - {f.name for f in dataclasses.fields(GRPOConfig)}
    if any(isinstance(d, type) and issubclass(d, ExplorationConfig) for d in dataclass_types):
        group = parser.add_argument_group("Shared options (trl_explore.ExplorationConfig)")
        for action in list(parser._optionals._group_actions):
            if action.dest in shared:
                parser._optionals._group_actions.remove(action)
                group._group_actions.append(action)
        groups.append(group)
    parser._optionals.title = "TRL GRPOConfig, Transformers TrainingArguments and other options"
    rest = [g for g in parser._action_groups if g not in groups]
    parser._action_groups[:] = rest[:1] + groups + rest[1:]  # positionals, the methods' options, then the others
    return parser


def with_default_recipe(argv: Sequence[str], recipe: str | pathlib.Path) -> list[str]:
    """``argv`` with ``--config <recipe>`` in front unless it names a config (``--config x`` or ``--config=x``)."""
    argv = list(argv)
    if any(a == "--config" or a.startswith("--config=") for a in argv):
        return argv
    return ["--config", str(recipe), *argv]


def parse_args(dataclass_types: Sequence[type], recipe: str | pathlib.Path, argv: Sequence[str] | None = None,
               sections: Sequence[type] = ()):
    """Parse ``argv`` (default ``sys.argv[1:]``) into the dataclasses, the default ``recipe`` applying when no
    ``--config`` is given (options on the command line override the recipe's)."""
    parser = make_parser(dataclass_types, sections)
    argv = sys.argv[1:] if argv is None else argv
    if any(a in ("-h", "--help") for a in argv):
        parser.parse_args(["--help"])  # exits with the help text, before the recipe is read
    return parser.parse_args_and_config(args=with_default_recipe(argv, recipe))


def model_init_kwargs(model_args) -> dict:
    """``GRPOConfig.model_init_kwargs`` from TRL's ``ModelConfig`` (revision, attention implementation, dtype)."""
    import torch

    dtype = model_args.dtype if model_args.dtype in ("auto", None) else getattr(torch, model_args.dtype)
    return {"revision": model_args.model_revision, "attn_implementation": model_args.attn_implementation,
            "dtype": dtype}


def run_training(trainer_cls, config_cls, recipe, tag: str, script_cls=None, argv: Sequence[str] | None = None,
                 after_train=None):
    """What each training script does: parse (method options first in ``--help``; the default ``recipe`` without
    ``--config``), check Hub access, load the data, build ``trainer_cls``, train, save, write the card and print one
    readable summary.

    Args:
        trainer_cls, config_cls: the preset trainer and its config (``OGERTrainer``, ``OGERConfig``; ...).
        recipe: the YAML used when no ``--config`` is given.
        tag: the prefix of the summary lines (``[train_oger] ...``).
        script_cls: the script's data arguments (default :class:`~trl_explore.data.training_data.DataArguments`; a
            subclass may add options).
        argv: the arguments (default ``sys.argv[1:]``).
        after_train: ``after_train(trainer, script_args, dataset) -> lines`` printed with the summary.

    Returns:
        The trained trainer (its process group already ended).
    """
    import time

    from trl import ModelConfig, get_peft_config

    from trl_explore.data.gold_normalizers import gold_normalizer_for
    from trl_explore.data.training_data import DataArguments, load_training_data
    from trl_explore.evaluation.heldout import (
        HeldoutEvalArguments,
        HeldoutEvaluator,
        compare_heldout,
        heldout_table,
        save_heldout,
    )
    from trl_explore.hub import check_hub_access
    from trl_explore.reporting import filter_known_warnings, finish_run, silence_trl_completion_panel, use_compact_logs

    filter_known_warnings()
    script_cls = script_cls or DataArguments
    script_args, eval_args, training_args, model_args = parse_args(
        (script_cls, HeldoutEvalArguments, config_cls, ModelConfig), recipe, argv,
        sections=(script_cls, HeldoutEvalArguments))
    check_hub_access(training_args)  # with --push_to_hub: token and Hub checked before any data or model
    if getattr(training_args, "gold_normalizer", None) == "none":  # the data's phrasing rules for its golds (CHAMP)
        training_args.gold_normalizer = gold_normalizer_for(script_args.dataset_name)
    start = time.perf_counter()
    if not script_args.completion_panel:
        silence_trl_completion_panel()
    training_args.model_init_kwargs = model_init_kwargs(model_args)
    model_name = model_args.model_name_or_path or "embedded"
    tokenizer = None
    if script_args.max_prompt_tokens is not None:
        from transformers import AutoTokenizer

        from trl_explore.defaults import resolve_model_path

        tokenizer = AutoTokenizer.from_pretrained(resolve_model_path(model_name))
    offline = hasattr(training_args, "offline_completions_column")  # OGER's rows carry their teachers
    dataset = load_training_data(script_args, training_args.max_completion_length, offline=offline,
                                 tokenizer=tokenizer,
                                 offline_column=getattr(training_args, "offline_completions_column", ""))
    trainer = trainer_cls(model_name, args=training_args, train_dataset=dataset,
                          peft_config=get_peft_config(model_args))
    use_compact_logs(trainer)
    if trainer.accelerator.is_main_process and getattr(trainer, "precision_note", None):
        print(f"[{tag}] {trainer.precision_note}")  # the precision and why, once (trl_explore.precision)
    evaluator = None
    if eval_args.eval_heldout:  # the policy before training, on held-out problems (issue 23: "see it learn")
        evaluator = HeldoutEvaluator(trainer, eval_args, levels=getattr(script_args, "ladder_levels", None))
        before = evaluator("before")
        if before is not None:
            took = "read back from the cache (eval_cache)" if before.cached else f"{before.seconds:.0f} s"
            print(f"[{tag}] held-out evaluation before training ({took}):\n" + "\n".join(heldout_table(before)))
    resume = training_args.resume_from_checkpoint  # the command line gives a string: "true" means the newest one
    resume = True if isinstance(resume, str) and resume.lower() in ("true", "1", "yes") else resume
    trainer.train(resume_from_checkpoint=resume)
    lines = tuple(after_train(trainer, script_args, dataset)) if after_train is not None else ()
    if evaluator is not None:
        after = evaluator("after")  # every process takes part (the others wait for the main one)
        before = evaluator.results.get("before")
        if after is not None and before is not None:
            lines += (f"held-out evaluation before and after training ({after.seconds:.0f} s after):",
                      *heldout_table(before, after, compare_heldout(before, after)))
            save_heldout(training_args.output_dir, evaluator.results)
    finish_run(trainer, training_args.output_dir, script_args.dataset_name, tag,
               tuple(f"{c.name}/" for c in trainer.components), time.perf_counter() - start, lines=lines)
    trainer.accelerator.end_training()  # end the process group before exit (a ZeRO-3 run was seen to abort without it)
    return trainer
