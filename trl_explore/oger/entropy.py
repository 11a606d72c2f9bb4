"""Last-token entropy ``H_last`` (OGER Eq. 6), the confidence proxy of the entropy refinement.

Definition used throughout trl_explore: ``H_last_i`` is the Shannon entropy, in nats, of the next-token distribution
that PRODUCED the final completion token of ``tau_i`` (EOS included when the completion stopped; the last kept token
when it was truncated): the distribution the sampler drew that token from, i.e. the policy's logits processed by the
effective sampler (``trl_explore.trl_guards.sampler_settings``: the temperature of ``GRPOConfig`` or of
``generation_kwargs``,
and the truncated, renormalised distribution under top-k / top-p / min-p; the raw policy at the defaults ``T = 1``,
no truncation). Settings that cannot be reproduced (``repetition_penalty``, ...) are refused when the trainer is
built (``OGEROptions.apply``). The same convention holds on every generation path: the HF recorder below processes
the logits ``generate`` computed; without it (vLLM, ...) the value comes from TRL's no-grad scoring forward when
that is the sampler's distribution (``softmax(logits / GRPOConfig.temperature)``, nothing truncated), otherwise from
the driver's ``behaviour_forward``.

How it is obtained, without an extra policy forward pass when generating with transformers: hooks keep, for each
row still generating, the logits of its latest decoding step (:class:`LastTokenEntropyRecorder`; under the package's
decoder, :mod:`trl_explore.sampling.decode`, the decoder tells it each step's rows and logits instead), and the entropy
is taken once per row when generation ends: one ``[B, V]`` entropy per batch instead of one per decoding step. The
value is the same as an entropy taken at every step and read at step ``len_i - 1`` (tested against HF's per-step
processed scores and a teacher-forced forward).
"""
from __future__ import annotations

import time

import torch

from trl_explore.sampling.decode import current_rows, observe_draws
from trl_explore.trl_guards.sampler_settings import SamplerSettings, entropy_from_logits, processed_logits

__all__ = ["LastTokenEntropyRecorder", "entropy_from_logits", "last_token_values"]


