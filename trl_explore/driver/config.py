"""Configuration: :class:`ExplorationConfig` (the driver's ``GRPOConfig``) and :class:`ComponentOptions` (the base of
each method's own options).

A method's options are a dataclass of their own (``OGEROptions``, ``ASEOptions``, ...). They are used in two ways:

* alone, handed to the method's component: ``ExplorationTrainer(model, args=ExplorationConfig(...),
  components=[OGERComponent(OGEROptions(...)), ASEComponent(ASEOptions(...))])`` composes methods without any new
  class;
* as a base of a training config, so that ``TrlParser`` reads them from the command line and YAML:
  ``class OGERConfig(OGEROptions, ExplorationConfig)`` is a ``GRPOConfig`` with OGER's options (the options class
  comes first in the bases, so ``output_dir`` stays the first positional field). ``ExplorationConfig.__post_init__``
  validates every options class among its bases, and the component reads its options back with
  :meth:`ComponentOptions.from_config`.

Checks: :meth:`ComponentOptions.validate` checks the options on their own (at construction); :meth:`ComponentOptions.
apply` checks them against the training configuration and may set GRPO fields the method requires (when the config
is built, and again when a trainer is built from separate options). Errors name the option and its class.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import ClassVar

from trl import GRPOConfig

from trl_explore.data.gold_normalizers import GOLD_NORMALIZERS
from trl_explore.precision import CPU_PRECISIONS, apply_cpu_precision
from trl_explore.rewards.correctness import CORRECT_THRESHOLD, check_threshold
from trl_explore.rewards.modes import GRADER_MODES


@dataclass
class ComponentOptions:
    """Base of a method's options (module docstring).

    Class attributes:
        section: the heading of these options in ``--help`` (``trl_explore.cli``) and in error messages.
    """

    section: ClassVar[str] = "Method options"

    def __post_init__(self):
        parent = getattr(super(), "__post_init__", None)
        if parent is not None:  # a base of a training config: ExplorationConfig.__post_init__ validates every option
            parent()
        else:
            self.validate()

    def validate(self) -> None:
        """Check the options on their own. Raises ValueError / TypeError naming the option (see :meth:`error`)."""

    def apply(self, args) -> None:
        """Check the options against the training configuration ``args`` (a ``GRPOConfig``) and set the GRPO fields
        the method requires. Raises ValueError naming the options and the training fields involved."""

    @classmethod
    def error(cls, message: str, kind: type[Exception] = ValueError) -> Exception:
        """An exception whose message starts with the options class (``"OGEROptions: ..."``)."""
        return kind(f"{cls.__name__}: {message}")

    @classmethod
    def option_names(cls) -> tuple[str, ...]:
        """The names of the fields these options declare (call it on the options class, e.g. ``OGEROptions``)."""
        return tuple(f.name for f in dataclasses.fields(cls) if f.init)

    @classmethod
    def from_config(cls, config) -> ComponentOptions:
        """These options as set on ``config`` (a training config with these fields, e.g. ``OGERConfig``; another
        object: the defaults for every field it does not have)."""
        if type(config) is cls:
            return config
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        return cls(**{name: getattr(config, name) for name in names if hasattr(config, name)})


def options_classes(config_cls: type) -> list[type]:
    """The options classes a training config class is built from, in the order of its bases."""
    return [base for base in config_cls.__mro__ if issubclass(base, ComponentOptions) and base is not ComponentOptions
            and not issubclass(base, GRPOConfig)]


@dataclass
class ExplorationConfig(GRPOConfig):
    r"""
    Configuration of [`ExplorationTrainer`]: TRL's [`~trl.GRPOConfig`] plus the options every method shares.

    Parameters:
        grader_mode (`str`, defaults to `"math_verify"`):
            How the default verifiable reward `R_m` reads a completion's final answer (`trl_explore.rewards.grading`):
            `"math_verify"` (Math-Verify's semantics plus guard-rails), `"trl"`, `"strict"` or `"boxed"`. The offline
            builder and the evaluation take the same option.
        gold_normalizer (`str`, defaults to `"none"`):
            The training data's phrasing rules for its gold answers, by name (`trl_explore.data.gold_normalizers`):
            `"none"`, or `"champ"` for the embedded CHAMP set (the training scripts choose it for `champ`). Used by the
            default reward `R_m`.
        correct_threshold (`float`, defaults to `0.5`):
            A rollout is correct when the verifier's reward (`R_m`, the correctness reward) is above this
            (`trl_explore.rewards.correctness`): OGER's exploration-reward gate and failed ratio, ASE-GRPO's contrast
            pairs and route accuracies, ExGRPO's buckets, the readiness check and the dynamics probe read it. 0.5 reads
            the papers' `{0, 1}` and DAPO-style `{-1, +1}` verifiers alike; set it for another pair (5 for `{0, 10}`).
        vllm_enforce_eager (`bool`, defaults to `False`):
            Build the colocated vLLM engine with `enforce_eager=True` (no torch.compile / CUDA graphs): faster to
            start (CPU, tests), slower to decode. Steering works in both modes.
        cpu_precision (`str`, defaults to `"auto"`):
            The precision of a run on a CPU (`trl_explore.precision`): `"bfloat16"` is mixed precision (float32
            weights and optimizer, bfloat16 autocast for the loss forward and backward, the rollouts and the held-out
            evaluation), `"float32"` plain float32, `"auto"` bfloat16 where a short measurement on first use finds it
            clearly faster than float32 on this CPU (`trl_explore.precision.probe_precision`: a few matrix products in
            both precisions, cached per CPU model, bfloat16 flags, torch version and thread count), else float32. Sets
            `use_cpu` and `bf16`; an explicit `bf16` wins over `"auto"` and must agree with a forced value. Not read on
            a GPU, where `bf16` / `fp16` keep TRL's meaning.
        share_prompt_forward (`bool`, defaults to `False`):
            Score completions with each group's prompt run once (`trl_explore.trl_guards.prefix_forward`): the
            prompt's key/value cache is repeated over the group's rows, so a forward reads `P - 1 + G (T + 1)` columns
            a group instead of `G (P + T)`. The same log-probs and entropies to float rounding. Used where it applies
            (one process,
            no wrapper, no gradient checkpointing, no PEFT, no forward hook on the model, rotary or ALiBi
            positions); TRL's forward elsewhere.

        fast_decode (`bool`, defaults to `True`):
            Sample HF rollouts with `trl_explore.sampling.decode` instead of `generate`: each group's prompt prefilled
            once, finished completions dropped from the batch, a key/value cache written in place. The same
            next-token distribution from the same random generator (other samples than `generate`'s for one seed);
            settings it does not reproduce (beam search, repetition penalty, images, ...) fall back to `generate`.
            Not read with vLLM or `use_transformers_paged`.

    Raises:
        ValueError: an unknown name for a TRL option with a closed set of values (`check_trl_choices`) or for
            `grader_mode` / `gold_normalizer` / `cpu_precision`, naming the valid ones; `fp16` or a contradicting
            `bf16` on a CPU; a generation batch that does not hold whole groups (`batch_geometry_error`); any check of
            a method's options class among the bases.
    """

    grader_mode: str = field(
        default="math_verify",
        metadata={"help": "How the default reward R_m reads answers: " + GRADER_MODES.describe() + ".",
                  "choices": list(GRADER_MODES)},
    )
    gold_normalizer: str = field(
        default="none",
        metadata={"help": "The training data's phrasing rules for its golds: " + GOLD_NORMALIZERS.describe() + ".",
                  "choices": list(GOLD_NORMALIZERS)},
    )
    correct_threshold: float = field(
        default=CORRECT_THRESHOLD,
        metadata={"help": "A rollout is correct when its verifier reward is above this (0.5 reads {0, 1} and {-1, "
                          "+1}). Read by OGER's gate and failed ratio, ASE's pairs, ExGRPO's buckets."},
    )
    vllm_enforce_eager: bool = field(
        default=False, metadata={"help": "Build the colocated vLLM engine eagerly (no torch.compile / CUDA graphs)."}
    )

    cpu_precision: str = field(
        default="auto",
        metadata={"help": "Precision on a CPU: 'auto' (bfloat16 mixed precision where a short measurement finds it "
                          "faster, else float32), 'bfloat16' or 'float32'. Mixed: float32 weights and optimizer, "
                          "bfloat16 autocast for loss, rollouts and held-out evaluation. Sets use_cpu and bf16; an "
                          "explicit bf16 wins over 'auto'. Not read on a GPU.",
                  "choices": list(CPU_PRECISIONS)},
    )

    share_prompt_forward: bool = field(
        default=False,
        metadata={"help": "Run each group's prompt once in the loss and scoring forwards (same values to float "
                          "rounding). Its key/value cache is repeated over the group's completions: faster when "
                          "prompts are long beside completions. Used on one process without gradient checkpointing, "
                          "PEFT or forward hooks; TRL's forward otherwise."},
    )

    fast_decode: bool = field(
        default=True,
        metadata={"help": "Sample HF rollouts with trl_explore's faster decoder (false: TRL's generate)."},
    )

    def __post_init__(self):
        check_trl_choices(self)  # before TRL's own checks: a mistyped name would otherwise fail in step 1
        apply_cpu_precision(self)  # before Transformers reads use_cpu / bf16 (it refuses bf16 on a CPU otherwise)
        try:
            super().__post_init__()
        except ValueError as error:
            raise batch_geometry_error(self, error) from None
        GRADER_MODES.check(self.grader_mode, "grader_mode")
        GOLD_NORMALIZERS.check(self.gold_normalizer, "gold_normalizer")
        check_threshold(self.correct_threshold)
        for options_cls in options_classes(type(self)):
            options_cls.validate(self)
            options_cls.apply(self, self)


TRL_CHOICES: dict[str, tuple] = {
    "loss_type": ("dapo", "grpo", "dr_grpo", "bnpo", "cispo", "sapo", "luspo", "vespo"),
    "scale_rewards": ("group", "batch", "none", True, False),
    "importance_sampling_level": ("token", "sequence"),
    "multi_objective_aggregation": ("sum_then_normalize", "normalize_then_sum"),
    "vllm_mode": ("colocate", "server"),
    "vllm_model_impl": ("vllm", "transformers", "auto"),
    "vllm_importance_sampling_mode": ("sequence_mask", "token_mask", "token_truncate", "sequence_truncate"),
}
"""TRL 1.16's ``GRPOConfig`` options that take one of a few names, with those names (read from
``trl/trainer/grpo_config.py``'s help texts and ``grpo_trainer.py``'s branches; ``tests/test_config.py`` checks them
against TRL's help). TRL itself checks none of them when the config is built: a mistyped ``loss_type`` failed inside
the loss of the first step."""


def check_trl_choices(args) -> None:
    """Check every option of :data:`TRL_CHOICES` on ``args`` (a ``GRPOConfig``) before TRL's ``__post_init__``
    (``scale_rewards`` given as the string ``"true"`` / ``"false"`` becomes TRL's ``True`` / ``False``).

    Raises:
        ValueError: ``"loss_type='dr-grpo' is not a valid loss_type; valid: dapo, grpo, dr_grpo, ... (did you mean
            'dr_grpo'?)"`` for the first option whose value is not one of its names.
    """
    import difflib

    if isinstance(getattr(args, "scale_rewards", None), str) and args.scale_rewards.lower() in ("true", "false"):
        args.scale_rewards = args.scale_rewards.lower() == "true"  # the command line's spelling of TRL's True / False
    for option, valid in TRL_CHOICES.items():
        value = getattr(args, option, None)
        if value is None and option not in ("loss_type", "scale_rewards", "importance_sampling_level"):
            continue
        if any(value == name and type(value) is type(name) for name in valid):
            continue
        names = [str(name) for name in valid if isinstance(name, str)]
        close = difflib.get_close_matches(str(value), names, n=1, cutoff=0.6)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{option}={value!r} is not a valid {option}; valid: {', '.join(names)}{hint}")


def batch_geometry_error(args, error: ValueError) -> ValueError:
    """TRL's ``GRPOConfig`` error ``error`` as it stands, or, for its batch-geometry errors (a generation batch that
    does not hold whole groups), one that names every option of the product and the values that would fit.

    ``generation_batch_size = per_device_train_batch_size x processes x steps_per_generation`` (TRL's default
    ``steps_per_generation`` is ``gradient_accumulation_steps``) must be a multiple of ``num_generations``."""
    message = str(error)
    if "must be divisible by num_generations" not in message:
        return error
    per_device, steps = args.per_device_train_batch_size, args.steps_per_generation
    processes, batch, group = args.world_size, args.generation_batch_size, args.num_generations
    fits = [k for k in range(2, batch + 1) if batch % k == 0]
    return ValueError(
        f"the generation batch must hold whole groups of num_generations completions: generation_batch_size = "
        f"per_device_train_batch_size ({per_device}) x processes ({processes}) x steps_per_generation ({steps}) = "
        f"{batch} is not a multiple of num_generations ({group}); set num_generations to one of {fits}, or change "
        f"per_device_train_batch_size / steps_per_generation (default: gradient_accumulation_steps) so that the "
        f"product is a multiple of {group}")


def default_verifier(args):
    """The driver's default reward: the verifiable reward R_m, ``MathVerifyReward`` with the config's
    ``grader_mode`` and ``gold_normalizer`` (a plain ``GRPOConfig``: the defaults)."""
    from trl_explore.rewards.math_verify_reward import MathVerifyReward

    normalizer = GOLD_NORMALIZERS[getattr(args, "gold_normalizer", "none")]
    return MathVerifyReward(mode=getattr(args, "grader_mode", "math_verify"), gold_normalizer=normalizer)


def check_options_source(component, config) -> None:
    """Options come from one place (:meth:`Component.prepare`).

    Raises:
        ValueError: options given to the component that differ from the same fields set on ``config`` when
            ``config`` has the options class among its bases (naming the component, the fields, both values and the
            fix).
    Warns (logging): ``config`` lacks the options class and no options were given: every option takes its default.
    """
    import logging

    cls = component.options_class
    if isinstance(config, cls):
        if component.options is None or component.options is config:
            return
        names = [f.name for f in dataclasses.fields(cls) if f.init]
        differ = [(n, getattr(config, n), getattr(component.options, n)) for n in names
                  if getattr(config, n) != getattr(component.options, n)]
        if differ:
            listed = "; ".join(f"{n}: config {c!r}, options {o!r}" for n, c, o in differ)
            raise ValueError(
                f"component {component.name!r}: options given twice with different values ({listed}). The "
                f"training config {type(config).__name__} has {cls.__name__} among its bases: build the component "
                f"without options ({type(component).__name__}()) to read them from the config, or give the same "
                "values in both places")
    elif component.options is None:
        logging.getLogger(__name__).warning(
            "component %r: the training config %s does not have %s among its bases and no options were given, so "
            "every option of %s takes its default. Pass them (%s(%s(...))) or add %s to the config's bases",
            component.name, type(config).__name__, cls.__name__, cls.__name__, type(component).__name__,
            cls.__name__, cls.__name__)
