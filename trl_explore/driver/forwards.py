"""Teacher-forced policy forwards of :class:`~trl_explore.driver.ExplorationTrainer` on given completions: TRL's own
(the trained policy's distribution) and the behaviour one (the distribution the rollouts were sampled from: the
components' steering and the effective sampler, :mod:`trl_explore.trl_guards.sampler_settings`). A mixin over
``GRPOTrainer`` that provides TRL's forward with positions from the attention mask (``_trl_forward``) and reads the
driver's ``behaviour_context`` and ``sampler``."""

from __future__ import annotations

import logging

import torch

from trl_explore.driver.components import Forward
from trl_explore.trl_guards.positions import mask_positions
from trl_explore.trl_guards.prefix_forward import (
    group_chunks,
    share_prompt_blocker,
    shared_prompt_forward,
    shared_prompt_groups,
)
from trl_explore.trl_guards.sampler_settings import processed_logits, token_logps_and_entropy

logger = logging.getLogger(__name__)


class TeacherForcedMixin:
    """``_trl_forward``, ``policy_forward`` and ``behaviour_forward`` (below); the driver provides
    ``behaviour_context`` and ``sampler``."""

    def _trl_forward(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None, compute_entropy=False,
                     compute_aux_loss=False, **extra):
        """TRL's ``_get_per_token_logps_and_entropies`` with position ids taken from the attention mask, as
        ``generate`` numbers them. TRL builds the model inputs inside that method (ids, mask, multimodal keys) and
        has no ``position_ids`` argument, so :func:`~trl_explore.trl_guards.positions.mask_positions` passes them
        through a pre-hook on models with absolute positions (GPT-2, ...); RoPE / ALiBi models run unchanged.

        With ``share_prompt_forward`` (text only, no auxiliary loss,
        :func:`~trl_explore.trl_guards.prefix_forward.share_prompt_blocker`) each group's prompt is run once instead
        (:mod:`trl_explore.trl_guards.prefix_forward`), in chunks of whole groups of about ``batch_size`` rows; the
        same values to float rounding."""
        if (getattr(self.args, "share_prompt_forward", False) and not compute_aux_loss
                and all(value is None for value in extra.values())):
            groups = shared_prompt_groups(input_ids, attention_mask, logits_to_keep)
            blocker = share_prompt_blocker(model, self.accelerator.num_processes) if groups is not None else None
            if groups is not None and blocker is None:
                return self._shared_prompt_forward(model, input_ids, attention_mask, logits_to_keep, groups,
                                                   batch_size, compute_entropy)
            said = self.__dict__.setdefault("_share_prompt_blockers_said", set())  # one warning per reason
            if blocker is not None and blocker not in said:
                said.add(blocker)
                logger.warning("share_prompt_forward is on, but this forward runs TRL's: %s", blocker)
        with mask_positions(model):
            return super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep,
                                                              batch_size, compute_entropy=compute_entropy,
                                                              compute_aux_loss=compute_aux_loss, **extra)

    def _shared_prompt_forward(self, model, input_ids, attention_mask, logits_to_keep, groups, batch_size,
                               compute_entropy):
        logps, entropies = [], []
        for chunk in group_chunks(groups, batch_size):
            first, last = chunk[0][0], chunk[-1][1]
            local = [(start - first, end - first) for start, end in chunk]
            with self.accelerator.autocast():
                lp, ent = shared_prompt_forward(model, input_ids[first:last], attention_mask[first:last],
                                                logits_to_keep, local, compute_entropy=compute_entropy)
            logps.append(lp)
            entropies.append(ent)
        return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None

    def _teacher_forced_batch(self, prompt_ids: list, completion_ids: list):
        """``(input_ids [B, P + T], attention_mask, completion_ids [B, T])`` on the device: left-padded prompts,
        right-padded completions, as TRL lays out its batch."""
        from trl.trainer.utils import pad

        pad_id, device = self._tokenizer.pad_token_id, self.accelerator.device
        p = pad([torch.tensor(x) for x in prompt_ids], padding_value=pad_id, padding_side="left")
        c = pad([torch.tensor(x) for x in completion_ids], padding_value=pad_id, padding_side="right")
        pm = pad([torch.ones(len(x), dtype=torch.long) for x in prompt_ids], padding_value=0, padding_side="left")
        cm = pad([torch.ones(len(x), dtype=torch.long) for x in completion_ids], padding_value=0, padding_side="right")
        return torch.cat([p, c], 1).to(device), torch.cat([pm, cm], 1).to(device), c.to(device)

    def policy_forward(self, prompt_ids: list, completion_ids: list, compute_entropy: bool = True) -> Forward:
        """A no-grad, teacher-forced forward of the policy on the given completions (lists of ids, left-padded
        prompts, right-padded completions), positions from the attention mask: TRL's forward, so its ``[B, T]``
        log-probs and entropies (nats) are of ``softmax(logits / GRPOConfig.temperature)``, the trained policy's
        distribution (not necessarily the sampler's: :meth:`behaviour_forward`). Cost: one forward over the batch."""
        input_ids, attention_mask, completions = self._teacher_forced_batch(prompt_ids, completion_ids)
        with torch.no_grad():
            return Forward(*self._trl_forward(self.model, input_ids, attention_mask, completions.size(1),
                                              compute_entropy=compute_entropy))

    def behaviour_forward(self, mode: str, prompt_ids: list, completion_ids: list,
                          positions: torch.Tensor | None = None) -> Forward:
        """A no-grad, teacher-forced forward under the distribution the current rollouts were sampled from: the
        components' :meth:`behaviour_context` (e.g. a route's steering) and the effective sampler :attr:`sampler`
        (temperature from ``generation_kwargs`` when given there, top-k / top-p / min-p as the truncated,
        renormalised distribution: :func:`~trl_explore.trl_guards.sampler_settings.processed_logits`).

        When the sampler's distribution is TRL's (:meth:`SamplerSettings.matches_trl`, the default) this is
        :meth:`policy_forward` (TRL's fused forward, no logits); otherwise the logits of the positions asked for are
        computed (``[rows, positions, V]`` float32 per chunk of rows, about 1 GiB at most) and processed.

        Args:
            mode: ``"train"`` or ``"eval"`` (the behaviour contexts depend on it).
            prompt_ids, completion_ids: lists of ids per row.
            positions: ``[B]`` completion lengths ``l_i`` in ``[1, len_i]``: only the distribution that produced token
                ``l_i - 1`` of each row is computed. None: every completion position.

        Returns:
            :class:`~trl_explore.driver.components.Forward` with ``logps`` (log-prob of each token under the
            distribution it was drawn from; ``-inf`` for a token outside the kept set) and ``entropies`` (that
            distribution's Shannon entropy), nats, ``[B, T]`` (``[B, 1]`` with ``positions``).

        Raises:
            ValueError: a position outside ``[1, len_i]``.
        """
        if positions is not None:
            positions = positions.long().cpu()
            lengths = torch.tensor([len(c) for c in completion_ids])
            bad = (positions < 1) | (positions > lengths)
            if bad.any():
                rows = torch.nonzero(bad).flatten().tolist()
                raise ValueError(f"positions of rows {rows} are outside [1, completion length]")
        with self.behaviour_context(mode):
            if self.sampler.matches_trl(self.temperature):
                forward = self.policy_forward(prompt_ids, completion_ids, compute_entropy=True)
                if positions is None:
                    return forward
                index = (positions - 1).to(forward.logps.device).unsqueeze(1)
                return Forward(forward.logps.gather(1, index), forward.entropies.gather(1, index), None)
            return self._processed_forward(prompt_ids, completion_ids, positions)

    def _processed_forward(self, prompt_ids, completion_ids, positions) -> Forward:
        """:meth:`behaviour_forward` with logits: the model's own forward (not TRL's fused head), ``logits_to_keep``
        the positions asked for, processed by the sampler."""
        input_ids, attention_mask, completions = self._teacher_forced_batch(prompt_ids, completion_ids)
        num_rows, width = completions.shape
        prompt_width = input_ids.size(1) - width
        columns = torch.arange(width).expand(num_rows, -1) if positions is None else (positions - 1).unsqueeze(1)
        keep = torch.unique(columns)  # completion columns; the logits at prompt_width - 1 + c predict column c
        vocab = self.model.config.get_text_config().vocab_size
        chunk = max(1, (1 << 28) // max(1, len(keep) * vocab))
        logps, entropies = [], []
        with torch.no_grad(), mask_positions(self.model):
            for start in range(0, num_rows, chunk):
                rows = slice(start, start + chunk)
                with self.accelerator.autocast():
                    logits = self.model(input_ids=input_ids[rows], attention_mask=attention_mask[rows],
                                        logits_to_keep=(prompt_width - 1 + keep).to(input_ids.device),
                                        use_cache=False).logits
                if positions is not None:  # each row's own column among the kept ones: [r, 1, V]
                    where = torch.searchsorted(keep, columns[rows]).to(logits.device)
                    logits = logits.gather(1, where.unsqueeze(-1).expand(-1, -1, logits.size(-1)))
                tokens = completions[rows].gather(1, columns[rows].to(completions.device))
                lp, ent = token_logps_and_entropy(processed_logits(logits, self.sampler), tokens.to(logits.device))
                logps.append(lp)
                entropies.append(ent)
        return Forward(torch.cat(logps), torch.cat(entropies), None)
