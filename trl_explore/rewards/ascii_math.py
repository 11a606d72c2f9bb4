"""Plain ASCII maths (as data sets write gold answers) rewritten as LaTeX that Math-Verify can parse whole.

Gold answers are often ASCII: CHAMP writes ``2^(n-1)``, ``C(n+1, 2m+1)``, ``sum_(i=1)^n i^3``, ``x=6, y=5``,
``1, 4 and 9``. Math-Verify's default ``parse`` reads only a part of such text (``2^(n-1)`` as ``2``,
``x=6, y=5`` as ``5``), so the grader (:mod:`trl_explore.rewards.grading`) rewrites an ASCII gold with
:func:`ascii_answer_to_latex` and uses that reading when Math-Verify's own reading of the gold is empty or
is not equivalent to it. Every function here refuses (``ValueError``) what it does not understand, so a
conversion is never a guess.

Pure string functions.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

# Function names that ascii_to_latex understands, with the LaTeX they become.
_ONE_ARGUMENT_FUNCTIONS = {
    "sqrt": (r"\sqrt{", "}"),
    "floor": (r"\lfloor ", r" \rfloor"),
    "ceil": (r"\lceil ", r" \rceil"),
    "ln": (r"\ln\left(", r"\right)"),
    "log": (r"\log\left(", r"\right)"),
    "exp": (r"\exp\left(", r"\right)"),
    "sin": (r"\sin\left(", r"\right)"),
    "cos": (r"\cos\left(", r"\right)"),
    "tan": (r"\tan\left(", r"\right)"),
}
_BINOMIAL_NAMES = {"C", "binom"}
# Two-letter runs are read as a product of two variables ("xy") unless they are English words.
_TWO_LETTER_WORDS = {
    "am", "an", "as", "at", "be", "by", "do", "eg", "go", "he", "ie", "if", "in", "is", "it", "me", "my",
    "no", "of", "on", "or", "so", "to", "up", "us", "we",
}  # fmt: skip
_OPENERS, _CLOSERS = "([", ")]"


def _split_top_level(text: str, separators: Sequence[str]) -> list[str]:
    """Split ``text`` at ``separators`` that are outside all brackets; pieces are stripped."""
    pieces, depth, start, i = [], 0, 0, 0
    while i < len(text):
        if text[i] in _OPENERS:
            depth += 1
        elif text[i] in _CLOSERS:
            depth -= 1
        elif depth == 0:
            separator = next((s for s in separators if text.startswith(s, i)), None)
            if separator is not None:
                pieces.append(text[start:i].strip())
                i += len(separator)
                start = i
                continue
        i += 1
    pieces.append(text[start:].strip())
    return pieces


def _matching_bracket(text: str, open_index: int) -> int:
    """Index of the bracket that closes the one at ``open_index``.

    ``(`` and ``[`` may be closed by either ``)`` or ``]``, so half-open intervals like ``[0, 1)``
    work. Raises ValueError when it is never closed.
    """
    depth = 0
    for i in range(open_index, len(text)):
        if text[i] in _OPENERS:
            depth += 1
        elif text[i] in _CLOSERS:
            depth -= 1
            if depth == 0:
                return i
    raise ValueError(f"unbalanced bracket at position {open_index} in {text!r}")


def _is_wrapped(text: str) -> bool:
    """True if the whole of ``text`` is one bracketed group, like ``(x=1, y=2)``."""
    return bool(text) and text[0] in _OPENERS and _matching_bracket(text, 0) == len(text) - 1


def _bare_word(text: str) -> str:
    """``text`` without ``$``, ``\\text{}``/``\\textbf{}``/``\\mathrm{}``/``\\mbox{}`` wrappers, surrounding spaces
    and a final ``.`` or ``!``."""
    word = re.sub(r"\\(?:text|textbf|mathrm|mbox|textrm)\s*\{([^{}]*)\}", r"\1", text)
    return word.replace("$", "").strip().rstrip(".!").strip()


def yes_no_word(text: str) -> str | None:
    """``"yes"`` or ``"no"`` if ``text`` is just that word, else None.

    Case, surrounding ``$``, ``\\text{}``/``\\textbf{}``/``\\mathrm{}``/``\\mbox{}`` wrappers, spaces
    and a final ``.`` or ``!`` are ignored: ``yes_no_word(r"\\text{No}.")`` is ``"no"``.
    """
    word = _bare_word(text).lower()
    return word if word in ("yes", "no") else None


_MISSING_ANSWER_MARKS = {"n/a", "nan", "null", "tbd", "todo"}  # in any case; "NA" in capitals only ("na" is n*a)


def is_missing_answer_mark(text: str) -> bool:
    """True if ``text`` is a mark that a table writes for a missing answer: ``n/a`` (any case, spaces around the
    slash), ``NA``, ``NaN``, ``null``, ``TBD`` or ``TODO``; wrappers ignored as by :func:`yes_no_word`.

    Such a gold states no answer, yet the readers take it for maths: Math-Verify and :func:`ascii_to_latex` read
    ``n/a`` as ``n`` divided by ``a`` and ``NA`` as ``N`` times ``A``, and ``\\text{TBD}`` is a text answer that a
    completion could copy. Example: ``is_missing_answer_mark("N / A")`` is True, ``is_missing_answer_mark("a/n")``
    False.
    """
    word = re.sub(r"\s*/\s*", "/", _bare_word(text))
    return word == "NA" or word.lower() in _MISSING_ANSWER_MARKS


def _read_group(text: str, i: int) -> tuple[str, int]:
    """The ASCII group that starts at ``text[i]`` and where it ends (exclusive).

    A group is a bracketed expression (returned without its brackets), a function call like
    ``floor(n/2)``, a number or one letter. Used for exponents, subscripts and sum limits.
    """
    if i >= len(text):
        raise ValueError(f"missing exponent or subscript at the end of {text!r}")
    if text[i] in _OPENERS:
        close = _matching_bracket(text, i)
        return text[i + 1 : close], close + 1
    match = re.match(r"[A-Za-z]+\(", text[i:])
    if match:
        close = _matching_bracket(text, i + match.end() - 1)
        return text[i : close + 1], close + 1
    match = re.match(r"-?(?:\d+(?:\.\d+)?|[A-Za-z])", text[i:])
    if match:
        return match.group(), i + match.end()
    raise ValueError(f"cannot read the exponent or subscript at {text[i:]!r}")


def ascii_to_latex(text: str) -> str:
    """Rewrite plain ASCII maths as LaTeX, refusing anything it does not understand.

    Args:
        text: ASCII maths such as ``2^(n-1)``, ``n(n-3)/2``, ``(2n)!/(2^n*n!)``, ``C(n+1, 2m+1)``,
            ``2^floor(n/2)``, ``sqrt(3)/3``, ``sum_(i=1)^n i^3``, ``[-1, 1]``, ``1±sqrt(2)``.

    Returns:
        LaTeX: ``^(...)``/``_(...)`` become ``^{...}``/``_{...}``, ``1e5`` becomes
        ``1 \\cdot 10^{5}``, ``C(a, b)`` and ``binom(a, b)`` become ``\\binom{a}{b}``,
        ``sqrt``/``floor``/``ceil``/``ln``/``log``/``exp``/``sin``/``cos``/``tan`` calls
        become their LaTeX forms, ``sum_(i=1)^n`` becomes ``\\sum_{i=1}^{n}``, ``*`` becomes
        ``\\cdot``, ``±`` becomes ``\\pm``, ``>=``/``<=``/``!=`` become ``\\geq``/``\\leq``/``\\neq``,
        ``pi`` becomes ``\\pi``. Letters are variables; a two-letter run like ``xy`` is a product.

    Raises:
        ValueError: on empty text, an English word (three or more letters that are not a known
            function, or one of the common two-letter words such as "or", "no"), an ellipsis
            ``..``, unbalanced brackets, or any other character (for example ``;``, ``?``, ``{``).

    Example: ``ascii_to_latex("2^(n-1)")`` is ``"2^{n-1}"``.
    """
    if not text.strip():
        raise ValueError("empty expression")
    if "!!" in text:
        raise ValueError(f"a double factorial (n!!) is not read in {text!r}")
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            out.append(" ")
            i += 1
        elif char.isdigit() or (char == "." and text[i + 1 : i + 2].isdigit()):
            number = re.match(r"(\d*\.?\d+|\d+)(?:[eE]([-+]?\d+))?", text[i:])
            if text.startswith(".", i + number.end()):
                raise ValueError(f"ellipsis or malformed number at {text[i:]!r}")
            mantissa, exponent = number.groups()
            out.append(mantissa if exponent is None else mantissa + r" \cdot 10^{" + exponent + "}")
            i += number.end()
        elif char.isalpha() and char.isascii():
            i = _convert_word(text, i, out)
        elif char in "^_":
            group, i = _read_group(text, i + 1)
            if char == "^" and text.startswith("^", i):
                raise ValueError(f"a chained power (a^b^c) is ambiguous in {text!r}")
            out.append(char + "{" + ascii_to_latex(group) + "}")
        elif char in _OPENERS:
            close = _matching_bracket(text, i)
            out.append(char + ascii_to_latex(text[i + 1 : close]) + text[close])
            i = close + 1
        elif text.startswith((">=", "<=", "!="), i):
            out.append({">=": r" \geq ", "<=": r" \leq ", "!=": r" \neq "}[text[i : i + 2]])
            i += 2
        elif char == "*":
            out.append(r" \cdot ")
            i += 1
        elif char == "±":
            out.append(r"\pm ")
            i += 1
        elif char in "+-/=<>!,":
            out.append(char)
            i += 1
        elif char == "%":
            out.append(r"\%")
            i += 1
        else:
            raise ValueError(f"unexpected character {char!r} in {text!r}")
    return "".join(out)


def _convert_word(text: str, i: int, out: list[str]) -> int:
    """Convert the run of letters at ``text[i]`` (a function call, ``sum``, ``pi`` or variables).

    Appends LaTeX to ``out`` and returns the index after what was consumed; see ``ascii_to_latex``.
    """
    word = re.match(r"[A-Za-z]+", text[i:]).group()
    after = i + len(word)
    followed_by_bracket = text.startswith("(", after)
    if word in _ONE_ARGUMENT_FUNCTIONS and followed_by_bracket:
        close = _matching_bracket(text, after)
        before, behind = _ONE_ARGUMENT_FUNCTIONS[word]
        out.append(before + ascii_to_latex(text[after + 1 : close]) + behind)
        return close + 1
    if word in _BINOMIAL_NAMES and followed_by_bracket:
        close = _matching_bracket(text, after)
        arguments = _split_top_level(text[after + 1 : close], [","])
        if len(arguments) != 2:
            raise ValueError(f"{word}(...) needs two arguments in {text!r}")
        top, bottom = (ascii_to_latex(argument) for argument in arguments)
        out.append(r"\binom{" + top + "}{" + bottom + "}")
        return close + 1
    if word == "sum" and text.startswith("_", after):
        lower, after = _read_group(text, after + 1)
        if not text.startswith("^", after):
            raise ValueError(f"sum without an upper limit in {text!r}")
        upper, after = _read_group(text, after + 1)
        out.append(r"\sum_{" + ascii_to_latex(lower) + "}^{" + ascii_to_latex(upper) + "} ")
        return after
    if word == "pi":
        out.append(r"\pi ")
        return after
    if word in ("inf", "infinity", "oo"):
        out.append(r"\infty ")
        return after
    if word in _ONE_ARGUMENT_FUNCTIONS:
        raise ValueError(f"the function {word!r} needs its argument in brackets in {text!r}")
    if len(word) == 1 or (len(word) == 2 and word.lower() not in _TWO_LETTER_WORDS):
        out.append(word)
        return after
    raise ValueError(f"unknown word {word!r} in {text!r}")


def _expand_plus_minus(item: str) -> list[str]:
    """``"a(1±sqrt(2))"`` -> ``["a(1+sqrt(2))", "a(1-sqrt(2))"]``; at most one ``±`` per item."""
    count = item.count("±")
    if count == 0:
        return [item]
    if count > 1:
        raise ValueError(f"more than one ± in {item!r}")
    return [item.replace("±", "+"), item.replace("±", "-")]


def _solutions_to_latex(text: str, keep_chained_equalities: bool = True) -> str | None:
    """LaTeX for a list of solutions written as assignments, or None if ``text`` is not one.

    * one solution of several variables -> an ordered tuple: ``"x=6, y=5"`` -> ``(6, 5)``,
      ``"x=y=0"`` -> ``(0, 0)``. (math-verify compares a set of equations such as
      ``{x=6, y=5}`` with a tuple in any order, so ``(5, 6)`` would pass; a tuple keeps the order.)
    * several solutions -> a set of tuples: ``"x=0, y=2 and x=9, y=11"`` or
      ``"(x=8, y=2), (x=2, y=8)"`` -> ``\\{(0, 2), (9, 11)\\}``.
    * one variable with several values -> a set: ``"x=16 and x=81"`` -> ``\\{16, 81\\}``,
      ``"x=±1, ±2"`` -> ``\\{+1, -1, +2, -2\\}``.

    Returns None (leave the text to math-verify) when a left-hand side is not a single letter
    (``f(x)=0``), when there is a single variable with a single value (``x=5``), or, with
    ``keep_chained_equalities`` (the default), when an equality relates variables only (``a=b=c`` is a
    statement that three quantities are equal, not the solution ``(c, c)``).
    Raises ValueError when solutions name different variables.
    """
    if "=" not in text.replace(">=", "").replace("<=", "").replace("!=", ""):
        return None
    solutions = _split_top_level(text, [" and ", " or "])
    if len(solutions) == 1:
        groups = _split_top_level(text, [","])
        if len(groups) > 1 and all(_is_wrapped(group) for group in groups):
            solutions = groups
    parsed: list[list[tuple[str, list[str]]]] = []  # per solution: (variable, values) pairs
    for solution in solutions:
        if _is_wrapped(solution):
            solution = solution[1:-1]
        assignments: list[tuple[str, list[str]]] = []
        for piece in _split_top_level(solution, [","]):
            sides = [side.strip() for side in piece.split("=")]
            if keep_chained_equalities and len(sides) > 1 and all(re.fullmatch(r"[A-Za-z]", side) for side in sides):
                return None
            if len(sides) == 1:  # "x=±1, ±2": a further value of the previous variable
                if not assignments:
                    return None
                assignments[-1][1].extend(_expand_plus_minus(sides[0]))
                continue
            if not all(re.fullmatch(r"[A-Za-z]", side) for side in sides[:-1]):
                return None
            assignments += [(variable, _expand_plus_minus(sides[-1])) for variable in sides[:-1]]
        parsed.append(assignments)
    variables = [[variable for variable, _ in assignments] for assignments in parsed]
    if any(names != variables[0] for names in variables):
        raise ValueError(f"the solutions in {text!r} do not name the same variables")
    if len(variables[0]) == 1:
        values = [value for assignments in parsed for value in assignments[0][1]]
        if len(values) == 1:
            return None
        return r"\{" + ", ".join(ascii_to_latex(value) for value in values) + r"\}"
    tuples = []
    for assignments in parsed:
        if any(len(values) != 1 for _, values in assignments):
            raise ValueError(f"a solution with several variables has a ± in {text!r}")
        tuples.append("(" + ", ".join(ascii_to_latex(values[0]) for _, values in assignments) + ")")
    return tuples[0] if len(tuples) == 1 else r"\{" + ", ".join(tuples) + r"\}"


def ascii_answer_to_latex(text: str, keep_chained_equalities: bool = True) -> str:
    """One ASCII gold answer (notes and phrases already removed) as LaTeX.

    Assignments go through ``_solutions_to_latex``; a list ``"1, 4 and 9"`` (top-level ``,``,
    ``and``, ``or``, with ``±`` expanded) becomes a set ``\\{1, 4, 9\\}``; anything else is one
    expression for ``ascii_to_latex``. Raises ValueError (from those functions) when unreadable.
    """
    solutions = _solutions_to_latex(text, keep_chained_equalities)
    if solutions is not None:
        return solutions
    items = _split_top_level(text, [", ", " and ", " or "])
    if "" in items:
        raise ValueError(f"empty item in the list {text!r}")
    items = [expanded for item in items for expanded in _expand_plus_minus(item)]
    if len(items) == 1:
        return ascii_to_latex(items[0])
    return r"\{" + ", ".join(ascii_to_latex(item) for item in items) + r"\}"


def looks_like_latex(text: str) -> bool:
    """True if ``text`` uses LaTeX syntax (a backslash, a brace or a ``$``)."""
    return any(char in text for char in "\\{}$")


def nesting_depth(text: str) -> int:
    """Deepest nesting of brackets ``( [ {`` in ``text`` (all kinds counted together).

    Unbalanced closing brackets are ignored (the depth never goes below 0), so this is a cheap
    bound, not a check of balance. Example: ``nesting_depth(r"\\frac{(a+1)}{2}")`` is 2.
    """
    depth = deepest = 0
    for char in text:
        if char in "([{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in ")]}":
            depth = max(depth - 1, 0)
    return deepest
