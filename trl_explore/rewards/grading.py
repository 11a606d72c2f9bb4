"""The verdict behind ``R_m``: is a completion's final answer equivalent to the gold answer?

Both papers grade with Math-Verify (OGER §3.1 and Eq. 7-8; ASE-GRPO §3.1 labels rollouts with a verifier), so the
default mode has Math-Verify's semantics (checked against math-verify 0.9.0 with its defaults: LaTeX and expression
targets, ``boxed_match_priority=50``, several boxes joined, ``float_rounding=6``, ``strict=True``). The functions here
are pure (strings in, verdicts out) and run in the grading worker processes of
:mod:`trl_explore.rewards.math_verify_reward`, which adds the wall-clock timeout.

The grader is three modules: :mod:`trl_explore.rewards.answers` reads the answers (completion text, gold forms,
the final answer per mode), :mod:`trl_explore.rewards.comparison` holds the guard-rails and recall rules below, and
this module gives the verdict (:func:`grade`) and re-exports the grader's public names (:class:`GraderOptions`
lives in :mod:`trl_explore.rewards.modes`, light to import).

**Gold answers** (:func:`read_gold`). A LaTeX gold (one with ``\\``, ``{``, ``}`` or ``$``) is read by
``math_verify.parse`` with its defaults. A plain-text gold is also read by this package's own reader: the CHAMP
phrasing rules (:mod:`trl_explore.data.champ_answers`), then
:func:`~trl_explore.rewards.ascii_math.ascii_answer_to_latex`, then Math-Verify on the whole LaTeX. That reading is
used when Math-Verify's own is empty or not equivalent to it (Math-Verify reads ``2^(n-1)`` as ``2`` and ``x=6, y=5``
as ``5``). Yes/no golds are words. A gold that neither reading parses, and a plain-text gold in prose or with an
ellipsis that this package's reader refuses ("Always greater than 20", from which Math-Verify would read ``20``;
"1, 2, 3, ..."), raise :class:`GoldAnswerError` (the reward gives ``None``: not scored). A plain-text gold that is one
mixed number means its value (``3 3/4``: 15/4, :func:`~trl_explore.rewards.guards.mixed_number_value`, as the
``mixed_number`` guard reads answers; Math-Verify reads ``3``); a whole number next to a fraction written any other
way (``3 5/4``, ``x = 3 3/4``) and a mark for a missing answer (``n/a``, ``NA``, ``TBD``:
:func:`~trl_explore.rewards.ascii_math.is_missing_answer_mark`; Math-Verify reads ``n/a`` as n divided by a) raise
:class:`GoldAnswerError` too.

**Modes** (where the final answer of a completion is read; :data:`MODES`):

* ``"math_verify"`` (default): ``math_verify.parse`` with its defaults on the whole completion.
* ``"trl"``: as TRL 1.16's ``trl.rewards.accuracy_reward`` reads completions: LaTeX only, boxed first
  (``boxed_match_priority=0``), only after an answer anchor, first match, units normalised. Plain-text and
  conversational completions are both accepted.
* ``"strict"``: this package's precision-first rule of version 0.1: the last box, parsed whole (ASCII maths
  allowed); without a box, only text after an answer phrase or in a complete concluding sentence.
* ``"boxed"``: only the content of the last ``\\boxed{}``/``\\fbox{}`` (the DAPO/verl convention).

Every mode compares with ``math_verify.verify`` (defaults); all modes but ``"trl"`` (which keeps Math-Verify's verdict,
for parity with TRL) then apply the guard-rails and recall rules below. A plain-text yes/no gold ("Yes", "No",
which Math-Verify cannot parse) is compared with the predicted word: the last box, else (not in the ``"boxed"``
mode) a yes/no after an answer phrase.

**Guard-rails** (:data:`GUARDS`; each on by default and switchable; each only turns a 1 into a 0, and none changes a
verdict on Math-Verify's published default-setting test cases):

* ``"float_collapse"``: Math-Verify rounds numbers to 6 decimals, so ``1/2^98 == 1/2^99`` and ``1/2006! == 1/2004!``.
  Numbers that compare equal only through that rounding (absolute difference < 1e-6) must also agree to a relative
  tolerance of :data:`FLOAT_RTOL`.
* ``"interval_vs_set"``: an interval of positive length is never equal to a finite set written as a set
  (Math-Verify equates ``\\{1,2\\}`` and ``(1,2)``; bare braces ``{1,3}`` are LaTeX grouping and left alone).
* ``"chained_equality"``: a plain-text gold ``a=b=c`` is a chained equality, not the solution tuple ``(c, c)``; and
  a chain of equalities between variables is not equal to anything but the same chain (Math-Verify compares an
  equality by its right-hand side, so it equates ``a=b=c`` with ``c`` and ``a=c``).
* ``"unclosed_box"``: a completion whose last ``\\boxed{`` is never closed (cut off inside its answer) has no answer
  (Math-Verify reads one).
* ``"equation_variable"``: an equation solved for another variable than the gold's (``y = 3`` against ``x = 3``;
  Math-Verify compares an equality by its right-hand side) is not equal to it.
* ``"hedge"``, ``"unterminated"``, ``"retraction"``, ``"prompt_echo"``, ``"mixed_number"``: hedged and unfinished
  answers (several values offered; a completion cut off with no boxed or phrase-anchored answer; an answer taken
  back or declared impossible; an unevaluated expression copied from the prompt; a mixed number read as its value),
  in :mod:`trl_explore.rewards.guards`. ``"operator_fragment"``: an unboxed answer that is an operator expression
  ("So the answer is 2^(3).", "3*(4+1)", "1.5e-3", "1.2 x 10^3", "3/8%", "2^n") is not read as its leading number,
  where Math-Verify stops (:func:`~trl_explore.rewards.answers.operator_expression`); with recall on, the whole
  expression is read instead (``2^(3)`` matches 8), else no answer. ``"unterminated"`` needs to know whether the
  completion ended and ``"prompt_echo"`` the prompt (:func:`grade`'s ``terminated`` and ``prompt``; the reward
  passes them); the strict and boxed modes apply ``"prompt_echo"`` only.

**Recall** (on by default in the ``"math_verify"`` and ``"boxed"`` modes; each only turns a 0 into a 1, where
equivalence is certain): an interval against the equivalent inequality in one variable, both directions
(``(1, 3]`` and ``1 < x \\le 3``; not a bare ``(a, b)``, which may be a point); ``\\mathrm{e}`` and ``\\mathrm{d}``
read as the letters ``e`` and ``d``; chained equalities that state the same equal quantities (``a=b=c`` and
``c=a=b``); a bold answer after an answer phrase and a ``\\fbox{}``, each only where it ends the completion (a
retracted "The answer is **5**. Wait, ... 6." stays wrong); and those of :mod:`trl_explore.rewards.guards` (a mixed
number equal to the gold, ``\\textbf{}`` and bold choice letters, thin-space thousands, e-notation, repeating
decimals, a function answer up to its variable's name).
"""

