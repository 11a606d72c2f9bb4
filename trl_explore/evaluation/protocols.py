"""Evaluation protocols and prompts: the papers' sampling settings per benchmark, and the chat prompt of a row.

Protocols (:data:`PROTOCOLS`, one option each):

* ``"oger"`` (OGER App. A.2): temperature 0.8, pass@1 over 32 samples for AIME 2024, AIME 2025 and
  AMC, one sample elsewhere; the Table 6 system prompt for maths, no system prompt for the
  out-of-domain sets. Tables in the layout of OGER Table 1 (pass@1, "AVG").
* ``"ase"`` (ASE Tables 1-3, App. D): 8 samples, temperature 0.6, top-p 0.95, no top-k, 4096 new
  tokens. Tables in the layout of ASE Tables 1-2 ("Mean@8 / Pass@8", "Math Avg.", "OOD Avg.").
* ``"demo"`` (default of ``examples/evaluate.py``, sized for a CPU): 8 samples, temperature 0.8 (the
  OGER evaluation temperature), 256 new tokens; "Mean@8 / Pass@8" tables.

Any sampling field can be overridden (``num_samples``, ``temperature``, ``top_p``, ``top_k``,
``max_new_tokens``).

Prompts (:func:`build_messages`): a row that brings its own chat prompt (CHAMP: the prompt the policy was trained on)
is used as is; otherwise the prompt is ``[system (if the protocol has one for the row's domain), user]`` with the
protocol's user template and a one-line answer-format instruction per grading.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from trl_explore.evaluation.benchmarks import benchmark_spec
from trl_explore.sampling.plan import SamplingPlan

_INSTRUCTIONS = {
    "math": "Please reason step by step, and put your final answer within \\boxed{}.",
    "multiple_choice": "Answer with the letter of the correct option within \\boxed{}.",
    "exact_match": "Put your final answer within \\boxed{}.",
}


@dataclass(frozen=True)
class EvalProtocol:
    """A paper's evaluation settings; :meth:`plan` gives each benchmark's :class:`SamplingPlan`.

    Attributes:
        name: protocol name.
        num_samples: default samples per problem.
        samples_by_benchmark: per-benchmark overrides of ``num_samples``.
        temperature, top_p, top_k, max_new_tokens: sampling (see :class:`SamplingPlan`).
        math_system_prompt / ood_system_prompt: system message per domain (``None``: none).
        math_user_template / ood_user_template: user message per domain.
        layout: table layout, ``"oger"`` (pass@1 cells) or ``"ase"`` (``Mean@n / Pass@n`` cells).
        source: where the settings come from.
    """

    name: str
    num_samples: int
    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 4096
    samples_by_benchmark: Mapping[str, int] = field(default_factory=dict)
    math_system_prompt: str | None = None
    ood_system_prompt: str | None = None
    math_user_template: str = "{problem}\n\n{instruction}"
    ood_user_template: str = "{problem}\n\n{instruction}"
    layout: str = "ase"
    source: str = ""

    def plan(self, benchmark: str, **overrides) -> SamplingPlan:
        """The sampling plan of ``benchmark``; keyword ``overrides`` (``None`` values ignored) replace
        fields of the plan (``num_samples``, ``temperature``, ``top_p``, ``top_k``, ``max_new_tokens``,
        ``system_prompt``, ``user_template``).

        Raises:
            ValueError: unknown benchmark, unknown override, or an invalid resulting plan.
        """
        spec = benchmark_spec(benchmark)
        math_domain = spec.domain == "math"
        plan = SamplingPlan(
            num_samples=self.samples_by_benchmark.get(spec.name, self.num_samples),
            temperature=self.temperature,
            top_p=self.top_p,
            top_k=self.top_k,
            max_new_tokens=self.max_new_tokens,
            system_prompt=self.math_system_prompt if math_domain else self.ood_system_prompt,
            user_template=self.math_user_template if math_domain else self.ood_user_template,
        )
        unknown = set(overrides) - set(SamplingPlan.__dataclass_fields__)
        if unknown:
            raise ValueError(f"unknown sampling override(s) {sorted(unknown)}")
        return replace(plan, **{k: v for k, v in overrides.items() if v is not None})


def _oger_system_prompt() -> str:
    from trl_explore.data.prompts import OGER_SYSTEM_PROMPT

    return OGER_SYSTEM_PROMPT


def get_protocol(name: str) -> EvalProtocol:
    """The protocol called ``name`` (``"oger"``, ``"ase"`` or ``"demo"``).

    Raises:
        ValueError: unknown name (the message lists the known ones).
    """
    if name == "oger":
        return EvalProtocol(
            "oger", num_samples=1, temperature=0.8, max_new_tokens=8192,
            samples_by_benchmark={"aime2024": 32, "aime2025": 32, "amc": 32},
            math_system_prompt=_oger_system_prompt(), math_user_template="This is the problem: {problem}",
            layout="oger", source="OGER App. A.2 (Table 1); Table 6 system prompt kept for maths, removed for OOD",
        )  # fmt: skip
    if name == "ase":
        return EvalProtocol(
            "ase", num_samples=8, temperature=0.6, top_p=0.95, top_k=0, max_new_tokens=4096, layout="ase",
            source="ASE Tables 1-3 and App. D (Mean@8 / Pass@8, temperature 0.6, top-p 0.95, 4096 tokens)",
        )  # fmt: skip
    if name == "demo":
        return EvalProtocol(
            "demo", num_samples=8, temperature=0.8, max_new_tokens=256, layout="ase",
            source="CPU demo: 8 samples at the OGER evaluation temperature 0.8, 256 new tokens",
        )  # fmt: skip
    raise ValueError(f"unknown evaluation protocol {name!r}; choose one of {list(PROTOCOLS)}")


PROTOCOLS = ("oger", "ase", "demo")
"""Names accepted by :func:`get_protocol`."""


def build_messages(row: Mapping[str, Any], plan: SamplingPlan) -> list[dict[str, str]]:
    """The chat prompt of one benchmark row (see the module docstring).

    Args:
        row: a row of :func:`~trl_explore.evaluation.benchmarks.load_benchmark`.
        plan: its sampling plan (system prompt and user template).

    Returns:
        ``[{"role", "content"}, ...]`` ending with the user message.
    """
    if row.get("prompt"):
        return [{"role": m["role"], "content": m["content"]} for m in row["prompt"]]
    user = plan.user_template.format(problem=row["problem"], instruction=_INSTRUCTIONS[row["grading"]]).strip()
    messages = [{"role": "system", "content": plan.system_prompt}] if plan.system_prompt else []
    return messages + [{"role": "user", "content": user}]
