"""The grader's option values, importable without Math-Verify or sympy (configs validate with them).

See :mod:`trl_explore.rewards.grading` for what each mode and guard does.
"""

MODES = ("math_verify", "trl", "strict", "boxed")
"""Grader modes: where a completion's final answer is read."""
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
    if mode not in MODES:
        raise ValueError(f"{option}={mode!r} is not a grader mode; valid: {', '.join(MODES)}")
    return mode