from __future__ import annotations

from typing import Any

from trl_explore.rewards.answers import (
    MAX_ANSWER_CHARS,
    MAX_NESTING,
    GoldAnswerError,
    completion_text,
    conclusion_answer_text,
    extract,
    is_prose,
    last_boxed_content,
    mv_verify,
    parse_latex_whole,
    predicted_yes_no,
    read_gold,
    read_prediction,
)
from trl_explore.rewards.comparison import (
    FLOAT_RTOL,
    collapsed_by_rounding,
    interval_matches_inequality,
    mixed_number_reading,
    passes_guards,
    recalled_text,
    same_chained_equality,
)
from trl_explore.rewards.guards import failed_guard, prompt_text
from trl_explore.rewards.modes import DEFAULT_MODE, GUARDS, MODES, GraderOptions

__all__ = [  # the grader's public names, from this module or the two halves it is made of
    "DEFAULT_MODE", "FLOAT_RTOL", "GUARDS", "MAX_ANSWER_CHARS", "MAX_NESTING", "MODES", "GoldAnswerError",
    "GraderOptions", "collapsed_by_rounding", "completion_text", "conclusion_answer_text", "extract", "grade",
    "interval_matches_inequality", "is_prose", "last_boxed_content", "parse_latex_whole", "predicted_yes_no",
    "read_gold", "read_prediction", "same_chained_equality",
]


def grade(
    completion: Any,
    gold: Any,
    options: GraderOptions = GraderOptions(),
    *,
    prompt: Any = None,
    terminated: bool | None = None,
) -> bool:
    """True iff the completion's final answer is equivalent to ``gold``: ``R_m`` (OGER Eq. 7-8, ASE-GRPO §3.1).

    Args:
        completion: the completion (text, or anything :func:`completion_text` accepts).
        gold: the gold answer (LaTeX or plain text).
        options: mode, guards and recall (default: ``"math_verify"``, all guards, recall on).
        prompt: the prompt the completion answers (text or TRL messages; default None: the ``"prompt_echo"`` guard
            does not judge).
        terminated: whether the completion ended with an EOS token (default None: unknown, the ``"unterminated"``
            guard does not judge).

    Returns:
        Math-Verify's verdict in the chosen mode, with the guard-rails applied to a True and the recall rules
        to a False (see the module docstring). Yes/no golds compare the predicted word.

    Raises:
        GoldAnswerError: the gold answer cannot be parsed (see :func:`read_gold`).
    """
    text = completion_text(completion)
    gold = str(gold) if gold is not None else None
    gold_parsed = read_gold(gold, "chained_equality" in options.guards, options.gold_normalizer)
    if gold_parsed[0] in ("yes", "no"):
        return predicted_yes_no(text, options.mode) in gold_parsed
    prediction = read_prediction(text, options)
    if options.mode == "trl":  # parity with TRL's accuracy_reward: Math-Verify's verdict, no guard, no recall
        return bool(prediction) and mv_verify(gold_parsed, prediction)
    mixed = mixed_number_reading(text, options)
    if mixed is not None and "mixed_number" in options.guards:
        prediction = [mixed, str(mixed)]
    graded = None
    if prediction and mv_verify(gold_parsed, prediction):
        if not passes_guards(gold_parsed, prediction, options.guards, gold):
            return False
        graded = text
    elif options.recall and options.mode in ("math_verify", "boxed"):
        graded = text if mixed is not None and mv_verify(gold_parsed, [mixed]) else None
        graded = graded or recalled_text(text, gold, gold_parsed, prediction, options)
    if graded is None:
        return False
    answer = extract(graded, options) if options.mode != "math_verify" and prompt is not None else None
    refuted = failed_guard(graded, gold, gold_parsed, options.guards, options.mode, prompt=prompt_text(prompt) or None,
                           terminated=terminated, answer=answer)  # fmt: skip
    return refuted is None
