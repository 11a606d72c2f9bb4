"""Offline trajectories sampled from teacher models (OGER §3.1: "generating supplementary
trajectories across multiple teacher models").

:func:`generated_records` prompts every teacher with every problem and yields
:class:`~trl_explore.data.sources.ProblemRecord` s that the builder merges with the input records.
Sampling goes through the package's one sampling stack, :mod:`trl_explore.sampling`: vLLM when
installed (``backend="auto"``), else transformers ``generate`` (batched, left padding). A generation
that reaches ``max_new_tokens`` without an end-of-sequence token is counted as truncated (like
CHAMP's ``LENGTH_CURRENT``), never kept.

Seeding (unchanged since v0.1, ``seeding="once"`` of :mod:`trl_explore.sampling.seeds`): with
transformers one ``torch.manual_seed(seed)`` per teacher before its first batch; with vLLM every
request gets ``seed``. ``top_k`` is left at the backend's default (transformers: the teacher's
``generation_config.top_k``, 50 unless its checkpoint sets one; vLLM: off).
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterable, Iterator, Mapping, Sequence

from trl_explore.data.prompts import PromptPreset, build_prompt, get_prompt_preset
from trl_explore.data.sources import ProblemRecord
from trl_explore.sampling.plan import SamplingPlan


def teacher_names(teachers: Sequence[str] | Mapping[str, str]) -> dict[str, str]:
    """``{teacher name: model path or Hub id}``; a bare path is named after its last component.

    Raises:
        ValueError: no teacher, or two teachers with the same name.
    """
    if isinstance(teachers, Mapping):
        named = dict(teachers)
    else:
        named = {}
        for path in teachers:
            name = pathlib.PurePath(str(path).rstrip("/")).name
            if name in named:
                raise ValueError(f"Two teachers are both named {name!r}; pass a mapping {{name: path}}.")
            named[name] = str(path)
    if not named:
        raise ValueError("No teacher model given: name at least one.")
    return named


def split_finished(token_ids: Sequence[int], eos_ids: set[int]) -> tuple[list[int], bool]:
    """Cut generated ids at the first end-of-sequence token.

    Returns:
        ``(ids before the EOS, True)``, or ``(all ids, False)`` when no EOS was produced (truncated).
    """
    for i, token in enumerate(token_ids):
        if token in eos_ids:
            return list(token_ids[:i]), True
    return list(token_ids), False


def generated_records(
    problems: Iterable[ProblemRecord],
    teachers: Sequence[str] | Mapping[str, str],
    num_samples: int = 1,
    max_new_tokens: int = 8192,
    temperature: float = 0.6,
    top_p: float = 0.95,
    batch_size: int = 8,
    system_prompt: str | PromptPreset = "default",
    backend: str = "auto",
    seed: int = 0,
    show_progress: bool = True,
) -> Iterator[ProblemRecord]:
    """Records holding completions sampled from each teacher for each problem.

    The input records' own completions are NOT repeated: pass the input source to the builder as
    well to keep them (records of one problem id are merged there).

    Args:
        problems: records giving ``problem_id``, ``problem`` and ``answer``.
        teachers: model paths/Hub ids (named after their last path component) or ``{name: path}``.
        num_samples: completions per teacher and problem.
        max_new_tokens: generation budget in teacher tokens; longer ones count as truncated.
        temperature, top_p: sampling (``temperature=0``: greedy).
        batch_size: prompts per ``generate`` call (transformers backend).
        system_prompt: preset name or :class:`PromptPreset` used to prompt the teachers.
        backend: ``"auto"`` (vLLM if installed), ``"vllm"`` or ``"transformers"``.
        seed: sampling seed.

    Raises:
        ValueError: no teacher, a bad ``backend``, ``num_samples < 1``, or a sampling setting out of range
            (:class:`~trl_explore.sampling.plan.SamplingPlan`; greedy decoding needs ``num_samples=1``).
    """
    from trl_explore.sampling.backends import make_generator
    from trl_explore.sampling.vllm import vllm_available

    named = teacher_names(teachers)
    if backend == "auto":
        backend = "vllm" if vllm_available() else "transformers"
    if backend not in ("vllm", "transformers"):
        raise ValueError(f"backend must be 'auto', 'vllm' or 'transformers', got {backend!r}.")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}.")
    plan = SamplingPlan(num_samples=num_samples, temperature=temperature, top_p=top_p, top_k=None,
                        max_new_tokens=max_new_tokens)
    preset = system_prompt if isinstance(system_prompt, PromptPreset) else get_prompt_preset(system_prompt)
    problems = list(problems)
    prompts = [build_prompt(p.problem, preset, where=f"problem {p.problem_id!r}") for p in problems]
    records = [ProblemRecord(p.problem_id, p.problem, p.answer) for p in problems]
    for name, path in named.items():
        # batch_size counts prompts here, rows (prompt, sample) in the sampling stack; dtype "auto": the teacher's own
        generator = make_generator(path, backend=backend, batch_size=batch_size * num_samples, seed=seed,
                                   show_progress=show_progress, dtype="auto")
        samples = generator.generate(prompts, plan, seed=seed, seeding="once", desc=f"Generating ({name})")
        for record, texts, truncated in zip(records, samples.texts, samples.truncated):
            for text, is_truncated in zip(texts, truncated):
                if not is_truncated:  # ended on EOS
                    record.completions.append((name, text))
                else:
                    record.truncated[name] = record.truncated.get(name, 0) + 1
        del generator  # one teacher in memory at a time
    yield from records
