"""What ASE-GRPO records around TRL's forwards: behaviour log-probs during HF ``generate`` and block-L readouts
during TRL's policy forwards; and two construction-time helpers (steering-layer check, vLLM steering-table rows)."""

from __future__ import annotations

import dataclasses

import torch

from trl_explore.ase.options import ASEOptions
from trl_explore.ase.steering import readout_positions
from trl_explore.ase.steering.base import block_hidden_states, check_layer_index
from trl_explore.sampling.decode import current_rows, observe_draws
from trl_explore.trl_guards.models import unwrap_model
from trl_explore.trl_guards.sampler_settings import SamplerSettings, processed_logits


class SampledTokenLogProbs:
    """Records ``log softmax(processed_logits(logits, sampler))[sampled token]`` at every decoding step of one
    ``generate`` call: the behaviour log-probs (nats) of the steered sampler.

    A forward hook on the (unwrapped) model reads the logits of the last position after each forward pass;
    the token sampled from them is the ``input_ids`` of the next pass (and, for the last pass, the last column
    of the output). The distribution is the one the token was drawn from: the logits processed by the effective
    sampler (``trl_explore.trl_guards.sampler_settings``: the temperature of ``GRPOConfig`` or of
    ``generation_kwargs``, and the truncated, renormalised distribution under top-k / top-p / min-p), as vLLM's
    ``processed_logprobs`` are on the vLLM path. TRL's ``old_per_token_logps`` (the numerator of the truncated IS
    weight) are of ``softmax(logits / GRPOConfig.temperature)``, untruncated; at the defaults the two conventions
    coincide. Memory: one ``[B, V]`` float32 table at a time.

    Args:
        model: the policy (unwrapped here).
        sampler: the :class:`~trl_explore.trl_guards.sampler_settings.SamplerSettings` (the driver's
        ``trainer.sampler``); a
            number ``T`` means ``SamplerSettings(temperature=T)``.

    Raises:
        ValueError: a sampler setting that is not reproduced
            (:func:`~trl_explore.trl_guards.sampler_settings.check_reproducible`).
    """

    def __init__(self, model, sampler: SamplerSettings | float):
        self.model = unwrap_model(model)
        sampler = sampler if isinstance(sampler, SamplerSettings) else SamplerSettings(temperature=float(sampler))
        processed_logits(torch.zeros(1, 1), sampler)  # refuses what it cannot reproduce, now
        self.sampler = sampler
        self._logps: list[torch.Tensor] = []  # [B] per decoding step
        self._tokens: list[torch.Tensor] = []  # [B] per decoding step
        self._pending: torch.Tensor | None = None  # [B, V] log-probs of the last forward pass
        self._handle = None

    def __enter__(self):
        self._by_row: dict[int, list[tuple[float, int]]] = {}  # trl_explore's decoder: (log-prob, token) per step
        self._handle = self.model.register_forward_hook(self._hook, with_kwargs=True)
        self._observing = observe_draws(self._on_draws)
        self._observing.__enter__()
        return self

    def __exit__(self, *exc):
        self._handle.remove()
        self._observing.__exit__(*exc)
        return False

    def _on_draws(self, rows, logits, tokens, step):
        # trl_explore's decoder (trl_explore.sampling.decode) names the rows of each step: no hook can follow them
        logps = torch.log_softmax(processed_logits(logits, self.sampler), dim=-1)
        drawn = logps.gather(1, tokens.to(logps.device)[:, None]).squeeze(1).cpu()
        for row, logp, token in zip(rows.tolist(), drawn.tolist(), tokens.tolist()):
            self._by_row.setdefault(row, []).append((logp, token))

    def _hook(self, module, args, kwargs, output):
        if current_rows() is not None:
            return  # trl_explore's decoder: _on_draws
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        if self._pending is not None:
            if input_ids is None or input_ids.dim() != 2 or input_ids.shape[1] != 1:
                raise RuntimeError(
                    "ASE behaviour log-probs: expected one new token per decoding step after the prefill; chunked "
                    "prefill, assisted decoding and inputs_embeds are not supported"
                )
            self._record(input_ids[:, -1])
        logits = output.logits if hasattr(output, "logits") else output[0]
        # float32, as generate casts them; at the defaults (T = 1, no truncation) no further [B, V] pass
        self._pending = torch.log_softmax(processed_logits(logits[:, -1, :], self.sampler), dim=-1)

    def _record(self, tokens: torch.Tensor) -> None:
        tokens = tokens.to(self._pending.device).long()
        self._logps.append(self._pending.gather(1, tokens[:, None]).squeeze(1))
        self._tokens.append(tokens)
        self._pending = None

    def per_completion(self, completion_ids: list[list[int]], skip=()) -> list[list[float | None]]:
        """The recorded log-probs of each completion (``completion_ids`` as TRL cut them at the first EOS).

        Args:
            completion_ids: the rows' completion ids.
            skip: per row, True for a row that was not sampled here (e.g. a teacher trajectory put in its place):
                its log-probs are ``None`` (TRL: NaN, no importance-sampling correction).

        Raises:
            RuntimeError: the hook never ran, or a sampled row's ids differ from the recorded tokens.
        """
        skip = tuple(skip) or (False,) * len(completion_ids)
        if self._by_row:
            return self._per_completion_from_draws(completion_ids, skip)
        if self._pending is None:
            raise RuntimeError("ASE behaviour log-probs: the model's forward hook never ran during generation")
        num_steps = len(self._logps) + 1
        last = [ids[num_steps - 1] if len(ids) >= num_steps and not off else 0
                for ids, off in zip(completion_ids, skip)]
        self._record(torch.tensor(last))
        logps = torch.stack(self._logps, dim=1).cpu()  # [B, steps]
        tokens = torch.stack(self._tokens, dim=1).cpu()
        out = []
        for i, ids in enumerate(completion_ids):
            if skip[i]:
                out.append([None] * len(ids))
                continue
            if len(ids) > num_steps or tokens[i, : len(ids)].tolist() != list(ids):
                raise RuntimeError(
                    f"ASE behaviour log-probs: the tokens recorded for row {i} differ from its completion"
                )
            out.append(logps[i, : len(ids)].tolist())
        return out

    def _per_completion_from_draws(self, completion_ids, skip) -> list[list[float | None]]:
        out = []
        for i, ids in enumerate(completion_ids):
            if skip[i]:
                out.append([None] * len(ids))
                continue
            drawn = self._by_row.get(i, [])
            if [token for _, token in drawn[: len(ids)]] != list(ids):
                raise RuntimeError(
                    f"ASE behaviour log-probs: the tokens recorded for row {i} differ from its completion"
                )
            out.append([logp for logp, _ in drawn[: len(ids)]])
        return out


