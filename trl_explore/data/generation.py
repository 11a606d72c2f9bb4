"""Offline trajectories sampled from teacher models (OGER §3.1: "generating supplementary
trajectories across multiple teacher models").

:func:`generated_records` prompts every teacher with every problem and yields
:class:`~trl_explore.data.sources.ProblemRecord` s that the builder merges with the input records.
Backend: vLLM when installed (``backend="auto"``), else transformers ``generate`` (batched, left
padding). A generation that reaches ``max_new_tokens`` without an end-of-sequence token is counted
as truncated (like CHAMP's ``LENGTH_CURRENT``), never kept.
"""

from __future__ import annotations

import importlib.util
import pathlib
from collections.abc import Iterable, Iterator, Mapping, Sequence

from tqdm.auto import tqdm

from trl_explore.data.prompts import PromptPreset, build_prompt, get_prompt_preset
from trl_explore.data.sources import ProblemRecord


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


def hf_generate(
    model_path: str,
    prompts: Sequence[list[dict]],
    num_samples: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    batch_size: int,
    seed: int,
    show_progress: bool = True,
) -> list[list[tuple[str, bool]]]:
    """Sample with transformers ``generate``.

    Args:
        model_path: a causal LM folder or Hub id whose tokenizer has a chat template.
        prompts: conversational prompts.
        num_samples: completions per prompt.
        max_new_tokens: generation budget, tokens.
        temperature: ``0`` for greedy decoding.
        batch_size: prompts per ``generate`` call.

    Returns:
        Per prompt, ``num_samples`` pairs ``(text, finished)``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    eos = model.generation_config.eos_token_id
    eos_ids = set(eos if isinstance(eos, list) else [eos if eos is not None else tokenizer.eos_token_id])
    sampling = dict(do_sample=True, temperature=temperature, top_p=top_p) if temperature > 0 else dict(do_sample=False)
    torch.manual_seed(seed)
    out = []
    for start in tqdm(range(0, len(prompts), batch_size), desc=f"Generating ({model_path})", disable=not show_progress):
        batch = prompts[start : start + batch_size]
        texts = [tokenizer.apply_chat_template(p, tokenize=False, add_generation_prompt=True) for p in batch]
        inputs = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            generated = model.generate(
                **inputs,
                max_new_tokens=max_new_tokens,
                num_return_sequences=num_samples,
                pad_token_id=tokenizer.pad_token_id,
                **sampling,
            )
        new = generated[:, inputs["input_ids"].shape[1] :].tolist()
        for i in range(len(texts)):
            pairs = [split_finished(ids, eos_ids) for ids in new[i * num_samples : (i + 1) * num_samples]]
            out.append([(tokenizer.decode(ids, skip_special_tokens=True), done) for ids, done in pairs])
    return out


def vllm_generate(
    model_path: str,
    prompts: Sequence[list[dict]],
    num_samples: int,
    max_new_tokens: int,
    temperature: float,
    top_p: float,
    seed: int,
) -> list[list[tuple[str, bool]]]:
    """Sample with vLLM's ``LLM.chat`` (same arguments and return value as :func:`hf_generate`)."""
    from vllm import LLM, SamplingParams

    llm = LLM(model=model_path, seed=seed)
    params = SamplingParams(n=num_samples, max_tokens=max_new_tokens, temperature=temperature, top_p=top_p, seed=seed)
    outputs = llm.chat(list(prompts), params)
    return [[(c.text, c.finish_reason != "length") for c in o.outputs] for o in outputs]


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
        ValueError: no teacher, a bad ``backend``, or ``num_samples < 1``.
    """
    named = teacher_names(teachers)
    if backend == "auto":
        backend = "vllm" if importlib.util.find_spec("vllm") is not None else "transformers"
    if backend not in ("vllm", "transformers"):
        raise ValueError(f"backend must be 'auto', 'vllm' or 'transformers', got {backend!r}.")
    if num_samples < 1:
        raise ValueError(f"num_samples must be >= 1, got {num_samples}.")
    preset = system_prompt if isinstance(system_prompt, PromptPreset) else get_prompt_preset(system_prompt)
    problems = list(problems)
    prompts = [build_prompt(p.problem, preset, where=f"problem {p.problem_id!r}") for p in problems]
    records = [ProblemRecord(p.problem_id, p.problem, p.answer) for p in problems]
    for name, path in named.items():
        if backend == "vllm":
            samples = vllm_generate(path, prompts, num_samples, max_new_tokens, temperature, top_p, seed)
        else:
            samples = hf_generate(
                path, prompts, num_samples, max_new_tokens, temperature, top_p, batch_size, seed, show_progress
            )
        for record, outputs in zip(records, samples):
            for text, finished in outputs:
                if finished:
                    record.completions.append((name, text))
                else:
                    record.truncated[name] = record.truncated.get(name, 0) + 1
    yield from records
