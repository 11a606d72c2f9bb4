"""The command line the example scripts share: ``TrlParser`` with each method's options first, under its own heading,
and the script's default recipe when no ``--config`` is given.

``TrlParser`` (``HfArgumentParser``) puts every field of a training config in one list, TRL's and Transformers' ~200
options first; :func:`make_parser` moves the fields of each method's options class
(:class:`~trl_explore.driver.config.ComponentOptions`, e.g. ``OGEROptions``) into an argument group of its own, titled
by the class's ``section``, and lists those groups before the rest. Parsing is unchanged: the fields stay fields of
the same config class.

User errors (:func:`user_errors`): a bad option, data set, Hub access or batch geometry stops a script with one line
``[script] error: ...`` on stderr and exit status 2, no traceback; ``--debug`` (or ``TRL_EXPLORE_DEBUG=1``) shows the
traceback. Abbreviated options are refused (``--max_step`` is not ``--max_steps``) and an unknown option or recipe
key names the closest valid ones (:class:`ScriptParser`).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import difflib
import os
import pathlib
import sys
from collections.abc import Sequence

from trl import GRPOConfig, TrlParser

from trl_explore.driver.config import ExplorationConfig, options_classes

DEBUG_ENV = "TRL_EXPLORE_DEBUG"
"""Environment variable: set to 1 to see the traceback of a user error (as ``--debug``)."""
EXIT_USER_ERROR = 2
"""Exit status of a script stopped by a user error (argparse's for a bad command line)."""


class UnknownOptionError(ValueError):
    """An option on the command line, or a key of a recipe, that no dataclass of the script declares."""


def closest_options(name: str, valid: Sequence[str], n: int = 3) -> list[str]:
    """Up to ``n`` names of ``valid`` closest to ``name`` (difflib's ratio >= 0.6), best first."""
    return difflib.get_close_matches(name, list(valid), n=n, cutoff=0.6)


def unknown_option_message(names: Sequence[str], valid: Sequence[str], where: str = "option") -> str:
    """``"unknown option --max_stepz (did you mean --max_steps?)"`` for each of ``names`` (without their ``--``),
    joined by "; "."""
    parts = []
    for name in names:
        close = closest_options(name, valid)
        hint = f" (did you mean {' or '.join('--' + c if where == 'option' else c for c in close)}?)" if close else ""
        parts.append(f"unknown {where} {'--' + name if where == 'option' else repr(name)}{hint}")
    return "; ".join(parts)


class ScriptParser(TrlParser):
    """The scripts' ``TrlParser``: no abbreviations (``allow_abbrev=False``); an unknown option raises
    :class:`UnknownOptionError` naming the closest valid ones; argparse's own errors (a bad value, a missing value)
    print one line instead of the usage and the error."""

    def __init__(self, dataclass_types, **kwargs):
        super().__init__(dataclass_types, allow_abbrev=False, **kwargs)

    def option_names(self) -> list[str]:
        """Every ``--name`` the parser accepts, without the dashes."""
        return [s[2:] for s in self._option_string_actions if s.startswith("--") and "-" not in s[2:]]

    def parse_known_args(self, args=None, namespace=None):
        # Overrides argparse.ArgumentParser.parse_known_args, which HfArgumentParser.parse_args_into_dataclasses calls:
        # left-over strings become one error naming the closest options, before any dataclass is built.
        namespace, remaining = super().parse_known_args(args, namespace)
        if remaining:
            names = [r[2:].split("=", 1)[0] for r in remaining if r.startswith("--")]
            if not names:
                raise UnknownOptionError(f"unexpected argument(s) {remaining}: every value follows its --option")
            raise UnknownOptionError(unknown_option_message(names, self.option_names()) + " (--help lists them)")
        return namespace, remaining

    def error(self, message):
        # Overrides argparse.ArgumentParser.error (usage + message, exit 2): one line.
        print(f"{self.prog}: error: {message} (--help lists the options)", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


def take_debug_flag(argv: Sequence[str]) -> tuple[list[str], bool]:
    """``argv`` without ``--debug``, and whether a traceback is wanted (``--debug`` or ``TRL_EXPLORE_DEBUG=1``)."""
    argv = list(argv)
    debug = "--debug" in argv or os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes")
    return [a for a in argv if a != "--debug"], debug


def user_error_types() -> tuple[type[Exception], ...]:
    """The exceptions :func:`user_errors` prints as one line: bad values and options (ValueError, TypeError,
    KeyError), missing files, unsupported settings, Hub access, an output folder another run holds."""
    from trl_explore.checkpoints.records import OutputDirInUse
    from trl_explore.hub import HubAccessError

    return ValueError, TypeError, KeyError, FileNotFoundError, NotImplementedError, HubAccessError, OutputDirInUse


def one_line(error: BaseException) -> str:
    """The message of ``error`` on one line (a KeyError's without its quotes)."""
    text = str(error.args[0]) if isinstance(error, KeyError) and error.args else str(error)
    return " ".join(text.split()) or type(error).__name__


@contextlib.contextmanager
def user_errors(tag: str, debug: bool = False):
    """Inside: a user error (:func:`user_error_types`) prints ``[tag] error: <message>`` on one line to stderr (on the
    main process only: ``RANK`` unset or 0) and exits with :data:`EXIT_USER_ERROR`, no traceback; with ``debug`` it
    propagates (traceback). ``os._exit`` is not used: the process exits normally (buffers flushed).

    Under ``accelerate launch`` the launcher then raises its own ``CalledProcessError`` for any non-zero exit (a
    traceback of the launcher, after the script's line); ``accelerate launch -q`` (single process and DeepSpeed
    launches) replaces it with a plain exit status 1.
    """
    try:
        yield
    except user_error_types() as error:
        if debug:
            raise
        if os.environ.get("RANK", "0") == "0":
            print(f"[{tag}] error: {one_line(error)} (--debug or {DEBUG_ENV}=1 shows the traceback)", file=sys.stderr,
                  flush=True)
        sys.exit(EXIT_USER_ERROR)


def run_script(main, dataclass_type: type, tag: str, argv: Sequence[str] | None = None):
    """What a script without a recipe does (``evaluate.py``, ``build_offline_dataset.py``, ``plot.py``): parse
    ``argv`` (default ``sys.argv[1:]``; ``--config`` a YAML of options) into ``dataclass_type`` with
    :class:`ScriptParser` and return ``main(args)``, user errors as one line (:func:`user_errors`; ``--debug`` shows
    the traceback)."""
    argv, debug = take_debug_flag(sys.argv[1:] if argv is None else argv)
    with user_errors(tag, debug):
        (args,) = ScriptParser((dataclass_type,)).parse_args_and_config(args=argv)
        return main(args)


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
    parser = ScriptParser(tuple(dataclass_types), usage="%(prog)s [--config RECIPE.yaml] [--option value ...]")
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
    for action in parser._actions:  # HfArgumentParser's --no_X repeats --X's help: one line instead
        negated = [o for o in action.option_strings if o == f"--no_{action.dest}"]
        if negated:
            action.help = f"same as --{action.dest} false%(default).0s"  # %(default).0s: no "(default: ...)" added
        elif action.help and "(default: " in action.help:  # a help that says what an unset value means: one default
            action.help = action.help.replace("(default: ", "(if unset: ")
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
    if any(a in HELP_FLAGS for a in argv):  # the help text with the recipe's values, then exit
        print(help_text(parser, [a for a in argv if a not in HELP_FLAGS], recipe, full="--help_all" in argv))
        sys.exit(0)
    argv = with_default_recipe(argv, recipe)
    argv = [part for a in argv for part in (a.split("=", 1) if a.startswith("--config=") else [a])]  # TRL: "--config"
    recipe_path, recipe_values = read_recipe(argv, parser)
    try:
        return parser.parse_args_and_config(args=argv)
    except UnknownOptionError:
        raise
    except ValueError as error:  # a config check: say which of the options it names the recipe sets
        given = {a[2:].split("=", 1)[0].replace("-", "_") for a in argv if a.startswith("--")}
        named = [f"{key}: {value}" for key, value in recipe_values.items()
                 if key != "env" and key not in given and _names(str(error), key)]
        if not named:
            raise
        raise type(error)(f"{error} [set in the recipe {recipe_path}: {', '.join(named)}; an option on the command "
                          f"line overrides the recipe]") from error


HELP_FLAGS = ("-h", "--help", "--help_all")
COMMON_OPTIONS = (
    "model_name_or_path", "output_dir", "max_steps", "num_train_epochs", "learning_rate", "num_generations",
    "per_device_train_batch_size", "gradient_accumulation_steps", "max_completion_length", "temperature", "beta",
    "loss_type", "scale_rewards", "eval_strategy", "eval_steps", "logging_steps", "save_strategy", "seed", "bf16",
    "use_vllm", "push_to_hub", "resume_from_checkpoint", "report_to",
)
"""TRL / Transformers options the short ``--help`` lists (with every option the recipe sets)."""


def help_text(parser: ScriptParser, argv: Sequence[str], recipe, full: bool = False) -> str:
    """The scripts' ``--help``: the recipe it applies (``--config`` in ``argv``, else ``recipe``), its values as the
    defaults shown, the scripts' and methods' options, and of TRL's and Transformers' ~200 options only
    :data:`COMMON_OPTIONS` and those the recipe sets; ``full``: every option (``--help_all``)."""
    argv = [part for a in with_default_recipe(argv, recipe)
            for part in (a.split("=", 1) if a.startswith("--config=") else [a])]
    path, values = read_recipe(argv, parser)
    parser.set_defaults_with_config(**{k: v for k, v in values.items() if k != "env"})
    head = (f"Recipe: {path} (the defaults shown are its values; --config RECIPE.yaml applies another, an option on "
            f"the command line overrides it). --debug: the traceback of an error, which is otherwise one line.")
    trl_group = parser._optionals
    if full:
        return head + "\n\n" + parser.format_help()
    keep = set(COMMON_OPTIONS) | set(values) | package_fields(parser.dataclass_types)
    hidden = [a for a in trl_group._group_actions if a.dest not in keep and a.dest != "help"]
    trl_group._group_actions[:] = [a for a in trl_group._group_actions if a not in hidden]
    for action in parser._actions:  # short: no --dash-spelled aliases; each help text's first sentence, whole
        action.option_strings = [o for o in action.option_strings if not (o.startswith("--") and "-" in o[2:])]
        if action.help and action.help is not argparse.SUPPRESS:  # the whole text: --help_all
            action.help = first_sentence(action.help)
    for action in parser._actions:  # "(if unset: ...)" already says what None means: no "(default: None)" after it
        if action.help and "(if unset: " in action.help and action.default is None:
            action.help += "%(default).0s"
    listed = [a for a in trl_group._group_actions if a.dest != "help"]  # one compact paragraph: name and value
    trl_group.description = " ".join(f"{a.option_strings[0]}={a.default}" for a in listed
                                     if a.option_strings and not a.option_strings[0].startswith("--no_"))
    trl_group._group_actions[:] = [a for a in trl_group._group_actions if a.dest == "help"]
    trl_group.title = (f"Common TRL / Transformers options and those the recipe sets, with their values (these "
                       f"{len(listed)} with their help, and {len(hidden)} more: --help_all)")
    return head + "\n\n" + parser.format_help()


_ABBREVIATIONS = ("App", "Eq", "Eqs", "Sec", "Fig", "Tab", "e.g", "i.e", "vs", "etc", "cf", "approx", "resp", "No")


def first_sentence(text: str) -> str:
    """The first sentence of a help text, whole (never cut mid-sentence): up to the first ". " that follows no
    abbreviation (``App.``, ``e.g.``, ``Eq.``, ...; :data:`_ABBREVIATIONS`) nor a single letter and is inside no
    brackets, without its final full stop."""
    import re

    for match in re.finditer(r"\.\s+(?=\S)", text):
        word = re.search(r"([\w.]+)$", text[:match.start()])
        word = word.group(1) if word else ""
        head = text[:match.start()]
        if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()) or (len(word) == 3 and word[1] == "."):
            continue
        if head.count("(") > head.count(")") or head.count("[") > head.count("]"):  # inside brackets
            continue
        return text[:match.start()]
    return text.rstrip().rstrip(".")


def package_fields(dataclass_types) -> set[str]:
    """The option names that classes of this package declare (e.g. ``grader_mode`` of ``ExplorationConfig``,
    ``teachers_per_prompt`` of the SFT baseline's config), as opposed to those inherited from TRL or Transformers."""
    names = set()
    for dataclass_type in dataclass_types:
        for cls in dataclass_type.__mro__:
            if cls.__module__.startswith("trl_explore"):
                names.update(vars(cls).get("__annotations__", {}))
    return names


def _names(message: str, key: str) -> bool:
    import re

    return re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message) is not None