class BlockReadouts:
    """Context that captures the output of ``block`` at each row's readout position during TRL's forward pass(es).

    The readout position of a row is ``floor(fraction * len(completion))`` (SPEC §3.3); TRL may chunk the batch,
    so each forward adds one ``[rows, d]`` float32 CPU tensor. :meth:`readouts` gives them all, ``[B, d]``.
    """

    def __init__(self, block, input_ids, attention_mask, logits_to_keep: int, fraction: float, hidden_size: int):
        prompt_len = input_ids.shape[1] - logits_to_keep
        self._positions = prompt_len + readout_positions(attention_mask[:, prompt_len:], fraction)
        self._block, self._hidden_size = block, hidden_size
        self._parts: list[torch.Tensor] = []
        self._handle = None

    def _hook(self, module, args, output):
        # no_grad: the readout is a copy, and an op on the graph here would be saved for backward; under gradient
        # checkpointing the recomputed forward runs without this hook, and a different count of saved tensors is
        # refused (torch's CheckpointError, seen with transformers 5.17)
        with torch.no_grad():
            hidden = block_hidden_states(output)
            start = sum(len(part) for part in self._parts)
            rows = torch.arange(hidden.shape[0], device=hidden.device)
            pos = self._positions[start : start + hidden.shape[0]].to(hidden.device)
            self._parts.append(hidden[rows, pos].float().cpu())

    def __enter__(self):
        self._handle = self._block.register_forward_hook(self._hook)
        return self

    def __exit__(self, *exc):
        self._handle.remove()
        return False

    def readouts(self) -> torch.Tensor:
        return torch.cat(self._parts) if self._parts else torch.zeros(0, self._hidden_size)


def check_steering_layer(model, layer: int) -> None:
    """Raise ``ValueError`` if ``layer`` is not a decoder block of ``model`` (a path / Hub id or a model)."""
    if isinstance(model, str):
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model)
    else:
        config = unwrap_model(model).config
    num_layers = getattr(config.get_text_config(), "num_hidden_layers", None)
    if num_layers is not None:
        check_layer_index(layer, num_layers)


def max_routes(options: ASEOptions, args) -> int:
    """Rows of the vLLM steering table: the clean route plus the most vectors one generate call can use (K, or one
    per rollout of the process's generation batch, times the tensor-parallel gather, for ``unstructured_random``).

    Args:
        options: the :class:`ASEOptions`; args: the training config (``GRPOConfig``).
    """
    rows = args.per_device_train_batch_size * args.steps_per_generation * max(1, args.vllm_tensor_parallel_size)
    return 1 + (rows if not options.control.estimates_bank else options.num_vectors)


@dataclasses.dataclass(frozen=True)
class ASERollout:
    """Routes of one generation call: steering ids / table given to the steerer, logged routes [B] (0 = clean,
    -1 = offline row), steered readout offsets ``alpha * v`` [B, d] (None: unsteered)."""

    steering_ids: torch.Tensor | None
    table: torch.Tensor | None
    routes: torch.Tensor
    offsets: torch.Tensor | None


class BankStep:
    """The readouts of one training generation, filled micro-batch by micro-batch until the bank update runs."""

    def __init__(self, problem_ids, correct, offsets, valid, hidden_size):
        self.problem_ids, self.correct, self.offsets, self.valid = problem_ids, correct, offsets, valid
        self.readouts = torch.zeros(len(valid), hidden_size)
        self.filled = torch.zeros(len(valid), dtype=torch.bool)
        self.updated = False

    def store(self, rows: torch.Tensor, readouts: torch.Tensor) -> bool:
        """Store ``readouts`` of ``rows``; True when every row of the generation has been read."""
        if readouts.shape[0] != rows.numel():
            raise RuntimeError(f"ASE: captured {readouts.shape[0]} readouts for {rows.numel()} rows")
        self.readouts[rows], self.filled[rows] = readouts, True
        return bool(self.filled.all())
