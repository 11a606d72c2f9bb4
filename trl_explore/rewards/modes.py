"""The grader's option values, importable without Math-Verify or sympy (configs validate with them).

See :mod:`trl_explore.rewards.grading` for what each mode and guard does.
"""

from trl_explore.registry import Registry

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
    "hedge", "unterminated", "retraction", "prompt_echo", "mixed_number",
)  # fmt: skip
"""Guard-rail classes: each only removes false positives (the last five: :mod:`trl_explore.rewards.guards`)."""
GRADER_VERSION = "2"
"""Version of the grader's verdicts: bump it with every change that may change a verdict (cached teacher verdicts
are keyed by it and by a hash of the grader's code). 2: the guard-rails of :mod:`trl_explore.rewards.guards`."""


def check_grader_mode(mode: str, option: str = "grader_mode") -> str:
    """Return ``mode`` if it is one of :data:`MODES`; else raise ValueError naming ``option`` and the valid modes."""
    return GRADER_MODES.check(mode, option)
