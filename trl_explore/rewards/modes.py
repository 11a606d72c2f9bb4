"""The grader's option values, importable without Math-Verify or sympy (configs validate with them).

See :mod:`trl_explore.rewards.grading` for what each mode and guard does.
"""

MODES = ("math_verify", "trl", "strict", "boxed")
"""Grader modes: where a completion's final answer is read."""
DEFAULT_MODE = "math_verify"
GUARDS = ("float_collapse", "interval_vs_set", "chained_equality", "unclosed_box")
"""Guard-rail classes: each only removes false positives."""


def check_grader_mode(mode: str, option: str = "grader_mode") -> str:
    """Return ``mode`` if it is one of :data:`MODES`; else raise ValueError naming ``option`` and the valid modes."""
    if mode not in MODES:
        raise ValueError(f"{option}={mode!r} is not a grader mode; valid: {', '.join(MODES)}")
    return mode
