"""The grader's option values and :class:`GraderOptions`, importable without Math-Verify or sympy (configs validate
with them).

See :mod:`trl_explore.rewards.grading` for what each mode and guard does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from trl_explore.utils.registry import Registry

GRADER_MODES = Registry("grader_mode", kind="grader mode")
"""Grader modes: where a completion's final answer is read (:mod:`trl_explore.rewards.grading`)."""
GRADER_MODES.register("math_verify", help="Math-Verify's semantics plus guard-rails; default")
GRADER_MODES.register("trl", help="as trl.rewards.accuracy_reward")
GRADER_MODES.register("strict", help="answer-anchored, precision first")
GRADER_MODES.register("boxed", help="only boxed answers")
MODES = GRADER_MODES.names()
DEFAULT_MODE = "math_verify"
GUARDS = (
    "float_collapse", "interval_vs_set", "chained_equality", "unclosed_box",
    "hedge", "unterminated", "retraction", "prompt_echo", "mixed_number", "operator_fragment", "equation_variable",
)  # fmt: skip
"""Guard-rail classes: each only removes false positives (hedge to mixed_number: :mod:`trl_explore.rewards.guards`;
operator_fragment: :func:`trl_explore.rewards.answers.operator_expression`; equation_variable:
:mod:`trl_explore.rewards.comparison`)."""
GRADER_VERSION = "5"
"""Version of the grader's verdicts: bump it with every change that may change a verdict (cached teacher verdicts
are keyed by it and by a hash of the grader's code). 2: the guard-rails of :mod:`trl_explore.rewards.guards`;
3: ``operator_fragment``; 4: ``equation_variable``, a retraction by a restated other value, prose cut off
mid-sentence, ``a % b`` read as an operation (issue 45); 5: a mixed-number gold read as its value (``3 3/4``: 15/4),
marks for a missing answer (``n/a``) refused as golds."""


def check_grader_mode(mode: str, option: str = "grader_mode") -> str:
    """Return ``mode`` if it is one of :data:`MODES`; else raise ValueError naming ``option`` and the valid modes."""
    return GRADER_MODES.check(mode, option)


@dataclass(frozen=True)
class GraderOptions:
    """How to grade: the mode, the guard-rails switched on, and whether the recall rules apply.

    Args:
        mode: one of :data:`MODES` (default ``"math_verify"``).
        guards: the guard-rail classes to apply, a subset of :data:`GUARDS` (default: all).
        recall: apply the recall rules (default True; used in the ``"math_verify"`` and ``"boxed"`` modes only).
        gold_normalizer: a data set's phrasing rules for its gold answers, ``gold_normalizer(text) -> [alternatives]``
            (the maths a gold states, one string per accepted reading; e.g. CHAMP's
            ``trl_explore.data.champ_answers.gold_alternatives``), applied to golds Math-Verify cannot read whole.
            Default None: the gold text itself. A module-level function (it is sent to the grading workers).

    Raises:
        ValueError: an unknown mode or guard, naming the valid ones.
    """

    mode: str = DEFAULT_MODE
    guards: frozenset = field(default_factory=lambda: frozenset(GUARDS))
    recall: bool = True
    gold_normalizer: Callable[[str], list[str]] | None = None

    def __post_init__(self) -> None:
        check_grader_mode(self.mode, "mode")
        object.__setattr__(self, "guards", frozenset(self.guards))
        unknown = self.guards - set(GUARDS)
        if unknown:
            raise ValueError(f"unknown grader guards {sorted(unknown)}; valid: {GUARDS}")