def read_recipe(argv: Sequence[str], parser: ScriptParser) -> tuple[str | None, dict]:
    """The recipe ``argv`` names (``--config PATH`` or ``--config=PATH``) and its values, checked against the
    parser's options.

    Raises:
        FileNotFoundError: no such recipe file.
        UnknownOptionError: a key no option has, with the closest option names.
    """
    import yaml

    path = None
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            path = argv[i + 1]
        elif arg.startswith("--config="):
            path = arg.split("=", 1)[1]
    if path is None:
        return None, {}
    if not pathlib.Path(path).is_file():
        raise FileNotFoundError(f"no recipe file {path} (--config)")
    with open(path) as handle:
        values = yaml.safe_load(handle) or {}
    if not isinstance(values, dict):
        raise ValueError(f"the recipe {path} must be a YAML mapping of option: value")
    valid = {action.dest for action in parser._actions}
    unknown = [key for key in values if key != "env" and key not in valid]
    if unknown:
        raise UnknownOptionError(f"the recipe {path}: " + unknown_option_message(unknown, sorted(valid), "key"))
    return path, values


def model_init_kwargs(model_args) -> dict:
    """``GRPOConfig.model_init_kwargs`` from TRL's ``ModelConfig`` (revision, attention implementation, dtype)."""
    import torch

    dtype = model_args.dtype if model_args.dtype in ("auto", None) else getattr(torch, model_args.dtype)
    return {"revision": model_args.model_revision, "attn_implementation": model_args.attn_implementation,
            "dtype": dtype}