def last_token_values(per_step: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Pick, for each row, the value at its last completion position ``lengths - 1``.

    Args:
        per_step: ``[B, T]`` per-position values (e.g. entropies of each decoding step).
        lengths: ``[B]`` completion lengths in tokens, each in ``[1, T]``.

    Returns:
        ``[B]`` values.

    Raises:
        ValueError: if a length is outside ``[1, T]`` (an empty completion has no last token).
    """
    lengths = lengths.to(per_step.device).long()
    bad = (lengths < 1) | (lengths > per_step.size(1))
    if bad.any():
        rows = torch.nonzero(bad).flatten().tolist()
        raise ValueError(f"completion lengths of rows {rows} are outside [1, {per_step.size(1)}]")
    return per_step.gather(1, (lengths - 1).unsqueeze(1)).squeeze(1)


class LastTokenEntropyRecorder:
    """Records, during one ``model.generate`` call, the logits that produced each row's last token(s).

    Use as a context manager around one ``generate`` call on a causal LM; afterwards :meth:`last_token_entropy`
    gives ``H_last`` per row. Two hooks: a forward hook on the LM head reads each decoding step's last-position
    logits ``[B, V]``, and a forward pre-hook on the input embeddings reads the token sampled at the previous step
    (the next step's input). A row is live until it samples a token of ``eos_token_ids`` (where TRL cuts the
    completion); each step keeps its logits for the live rows only (``torch.where``, no reduction), so when
    generation ends every row holds the logits of its final step, and the entropy is taken once, on ``[B, V]``,
    instead of at every step. ``keep_previous`` also keeps the step before (``OGERConfig.last_token="before_eos"``).

    Cost per decoding step: nothing while every row is live (references to the step's logits, which ``generate``
    allocates anew at every step), then one (two with ``keep_previous``) ``[B, V]`` select; memory: one (two)
    ``[B, V]`` logits tables in the model's dtype. ``seconds`` is the time spent in the hooks (the
    ``oger: H_last (generate hooks)`` phase). The hooks are removed on exit, also on errors.

    Args:
        model: the (unwrapped) causal LM (``get_output_embeddings()`` and ``get_input_embeddings()`` are hooked).
        sampler: the :class:`~trl_explore.trl_guards.sampler_settings.SamplerSettings` ``generate`` samples with (the
            driver's ``trainer.sampler``); entropies are of ``softmax(processed_logits(logits, sampler))``. A number
            ``T`` means ``SamplerSettings(temperature=T)`` (default 1).
        eos_token_ids: the ids that end a completion (TRL's ``trainer.eos_token_ids``).
        keep_previous: also keep each row's logits of the step before its last one.

    Raises:
        ValueError: a temperature <= 0, or a sampler setting that is not reproduced
            (:func:`~trl_explore.trl_guards.sampler_settings.check_reproducible`).
    """

    def __init__(self, model: torch.nn.Module, sampler: SamplerSettings | float = 1.0, eos_token_ids=(),
                 keep_previous: bool = False):
        if not isinstance(sampler, SamplerSettings):
            if not sampler > 0:
                raise ValueError(f"temperature must be > 0, got {sampler}")
            sampler = SamplerSettings(temperature=float(sampler))
        processed_logits(torch.zeros(1, 1), sampler)  # refuses what it cannot reproduce, now
        self.sampler = sampler
        head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        embed = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        if head is None or embed is None:
            raise ValueError(f"{type(model).__name__} has no LM head or input embeddings to record entropies from")
        self._head, self._embed = head, embed
        self._eos = torch.tensor(sorted({int(i) for i in eos_token_ids}), dtype=torch.long)
        self.keep_previous = keep_previous
        self._handles: list = []
        self._reset()

    def _reset(self) -> None:
        self.num_steps, self.seconds = 0, 0.0
        self._live = self._held = self._held_step = self._prev = self._prev_step = None

    def _on_input_ids(self, module, args):
        if current_rows() is not None:
            return  # trl_explore's decoder: its rows are followed by _on_draws
        if self.num_steps == 0:
            return  # the prefill: prompt tokens, nothing sampled yet
        start = time.perf_counter()
        input_ids = args[0] if args else None
        if input_ids is None or input_ids.dim() != 2 or input_ids.size(1) != 1:
            raise RuntimeError("OGER's H_last recorder expects one new token per decoding step after the prefill; "
                               "chunked prefill, assisted decoding and inputs_embeds are not supported")
        self._live = self._live & ~torch.isin(input_ids[:, 0], self._eos)
        self.seconds += time.perf_counter() - start

    def _on_draws(self, rows, logits, tokens, step):
        # trl_explore's decoder (trl_explore.sampling.decode): the logits each live row drew its step-th token from
        start = time.perf_counter()
        logits = logits.detach()
        if self._held is None:  # step 0: every row of the call, in order
            self._held = logits.clone()
            self._held_step = torch.zeros(len(rows), dtype=torch.long, device=logits.device)
            if self.keep_previous:
                self._prev, self._prev_step = self._held.clone(), torch.full_like(self._held_step, -1)
        else:
            index = rows.to(logits.device)
            if self.keep_previous:
                self._prev[index], self._prev_step[index] = self._held[index], self._held_step[index]
            self._held[index] = logits
            self._held_step[index] = step
        self.num_steps = max(self.num_steps, step + 1)
        self.seconds += time.perf_counter() - start

    def _on_logits(self, module, args, output):
        if current_rows() is not None:
            return  # trl_explore's decoder: its rows are followed by _on_draws
        start = time.perf_counter()
        logits = (output[0] if isinstance(output, tuple) else output)[:, -1, :].detach()
        step = self.num_steps
        if step == 0:
            rows = logits.size(0)
            self._eos = self._eos.to(logits.device)
            self._live = torch.ones(rows, dtype=torch.bool, device=logits.device)
            self._held, self._held_step = logits, torch.zeros(rows, dtype=torch.long, device=logits.device)
            if self.keep_previous:
                self._prev, self._prev_step = logits, torch.full_like(self._held_step, -1)
        elif bool(self._live.all()):  # every row still generating (most steps): keep references, no copy
            if self.keep_previous:
                self._prev, self._prev_step = self._held, self._held_step
            self._held, self._held_step = logits, torch.full_like(self._held_step, step)
        else:
            live = self._live
            if self.keep_previous:
                self._prev = torch.where(live.unsqueeze(1), self._held, self._prev)
                self._prev_step = torch.where(live, self._held_step, self._prev_step)
            self._held = torch.where(live.unsqueeze(1), logits, self._held)
            self._held_step = torch.where(live, step, self._held_step)
        self.num_steps = step + 1
        self.seconds += time.perf_counter() - start

    def __enter__(self) -> LastTokenEntropyRecorder:
        self._reset()
        self._handles = [self._embed.register_forward_pre_hook(self._on_input_ids),
                         self._head.register_forward_hook(self._on_logits)]
        self._observing = observe_draws(self._on_draws)
        self._observing.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles = []
        self._observing.__exit__(*exc)

    def last_token_entropy(self, lengths: torch.Tensor) -> torch.Tensor:
        """``[B]`` float32 CPU entropy (nats) of the distribution that produced token ``lengths - 1`` of each row
        (the processed one: ``sampler``).

        Args:
            lengths: ``[B]`` positions, the completion lengths (or one less with ``keep_previous``, for the token
                before a final EOS), each in ``[1, steps]``.

        Raises:
            RuntimeError: if nothing was recorded, the batch size differs, or a row's step was not kept (a length
                that does not end where the row sampled its first EOS or reached the step limit).
        """
        if self._held is None:
            raise RuntimeError("OGER's H_last recorder saw no decoding step (a backend that bypasses the LM head?)")
        want = lengths.to(self._held_step.device).long() - 1
        if want.numel() != self._held.size(0):
            raise RuntimeError(f"recorded {self._held.size(0)} rows, asked for {want.numel()} completions")
        use_held = self._held_step == want
        found = use_held | (self._prev_step == want) if self.keep_previous else use_held
        if not bool(found.all()):
            rows = torch.nonzero(~found).flatten().tolist()
            raise RuntimeError(f"H_last of rows {rows}: the decoding steps {want[~found].tolist()} were not kept "
                               f"(kept: {self._held_step[~found].tolist()}); lengths must end at the first EOS")
        logits = self._held if not self.keep_previous else torch.where(use_held.unsqueeze(1), self._held, self._prev)
        return entropy_from_logits(processed_logits(logits, self.sampler)).cpu()
