"""The transformers backend: batched sampling (:mod:`~trl_explore.sampling.decode`, or ``model.generate``), seeded
per batch, resumable."""

from __future__ import annotations

import functools
import logging
import pathlib
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict

from trl_explore.sampling.cache import BatchCache
from trl_explore.sampling.plan import Generations, SamplingPlan, Steering
from trl_explore.sampling.seeds import SEEDINGS, batch_seed, isolated_rng

logger = logging.getLogger(__name__)


class TransformersGenerator:
    """Batched sampling with the package's decoder or ``model.generate`` (left padding, chat template, progress bar).

    Rows are ``(prompt, sample)`` pairs taken prompt by prompt, ``batch_size`` rows per ``generate``
    call, so the samples of one prompt share batches and little padding is wasted.

    Args:
        model: a causal LM (``PreTrainedModel``), in eval mode.
        tokenizer: its tokenizer with a chat template (the pad token defaults to EOS).
        batch_size: rows per ``generate`` call (default 32).
        show_progress: tqdm bar per call of :meth:`generate`.
        fast_decode: sample with :func:`~trl_explore.sampling.decode.fast_generate` (default True): each prompt's
            prefill shared by its samples, finished rows dropped, the same next-token distribution as ``generate``
            (other samples for the same seed); settings it does not reproduce fall back to ``generate``. False:
            ``model.generate``.
        partial_dir: folder where every finished batch is appended at once (``<desc>-<fingerprint>.jsonl``,
            :class:`~trl_explore.sampling.cache.BatchCache`), and read back by the next call with the same work (same
            prompts, plan, seed, batch size, routes and steering), which then generates only the missing batches: a
            killed evaluation resumes where it stopped. With the default seeding each batch draws from
            ``torch.manual_seed(seed + batch index)``, so a resumed run gives the same samples as an uninterrupted
            one. ``None`` (default): nothing is written.
        chat_template_kwargs: extra variables of the chat template (the training run's
            ``GRPOConfig.chat_template_kwargs``, e.g. ``{"enable_thinking": False}``), so a prompt is rendered as in
            training (:func:`~trl_explore.sampling.render.render_prompt`); default none.
        chat_template: a chat template to use instead of the tokenizer's (TRL's ``chat_template``); default None.

    Raises:
        ValueError: ``batch_size < 1`` or a tokenizer without a chat template.
    """

    def __init__(self, model, tokenizer, batch_size: int = 32, show_progress: bool = True,
                 partial_dir: str | pathlib.Path | None = None, chat_template_kwargs: Mapping | None = None,
                 chat_template: str | None = None, fast_decode: bool = True):
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size}")
        if not getattr(tokenizer, "chat_template", None):
            raise ValueError("the tokenizer has no chat template; the sampling stack takes chat prompts")
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.show_progress = show_progress
        self.fast_decode = fast_decode
        self.partial_dir = None if partial_dir is None else pathlib.Path(partial_dir)
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.chat_template = chat_template
        if tokenizer.pad_token_id is None:
            tokenizer.pad_token = tokenizer.eos_token

    def encode(self, messages: Sequence[dict]) -> list[int]:
        """Token ids of a chat prompt with the generation prompt appended, rendered as TRL renders a training prompt
        with this generator's chat template settings (:func:`~trl_explore.sampling.render.render_prompt`)."""
        from trl_explore.sampling.render import render_prompt

        return render_prompt(self.tokenizer, messages, chat_template_kwargs=self.chat_template_kwargs,
                             chat_template=self.chat_template)

    def generate(self, prompts: Sequence[Sequence[dict]], plan: SamplingPlan, *, steering: Steering | None = None,
                 seed: int = 0, seeding: str = "per_batch", desc: str = "generate") -> Generations:
        """Sample ``plan.num_samples`` completions for each prompt.

        Args:
            prompts: ``P`` chat prompts.
            plan: sampling settings.
            steering: ``None`` or a :class:`~trl_explore.sampling.plan.Steering`: the samples get
                ``steering.routes(P, n)`` and each batch's ``generate`` runs inside ``steering.context(route ids of
                its rows)``.
            seed: the sampling seed.
            seeding: ``"per_batch"`` (batch ``i`` samples after ``torch.manual_seed(seed + i)``) or ``"once"`` (one
                ``torch.manual_seed(seed)`` before the first batch; no ``partial_dir``); see
                :mod:`~trl_explore.sampling.seeds`.
            desc: progress-bar label (and name of the partial file, see ``partial_dir``).

        Returns:
            :class:`~trl_explore.sampling.plan.Generations`. The random states (torch's CPU generator, the model
            device's, Python's and NumPy's) are left as they were on entry (:func:`~trl_explore.sampling.seeds.
            isolated_rng`): a call beside training does not move training's draws.

        Raises:
            TypeError: ``steering`` is not a :class:`~trl_explore.sampling.plan.Steering`.
            ValueError: an unknown ``seeding``, ``"once"`` with a ``partial_dir``, or routes of the wrong shape.
        """
        import torch
        from tqdm.auto import tqdm

        from trl_explore.sampling.decode import fast_generate

        if steering is not None and not isinstance(steering, Steering):
            raise TypeError(f"steering must be a trl_explore.sampling.Steering (ASE: trl_explore.ase.inference."
                            f"steering_for(steerer, vectors, alpha)), got {type(steering).__name__}")
        SEEDINGS.check(seeding)
        if seeding == "once" and self.partial_dir is not None:
            raise ValueError("seeding='once' draws every batch from one running generator, so finished batches cannot "
                             "be resumed: use seeding='per_batch' with partial_dir, or no partial_dir")
        start = time.perf_counter()
        n = plan.num_samples
        encoded = [self.encode(p) for p in prompts]
        routes = [[0] * n for _ in encoded]
        if steering is not None:
            routes = [list(map(int, r)) for r in steering.routes(len(encoded), n)]
            if len(routes) != len(encoded) or any(len(r) != n for r in routes):
                raise ValueError(f"steering.routes({len(encoded)}, {n}) must give {len(encoded)} lists of {n} routes")
        rows = [(p, s) for p in range(len(encoded)) for s in range(n)]
        texts = [[""] * n for _ in encoded]
        token_ids: list[list[list[int]]] = [[[] for _ in range(n)] for _ in encoded]
        truncated = [[False] * n for _ in encoded]
        eos_ids = self.eos_ids()
        pad_id = self.tokenizer.pad_token_id
        device = next(self.model.parameters()).device
        sampling = dict(do_sample=True, temperature=plan.temperature, top_p=plan.top_p)
        if plan.top_k is not None:  # None: the model's generation_config.top_k
            sampling["top_k"] = plan.top_k
        if plan.temperature == 0:
            sampling = dict(do_sample=False, temperature=None, top_p=None, top_k=None)
        batches = [rows[i : i + self.batch_size] for i in range(0, len(rows), self.batch_size)]
        cache = None
        if self.partial_dir is not None:
            key = [encoded, asdict(plan), seed, self.batch_size, routes, None if steering is None else steering.key]
            key += ["fast"] if self.fast_decode else []  # other samples than generate's: never mixed in one file
            cache = BatchCache(self.partial_dir, desc, key)
        done = cache.read() if cache is not None else {}
        for p, s, ids, is_truncated in done.values():
            token_ids[p][s], truncated[p][s] = ids, is_truncated
            texts[p][s] = self.tokenizer.decode(ids, skip_special_tokens=True)
        if done:
            logger.info("%s: %d of %d samples read back from %s", desc, len(done), len(rows), cache.path)
        # The batches reseed torch's global generator (batch_seed); forked so that the caller's next draws (training's
        # rollouts, a test's sampling) are what they would have been without this call. The samples are unchanged.
        with isolated_rng(device):
            for index, batch in enumerate(tqdm(batches, desc=desc, disable=not self.show_progress, unit="batch")):
                if all((p, s) in done for p, s in batch):
                    continue
                if (batch_seed_value := batch_seed(seeding, seed, index)) is not None:
                    torch.manual_seed(batch_seed_value)
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
                sample = functools.partial(fast_generate, self.model) if self.fast_decode else self.model.generate
                with torch.no_grad():
                    if steering is None:
                        output = sample(**kwargs)
                    else:
                        route_ids = torch.tensor([routes[p][s] for p, s in batch], dtype=torch.long)
                        with steering.context(route_ids):
                            output = sample(**kwargs)
                for i, (p, s) in enumerate(batch):
                    ids = output[i, width:].tolist()
                    cut = next((j + 1 for j, t in enumerate(ids) if t in eos_ids), None)
                    truncated[p][s] = cut is None and len(ids) >= plan.max_new_tokens
                    ids = ids[:cut] if cut is not None else ids  # no EOS: ran to max_new_tokens, no padding
                    token_ids[p][s] = ids
                    texts[p][s] = self.tokenizer.decode(ids, skip_special_tokens=True)
                if cache is not None:
                    cache.append([(p, s, token_ids[p][s], truncated[p][s]) for p, s in batch])
        return Generations(texts, token_ids, encoded, truncated, routes, time.perf_counter() - start)

    def eos_ids(self) -> list[int]:
        """The ids that end a completion: the model's ``generation_config.eos_token_id`` (one or several) and the
        tokenizer's EOS.

        Raises:
            ValueError: neither defines one.
        """
        eos = getattr(self.model.generation_config, "eos_token_id", None)
        eos = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in eos:
            eos.append(self.tokenizer.eos_token_id)
        if not eos:
            raise ValueError("neither the model nor the tokenizer defines an EOS token")
        return eos