def script_dataclasses(script_cls: type, config_cls: type, readiness: bool = True
                       ) -> tuple[tuple[type, ...], tuple[type, ...]]:
    """The dataclasses a training script parses, in order (its data options, the held-out evaluation, the readiness
    check unless ``readiness`` is False, the method's config, TRL's ``ModelConfig``), and those shown first in
    ``--help``."""
    from trl import ModelConfig

    from trl_explore.evaluation.heldout import HeldoutEvalArguments
    from trl_explore.readiness import ReadinessArguments

    sections = (script_cls, HeldoutEvalArguments, *((ReadinessArguments,) if readiness else ()))
    return (*sections, config_cls, ModelConfig), sections


def run_training(trainer_cls, config_cls, recipe, tag: str, script_cls=None, argv: Sequence[str] | None = None,
                 after_train=None):
    """What each GRPO training script does (:func:`run_recipe`, with the readiness check): ``trainer_cls`` built on
    the training rows, your own held-out rows (if any) as TRL's ``eval_dataset`` when ``eval_strategy`` is not
    ``"no"``; the summary shows the last value of each component's metrics (``oger/...``).

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

    def build(model_name, training_args, model_args, dataset, own_eval):
        from trl import get_peft_config

        eval_dataset = None
        if own_eval is not None and training_args.eval_strategy != "no":  # TRL's evaluation loop: eval_reward
            offline = hasattr(training_args, "offline_completions_column")  # OGER's rows carry their teachers
            eval_dataset = own_eval if offline else own_eval.select_columns(["prompt", "answer", "problem_id"])
        trainer = trainer_cls(model_name, args=training_args, train_dataset=dataset, eval_dataset=eval_dataset,
                              peft_config=get_peft_config(model_args))
        return trainer, ()

    return run_recipe(config_cls, recipe, tag, build, lambda trainer: tuple(f"{c.name}/" for c in trainer.components),
                      script_cls=script_cls, argv=argv, after_train=after_train)


def remove_empty_output(output_dir: str, existed: bool) -> None:
    """After a run that trained nothing: remove the empty ``completions/`` folder TRL's trainer creates when built,
    and ``output_dir`` itself when this run created it and it is left empty (nothing saved means nothing left)."""
    folder = pathlib.Path(output_dir)
    with contextlib.suppress(OSError):
        (folder / "completions").rmdir()  # only when empty
    if not existed:
        with contextlib.suppress(OSError):
            folder.rmdir()


def eval_source_note(dataset_name: str, has_own_eval: bool, eval_args, trl_eval: bool) -> str | None:
    """One line saying where the evaluation of a run on your own data comes from when the data has no evaluation
    split (issue 46: it used to be the built-in arithmetic set, in silence); None for the embedded sets or when your
    own held-out problems are evaluated.

    Args:
        dataset_name: ``--dataset_name``.
        has_own_eval: whether ``--eval_fraction`` / ``--eval_dataset_split`` / ``--eval_dataset_name`` gave held-out
            problems of yours.
        eval_args: :class:`~trl_explore.evaluation.heldout.HeldoutEvalArguments` (``eval_heldout``,
            ``eval_benchmark``, ``eval_split``).
        trl_eval: whether TRL's evaluation loop is on (``eval_strategy`` not ``"no"``).
    """
    if dataset_name in ("ladder", "champ") or has_own_eval:
        return None
    fix = "--eval_fraction 0.1 holds out 10% of your problems instead"
    if eval_args.eval_heldout:
        return (f"your data has no evaluation split: the held-out evaluation runs on the built-in "
                f"{eval_args.eval_benchmark} set's {eval_args.eval_split} split, not on your problems ({fix}; "
                f"--eval_heldout false evaluates nothing)")
    if trl_eval:
        return f"your data has no evaluation split: TRL's evaluation loop has nothing to evaluate ({fix})"
    return f"your data has no evaluation split: nothing is evaluated ({fix})"


def run_recipe(config_cls, recipe, tag: str, build_trainer, metric_prefixes, script_cls=None,
               argv: Sequence[str] | None = None, after_train=None, rollouts: bool = True):
    """The run every training script shares (GRPO's :func:`run_training`, the SFT baseline's
    :func:`trl_explore.sft.run_sft`): parse (method options first in ``--help``; the default ``recipe`` without
    ``--config``; ``--debug``: tracebacks of user errors, which are otherwise one line, :func:`user_errors`), check Hub
    access, load the data and split off your own held-out problems (``--eval_fraction``, ``--eval_dataset_split``,
    ``--eval_dataset_name``: :mod:`trl_explore.evaluation.own_data`), build the trainer, run the readiness check
    (:mod:`trl_explore.readiness`; its watch warns during training), evaluate on held-out problems, train, evaluate
    again, save, write the card and print one readable summary.

    Args:
        config_cls: the training config (``OGERConfig``, ``SFTBaselineConfig``, ...).
        recipe: the YAML used when no ``--config`` is given.
        tag: the prefix of the summary lines (``[train_oger] ...``).
        build_trainer: ``build_trainer(model_name, training_args, model_args, dataset, own_eval) -> (trainer,
            lines)``: ``model_name`` as given (``"embedded"`` by default), ``dataset`` the training rows (prompt,
            answer, problem_id, and the offline columns when the config has ``offline_completions_column``),
            ``own_eval`` your own held-out rows or None; ``lines`` are printed with the summary.
        metric_prefixes: ``metric_prefixes(trainer) -> tuple`` of the logged metrics the summary shows.
        script_cls: the script's data arguments (default :class:`~trl_explore.data.training_data.DataArguments`).
        argv: the arguments (default ``sys.argv[1:]``).
        after_train: ``after_train(trainer, script_args, dataset) -> lines`` printed with the summary.
        rollouts: whether the run trains on graded samples of the policy (GRPO): parse
            :class:`~trl_explore.readiness.ReadinessArguments`, run the readiness check and the "nothing is learned"
            watch; refuse training rows without a gold answer. False for SFT, whose loss on given solutions needs
            none of these.

    Returns:
        The trained trainer (its process group already ended).
    """
    # the run's hold on output_dir (trl_explore.checkpoints.disk.run_output_lock) is let go on every way out, a user
    # error's exit included
    with contextlib.ExitStack() as run_stack:
        return _run_recipe(config_cls, recipe, tag, build_trainer, metric_prefixes, script_cls, argv, after_train,
                           rollouts, run_stack)


def _run_recipe(config_cls, recipe, tag: str, build_trainer, metric_prefixes, script_cls, argv, after_train,
                rollouts: bool, run_stack: contextlib.ExitStack):
    """:func:`run_recipe`'s body; ``run_stack`` holds what the run keeps until it ends (``output_dir``'s lock)."""
    import time

    from trl_explore.checkpoints.disk import run_output_lock
    from trl_explore.data.gold_normalizers import gold_normalizer_for
    from trl_explore.data.training_data import DataArguments, load_training_data
    from trl_explore.evaluation.heldout import save_heldout
    from trl_explore.evaluation.heldout_evaluator import HeldoutEvaluator
    from trl_explore.evaluation.own_data import save_heldout_problems, training_and_eval_data
    from trl_explore.hub import check_hub_access
    from trl_explore.readiness import NothingLearnedWatch, check_readiness
    from trl_explore.reporting import (
        PhaseClock,
        filter_known_warnings,
        finish_run,
        silence_trl_completion_panel,
        use_compact_logs,
    )

    filter_known_warnings()
    argv, debug = take_debug_flag(sys.argv[1:] if argv is None else argv)
    with user_errors(tag, debug):  # before training: a bad option, data set, Hub access or geometry is one line
        script_cls = script_cls or DataArguments
        types, sections = script_dataclasses(script_cls, config_cls, rollouts)
        parsed = parse_args(types, recipe, argv, sections)
        script_args, eval_args, training_args, model_args = parsed[0], parsed[1], parsed[-2], parsed[-1]
        ready_args = parsed[2] if rollouts else None
        readiness_only = bool(ready_args is not None and ready_args.readiness_only)
        no_training = readiness_only or training_args.max_steps == 0  # nothing trained, nothing saved
        existed = pathlib.Path(training_args.output_dir).exists()
        # a busy output folder: refused before any model loads, nothing written; a run that trains holds the folder
        # from here on, so a second run started while this one checks readiness or evaluates is refused at once
        if os.environ.get("RANK", "0") == "0":
            run_stack.enter_context(run_output_lock(training_args.output_dir, take=not no_training))
        check_hub_access(training_args)  # with --push_to_hub: token and Hub checked before any data or model
        if getattr(training_args, "gold_normalizer", None) == "none":  # the data's phrasing rules for golds (CHAMP)
            training_args.gold_normalizer = gold_normalizer_for(script_args.dataset_name)
        start, clock = time.perf_counter(), PhaseClock()  # the clock: where the time went, printed at the end
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
                                     offline_column=getattr(training_args, "offline_completions_column", ""),
                                     require_answer=rollouts,  # SFT grades nothing while training: no gold needed
                                     teacher_use="OGER" if rollouts else "SFT",
                                     gold_normalizer=getattr(training_args, "gold_normalizer", "none") or "none",
                                     grader_mode=getattr(training_args, "grader_mode", "math_verify"))
        dataset, own_eval = training_and_eval_data(script_args, dataset, seed=training_args.seed)  # your own held-out
        trainer, lines = build_trainer(model_name, training_args, model_args, dataset, own_eval)
        if own_eval is not None and trainer.accelerator.is_main_process:  # saved for examples/evaluate.py
            if no_training:
                print(f"[{tag}] your own evaluation set: {len(own_eval)} held-out problems ({len(dataset)} to train "
                      f"on; not saved: this run trains nothing)", flush=True)
            else:
                path = save_heldout_problems(own_eval, training_args.output_dir)
                print(f"[{tag}] your own evaluation set: {len(own_eval)} held-out problems ({len(dataset)} to train "
                      f"on), saved to {path} (evaluate a checkpoint on them: python examples/evaluate.py "
                      f"--model_name_or_path {training_args.output_dir} --dataset_name {path})", flush=True)
        use_compact_logs(trainer)
        if trainer.accelerator.is_main_process and getattr(trainer, "precision_note", None):
            print(f"[{tag}] {trainer.precision_note}")  # the precision and why, once (trl_explore.precision)
        if rollouts:
            trainer.add_callback(NothingLearnedWatch(ready_args.readiness_patience))  # one warning if nothing learned
        if rollouts and (ready_args.readiness_check or readiness_only):  # can this run learn? (issues 32, 46)
            if trainer.accelerator.is_main_process:
                print(f"[{tag}] readiness check: sampling {min(ready_args.readiness_prompts, len(dataset))} training "
                      f"prompts x {trainer.num_generations} (--readiness_check false skips it) ...", flush=True)
            with clock("readiness check"):
                report = check_readiness(trainer, dataset, ready_args.readiness_prompts)
            if trainer.accelerator.is_main_process:
                print("\n".join(f"[{tag}] {line}" for line in report.lines), flush=True)
        if readiness_only:
            if trainer.accelerator.is_main_process:
                print(f"[{tag}] --readiness_only: stopped after the check; nothing trained, nothing saved", flush=True)
                remove_empty_output(training_args.output_dir, existed)
            trainer.accelerator.end_training()
            return trainer
        note = eval_source_note(script_args.dataset_name, own_eval is not None, eval_args,
                                training_args.eval_strategy != "no")
        if note and trainer.accelerator.is_main_process:
            print(f"[{tag}] {note}", flush=True)
        evaluator = None
        if eval_args.eval_heldout:  # the policy before training, on held-out problems (issue 23: "see it learn")
            evaluator = HeldoutEvaluator(trainer, eval_args, levels=getattr(script_args, "ladder_levels", None),
                                         problems=own_eval)
            if trainer.accelerator.is_main_process:  # the evaluation shows progress bars; say what it is first
                if evaluator.problems is not None:  # your own held-out rows: their number is known
                    where, count = "your held-out problems", f"{len(evaluator.problems)} problems"
                else:
                    where = f"the built-in {eval_args.eval_benchmark} set's {eval_args.eval_split} split"
                    count = f"its first {eval_args.eval_problems} problems"
                samples = f"{eval_args.eval_samples} sample" + ("s" if eval_args.eval_samples != 1 else "")
                print(f"[{tag}] held-out evaluation before training on {where}: {count}, {samples}"
                      + (" + 1 greedy" if eval_args.eval_greedy else "") + " each (--eval_heldout false skips it) ...",
                      flush=True)
            with clock("evaluation before"):
                before = evaluator("before")
            if before is not None:  # a table per prompt format (training; neutral unless eval_neutral_format false)
                tables = "\n".join(evaluator.before_tables())
                print(f"[{tag}] held-out evaluation before training ({evaluator.took('before')}):\n{tables}",
                      flush=True)
    if no_training:  # --max_steps 0: Transformers would read 0 as "train num_train_epochs" and save a model
        if trainer.accelerator.is_main_process:
            print(f"[{tag}] --max_steps 0: nothing trained, nothing saved", flush=True)
            remove_empty_output(training_args.output_dir, existed)
        trainer.accelerator.end_training()
        return trainer
    resume = training_args.resume_from_checkpoint  # the command line gives a string: "true" means the newest one
    resume = True if isinstance(resume, str) and resume.lower() in ("true", "1", "yes") else resume
    with clock("training"):
        trainer.train(resume_from_checkpoint=resume)
    lines = tuple(lines) + (tuple(after_train(trainer, script_args, dataset)) if after_train is not None else ())
    if evaluator is not None:
        with clock("evaluation after"):
            after = evaluator("after")  # every process takes part (the others wait for the main one)
        before = evaluator.results.get("before")
        if after is not None and before is not None:
            lines += (f"held-out evaluation before and after training ({evaluator.took('after')} after):",
                      *evaluator.change_tables())
            save_heldout(training_args.output_dir, evaluator.results, evaluator.by_format.get("neutral"))
    finish_run(trainer, training_args.output_dir, script_args.dataset_name, tag, tuple(metric_prefixes(trainer)),
               time.perf_counter() - start, lines=lines, clock=clock)
    trainer.accelerator.end_training()  # end the process group before exit (a ZeRO-3 run was seen to abort without it)
    return trainer
