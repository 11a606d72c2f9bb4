"""``ASEGRPOTrainer``: TRL's ``GRPOTrainer`` with activation-space exploration (ASE-GRPO).

Paper: "Exploration via Activation-Space Steering for Reinforcement Learning with Verifiable Rewards" (§3,
App. B and D). The maths lives in the pure modules of ``trl_explore.ase`` (``bank``, ``routing``,
``importance``, ``steering``); this file only wires them into TRL hooks:

* ``_generate_single_turn``: the rollouts of each prompt are split over the clean route and the K steering
  routes. HF ``generate`` path: generation runs under ``ActivationSteeringGenerator.steering`` and the log-prob of
  every sampled token under the distribution it was sampled from (the steered one, temperature applied) is
  recorded from the logits ``generate`` computes anyway. TRL stores these as ``sampling_per_token_logps``.
  vLLM (colocate) path: TRL's vLLM call runs under ``VLLMActivationSteeringGenerator.steering`` (all routes in one
  call, the steering inside the engine's traced forward); vLLM's sampled-token log-probs are the steered ones, and
  TRL's ``token_truncate`` importance sampling (capped at ``is_cap``, set by ``ASEConfig``) is the TIS weight.
* ``_calculate_rewards``: keeps the verifier reward ``R_m`` of every completion (TRL gathers it here).
* ``_generate_and_score_completions``: adds ``ase_route`` / ``ase_row`` to the batch, logs the route
  diagnostics and prepares the readout buffer of the bank update.
* ``_compute_loss`` + ``_get_per_token_logps_and_entropies``: TRL's own policy forward gives (a) the block-L
  readouts (a forward hook; the steered readout is the clean one plus ``alpha * v_route``, exactly, because
  nothing upstream of block L's output is steered) and (b) the unsteered log-probs of the truncated importance
  weights ``w = min(pi_unsteered / pi_steered, c)``, which enter TRL's objective as advantages ``A * w``.
  When all rows of a generation have been read, the bank is re-estimated (pending).
* ``_ActivateBankAfterStep.on_step_end``: the pending bank becomes active after the optimizer step.
* ``save_model`` / ``_load_optimizer_and_scheduler``: the bank is saved with each checkpoint and restored.

Cost: no extra forward pass. The behaviour log-probs cost one log-softmax over the vocabulary per decoding
step; the readouts cost a ``[B, d]`` gather in a hook on TRL's forward. (``ActivationSteeringGenerator.score``,
a teacher-forced replay with the hook on, gives the same numbers for one extra no-grad forward over the
batch; the tests use it as the reference.)
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
import textwrap
import time
from contextlib import contextmanager

import torch
from accelerate.utils import broadcast_object_list, gather_object
from transformers import TrainerCallback
from trl import GRPOTrainer

from trl_explore.ase.bank import SteeringVectorBank
from trl_explore.ase.config import ASEConfig
from trl_explore.ase.importance import truncated_importance_weights
from trl_explore.ase.routing import balanced_uniform_routes, pairwise_answer_disagreement, per_route_accuracy
from trl_explore.ase.steering import ActivationSteeringGenerator, readout_positions, steering_offsets, unwrap_model
from trl_explore.ase.steering.base import block_hidden_states, check_layer_index
from trl_explore.ase.steering.vllm import VLLMActivationSteeringGenerator, steerable_vllm
from trl_explore.ase.steering.vllm_server import ServerSteering
from trl_explore.defaults import check_train_dataset_size, resolve_model_and_config, trl_scores_after_generation
from trl_explore.hub import create_model_card
from trl_explore.vllm_engine import engine_options, use_reload_weights_on_cpu

logger = logging.getLogger(__name__)

BANK_DIR = "steering_bank"
"""Sub-folder of a checkpoint (and of the final model folder) holding the vector bank."""


class _SampledTokenLogProbs:
    """Records ``log softmax(logits / T)[sampled token]`` at every decoding step of one ``generate`` call.

    A forward hook on the (unwrapped) model reads the logits of the last position after each forward pass;
    the token sampled from them is the ``input_ids`` of the next pass (and, for the last pass, the last column
    of the output). These are the behaviour log-probs of the sampler with the steering hook in place,
    computed like TRL's own log-probs: temperature only, no top-k / top-p filtering (TRL's defaults use
    none). Memory: one ``[B, V]`` float32 table at a time.
    """

    def __init__(self, model, temperature: float):
        self.model = unwrap_model(model)
        self.temperature = float(temperature)
        self._logps: list[torch.Tensor] = []  # [B] per decoding step
        self._tokens: list[torch.Tensor] = []  # [B] per decoding step
        self._pending: torch.Tensor | None = None  # [B, V] log-probs of the last forward pass
        self._handle = None

    def __enter__(self):
        self._handle = self.model.register_forward_hook(self._hook, with_kwargs=True)
        return self

    def __exit__(self, *exc):
        self._handle.remove()
        return False

    def _hook(self, module, args, kwargs, output):
        input_ids = kwargs.get("input_ids", args[0] if args else None)
        if self._pending is not None:
            if input_ids is None or input_ids.dim() != 2 or input_ids.shape[1] != 1:
                raise RuntimeError(
                    "ASE behaviour log-probs: expected one new token per decoding step after the prefill; chunked "
                    "prefill, assisted decoding and inputs_embeds are not supported"
                )
            self._record(input_ids[:, -1])
        logits = output.logits if hasattr(output, "logits") else output[0]
        last = logits[:, -1, :].float()
        if self.temperature != 1.0:  # skipped at T = 1 (the default): one [B, V] pass less per decoding step
            last = last / self.temperature
        self._pending = torch.log_softmax(last, dim=-1)

    def _record(self, tokens: torch.Tensor) -> None:
        tokens = tokens.to(self._pending.device).long()
        self._logps.append(self._pending.gather(1, tokens[:, None]).squeeze(1))
        self._tokens.append(tokens)
        self._pending = None

    def per_completion(self, completion_ids: list[list[int]]) -> list[list[float]]:
        """The recorded log-probs of each completion (``completion_ids`` as TRL cut them at the first EOS)."""
        if self._pending is None:
            raise RuntimeError("ASE behaviour log-probs: the model's forward hook never ran during generation")
        num_steps = len(self._logps) + 1
        last = [ids[num_steps - 1] if len(ids) >= num_steps else 0 for ids in completion_ids]
        self._record(torch.tensor(last))
        logps = torch.stack(self._logps, dim=1).cpu()  # [B, steps]
        tokens = torch.stack(self._tokens, dim=1).cpu()
        out = []
        for i, ids in enumerate(completion_ids):
            if len(ids) > num_steps or tokens[i, : len(ids)].tolist() != list(ids):
                raise RuntimeError(
                    f"ASE behaviour log-probs: the tokens recorded for row {i} differ from its completion"
                )
            out.append(logps[i, : len(ids)].tolist())
        return out


@contextmanager
def _block_readouts(block, input_ids, attention_mask, logits_to_keep: int, fraction: float):
    """Capture the output of ``block`` at each row's readout position during TRL's forward pass(es).

    Yields a list that receives one ``[rows, d]`` float32 CPU tensor per forward (TRL may chunk the batch);
    the readout position of a row is ``floor(fraction * len(completion))`` (SPEC §3.3).
    """
    prompt_len = input_ids.shape[1] - logits_to_keep
    positions = prompt_len + readout_positions(attention_mask[:, prompt_len:], fraction)
    captured: list[torch.Tensor] = []

    def hook(module, args, output):
        hidden = block_hidden_states(output)
        start = sum(len(part) for part in captured)
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        pos = positions[start : start + hidden.shape[0]].to(hidden.device)
        captured.append(hidden[rows, pos].detach().float().cpu())

    handle = block.register_forward_hook(hook)
    try:
        yield captured
    finally:
        handle.remove()


def _check_steering_layer(model, layer: int) -> None:
    """Raise ``ValueError`` if ``layer`` is not a decoder block of ``model`` (a path / Hub id or a model)."""
    if isinstance(model, str):
        from transformers import AutoConfig

        config = AutoConfig.from_pretrained(model)
    else:
        config = unwrap_model(model).config
    num_layers = getattr(config.get_text_config(), "num_hidden_layers", None)
    if num_layers is not None:
        check_layer_index(layer, num_layers)


def _max_routes(args: ASEConfig) -> int:
    """Rows of the vLLM steering table: the clean route plus the most vectors one generate call can use (K, or one
    per rollout of the process's generation batch, times the tensor-parallel gather, for ``unstructured_random``)."""
    rows = args.per_device_train_batch_size * args.steps_per_generation * max(1, args.vllm_tensor_parallel_size)
    return 1 + (rows if args.bank_control == "unstructured_random" else args.num_vectors)


class _ActivateBankAfterStep(TrainerCallback):
    """Promotes the pending bank to active after each optimizer step (paper §3: "a newly estimated bank becomes
    active only after actor optimization")."""

    def __init__(self, trainer: ASEGRPOTrainer):
        self.trainer = trainer

    def on_step_end(self, args, state, control, **kwargs):
        self.trainer.bank.activate()


class ASEGRPOTrainer(GRPOTrainer):
    """GRPO with ASE (activation-space exploration): steered rollouts, unsteered policy, truncated IS.

    The training dataset needs a `prompt`, the gold `answer` for the default verifier reward and, optionally,
    a problem id column (`args.problem_id_column`; default: a hash of the prompt).

    Args:
        model: as for `GRPOTrainer`; the string `"embedded"` selects the bundled SmolLM2-135M-Instruct.
        reward_funcs: default `[math_reward]`; `reward_funcs[args.correctness_reward_index]` must be the
            verifier reward `R_m` in {0, 1} that labels rollouts for the bank.
        args: an [`ASEConfig`].
        bank: a `SteeringVectorBank` to start from (e.g. a saved one); default: an empty bank built from `args`.
        Other arguments are passed to `GRPOTrainer`.

    Attributes:
        bank: the `SteeringVectorBank` (training state; saved in `steering_bank/` with every checkpoint).
        steerer: the `ActivationSteeringGenerator` bound to the policy.
        bank_diagnostics: one dict per bank update (the bank's diagnostics plus `global_step`).

    Logged metrics (paper Fig. 4-5, Table 6): `ase/rollout_time` (seconds of this process's generation call),
    `ase/route_{s}_accuracy` (share of R_m = 1 on route s, 0 = clean), `ase/answer_disagreement` (pairwise
    disagreement of the extracted answers within each group), `ase/is_weight_mean` and `ase/is_weight_clipped_frac`
    (over steered tokens), and per bank update `ase/num_pairs`, `ase/skipped_updates` (running count),
    `ase/cluster_share_{k}`, `ase/temporal_alignment`, `ase/inter_cluster_alignment`, `ase/vector_norm`,
    `ase/bank_update_time`. `log_completions` gets a `route` column.

    vLLM: `use_vllm=True` with `vllm_mode="colocate"` steers inside the colocated engine (eager or compiled); the
    engine is built steerable by `steerable_vllm` around TRL's construction, and `vllm_steerer` is a
    `VLLMActivationSteeringGenerator`. With `vllm_mode="server"` the server must run with
    `TRL_EXPLORE_STEERING_LAYER=<steering_layer>` (the `trl_explore` vLLM plugin) and `vllm_steerer` is a
    `ServerSteering` that sends each route's vector with its requests. Without vLLM, `vllm_steerer` is None.

    Raises:
        NotImplementedError: continuous batching, tools, environments or a custom `rollout_func`.
        RuntimeError: server mode against a server that cannot steer.
    """

    _tag_names = ["trl", "grpo", "ase-grpo", "activation-steering", "trl-explore"]
    _name = "ASE-GRPO"
    _paper = {
        "title": "Exploration via Activation-Space Steering for Reinforcement Learning with Verifiable Rewards",
        # the paper's text this package follows gives neither authors nor venue: the entry names only the title
        # docstyle-ignore
        "citation": textwrap.dedent("""\
            @misc{ase_grpo,
                title = {{Exploration via Activation-Space Steering for Reinforcement Learning with Verifiable Rewards}},
                note  = {Authors and venue: see the paper},
            }"""),
    }
    create_model_card = create_model_card  # base_model only when it is a Hub id (trl_explore.hub)

    def __init__(
        self,
        model,
        reward_funcs=None,
        args: ASEConfig | None = None,
        bank: SteeringVectorBank | None = None,
        **kwargs,
    ):
        model, args = resolve_model_and_config(model, args, ASEConfig, "ASE-GRPO")
        if args.use_transformers_continuous_batching:
            raise NotImplementedError(
                "ASEGRPOTrainer does not support continuous batching (per-row steering needs `generate`)"
            )
        for option in ("tools", "rollout_func", "environment_factory"):
            if kwargs.get(option):
                raise NotImplementedError(
                    f"ASEGRPOTrainer does not support `{option}` (single-turn generation only)"
                )
        if reward_funcs is None:
            from trl_explore.rewards.math_verify_reward import math_reward

            reward_funcs = [math_reward]
        num_funcs = len(reward_funcs) if isinstance(reward_funcs, list) else 1
        if args.correctness_reward_index >= num_funcs:
            raise ValueError(
                f"correctness_reward_index={args.correctness_reward_index} but there are only {num_funcs} "
                "reward functions"
            )
        check_train_dataset_size(kwargs.get("train_dataset"), args)
        if args.use_vllm:
            _check_steering_layer(model, args.steering_layer)  # before vLLM loads the weights
            if args.bank_control == "unstructured_random" and args.vllm_mode == "colocate" and (
                args.vllm_tensor_parallel_size > 1
            ):
                raise NotImplementedError(
                    "bank_control='unstructured_random' with vllm_tensor_parallel_size > 1: the per-rollout random "
                    "vectors differ between the ranks of a tensor-parallel group; use tensor parallel size 1"
                )
        if args.use_vllm and args.vllm_mode == "server":  # the server steers (plugin); requests carry the vectors
            super().__init__(model, reward_funcs, args=args, **kwargs)
            self.vllm_steerer = ServerSteering(self.vllm_generation, self.accelerator, steer_prompt=args.steer_prompt)
            if self.accelerator.is_main_process:  # fails now if the server cannot steer this block of this model
                text_config = unwrap_model(self.model).config.get_text_config()
                self.vllm_steerer.check_server(args.steering_layer, text_config.hidden_size)
        elif args.use_vllm:  # the steering slot goes into the engine's decoder block before vLLM compiles it
            with steerable_vllm(layer=args.steering_layer, max_routes=_max_routes(args)), engine_options(
                enforce_eager=True if args.vllm_enforce_eager else None
            ):
                super().__init__(model, reward_funcs, args=args, **kwargs)
            use_reload_weights_on_cpu(self.vllm_generation)
            self.vllm_steerer = VLLMActivationSteeringGenerator(
                self.vllm_generation.llm,
                layer=args.steering_layer,
                alpha=args.steering_alpha,
                steer_prompt=args.steer_prompt,
                tp_group=getattr(self.vllm_generation, "tp_group", None),
            )
        else:
            super().__init__(model, reward_funcs, args=args, **kwargs)
            self.vllm_steerer = None

        self.steerer = ActivationSteeringGenerator(
            self.model, layer=args.steering_layer, alpha=args.steering_alpha, steer_prompt=args.steer_prompt
        )
        config = unwrap_model(self.model).config
        hidden_size = config.get_text_config().hidden_size
        if bank is None:
            bank = SteeringVectorBank(
                hidden_size,
                args.num_vectors,
                pca_dim=args.pca_dim,
                ema_beta=args.bank_ema_beta,
                kmeans_n_init=args.kmeans_n_init,
                max_pairs_per_problem=args.max_pairs_per_problem,
                control=args.bank_control,
                seed=args.seed,
                num_threads=1,  # the bank's PCA/K-means are small; more threads oversubscribe the training host
            )
        elif (bank.num_vectors, bank.hidden_size) != (args.num_vectors, hidden_size):
            raise ValueError(
                f"bank has K={bank.num_vectors}, d={bank.hidden_size}; expected K={args.num_vectors}, d={hidden_size}"
            )
        self.bank = bank
        self.bank_diagnostics: list[dict] = []
        self.add_callback(_ActivateBankAfterStep(self))
        # TRL computes `old_per_token_logps` in a no-grad forward right after generation when generation and the
        # optimizer steps are not aligned; the readouts are then taken from that forward (policy at rollout time).
        # With vLLM's importance-sampling correction TRL always makes that forward.
        self._ase_readouts_at_scoring = trl_scores_after_generation(self)
        self._ase_generation = None  # routes / offsets of the generation call in progress
        self._ase_rewards = None  # R_m and completions of the generation call in progress
        self._ase_scoring = None  # capture slot for TRL's scoring forward
        self._ase_loss = None  # slot for the policy forward inside `_compute_loss`
        self._ase_step = None  # the training generation whose bank update is pending

    # ------------------------------------------------------------------ rollouts
    def _plan_routes(self, num_rows: int, num_generations: int):
        """``(steering ids [B], table [R, d], logged routes [B])`` for this process's rollouts, or None (no steering).

        Routes are drawn for the global generation batch and sliced, so a group split across processes keeps its
        balanced split, and every process draws the same random numbers.
        """
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        total, local = num_rows * world, slice(rank * num_rows, (rank + 1) * num_rows)
        if self.args.bank_control == "unstructured_random":  # one unit random vector per rollout (App. D.2)
            table = self.bank.random_rollout_vectors(total)[local]
            return torch.arange(1, num_rows + 1), table, torch.ones(num_rows, dtype=torch.long)
        if self.bank.vectors is None:
            return None
        if total % num_generations != 0:
            raise ValueError(f"generation batch of {total} rows is not a whole number of groups of {num_generations}")
        micro_step = self._step % self.args.gradient_accumulation_steps
        generator = torch.Generator().manual_seed(  # replays exactly after resuming from a checkpoint
            self.args.seed * 1_000_003 + self.state.global_step * 1_009 + micro_step
        )
        routes = balanced_uniform_routes(total // num_generations, num_generations, self.args.num_vectors, generator)
        routes = routes[local]
        return routes, self.bank.vectors, routes

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        # Overrides GRPOTrainer._generate_single_turn (HF generate path), the one call that samples the rollouts:
        # it runs under the steering hook (train mode, once the bank has vectors) and records the behaviour
        # log-probs, which TRL then carries as `sampling_per_token_logps`. Evaluation never steers.
        mode = "train" if self.model.training else "eval"
        num_rows = len(prompt_ids)
        plan = self._plan_routes(num_rows, num_generations) if mode == "train" else None
        start = time.perf_counter()
        if plan is None:
            completion_ids, logprobs = super()._generate_single_turn(
                prompt_ids, images, multimodal_fields, num_generations, has_tool_images
            )
            routes, offsets = torch.zeros(num_rows, dtype=torch.long), None
        elif self.use_vllm:  # vLLM's sampled-token log-probs come from the steered forward: the behaviour ones
            steering_ids, table, routes = plan
            offsets = steering_offsets(steering_ids, table.float(), self.steerer.alpha).cpu()  # [B, d]
            if isinstance(self.vllm_steerer, ServerSteering):
                keys = steering_ids.clone()
                if self.args.bank_control == "unstructured_random":  # one vector per rollout: keys unique globally
                    keys = keys + self.accelerator.process_index * num_rows
                context = self.vllm_steerer.steering(keys, offsets)
            else:
                context = self.vllm_steerer.steering(steering_ids, table)
            with context:
                completion_ids, logprobs = super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, has_tool_images
                )
        else:
            steering_ids, table, routes = plan
            recorder = _SampledTokenLogProbs(self.model, self.temperature)
            with self.steerer.steering(steering_ids, table), recorder:
                completion_ids, _ = super()._generate_single_turn(
                    prompt_ids, images, multimodal_fields, num_generations, has_tool_images
                )
            logprobs = recorder.per_completion(completion_ids)
            offsets = steering_offsets(steering_ids, table.float(), self.steerer.alpha).cpu()  # [B, d]
        self._metrics[mode]["ase/rollout_time"].append(time.perf_counter() - start)
        self._log_completion_extra("route", routes.tolist())  # a per-completion column of log_completions
        self._ase_generation = {"routes": routes, "offsets": offsets}
        return completion_ids, logprobs

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        # Overrides GRPOTrainer._calculate_rewards only to keep the verifier reward R_m of every completion of
        # every process (TRL gathers the rewards here) and this process's completions, for the bank and the
        # route / answer diagnostics.
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        correct = rewards_per_func[:, self.args.correctness_reward_index].detach().float().cpu()
        self._ase_rewards = {"correct": correct, "completions": completions}
        return rewards_per_func

    def _problem_id(self, row: dict):
        value = row.get(self.args.problem_id_column)
        if value is None:  # stable across processes, unlike hash()
            text = json.dumps(row["prompt"], sort_keys=True, default=str)
            return hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]
        try:
            hash(value)
        except TypeError:
            value = repr(value)
        return value

    def _generate_and_score_completions(self, inputs):
        # Overrides GRPOTrainer._generate_and_score_completions: adds `ase_route` and `ase_row` ([B] long, batch
        # first, so they survive TRL's shuffling and splitting) to the batch, logs the route / answer diagnostics
        # and opens the readout buffer of this generation's bank update.
        mode = "train" if self.model.training else "eval"
        control = self.args.bank_control
        scoring = mode == "train" and self._ase_readouts_at_scoring and control != "unstructured_random"
        self._ase_generation = self._ase_rewards = None
        self._ase_scoring = {"readouts": None} if scoring else None
        try:
            output = super()._generate_and_score_completions(inputs)
            scored = self._ase_scoring
        finally:
            self._ase_scoring = None
        device = self.accelerator.device
        routes = self._ase_generation["routes"]
        num_rows = output["completion_ids"].shape[0]
        output["ase_route"] = routes.to(device)
        output["ase_row"] = torch.arange(num_rows, device=device)
        correct = self._ase_rewards["correct"]
        self._log_route_diagnostics(mode, routes, correct, self._ase_rewards["completions"])

        if mode == "train" and control != "unstructured_random":
            if self._ase_step is not None and not self._ase_step["updated"]:
                logger.warning("ASE: a generation's bank update never ran (its rows were not all seen); dropped")
            self._ase_step = {
                "problem_ids": gather_object([self._problem_id(row) for row in inputs]),
                "correct": correct,
                "offsets": self._ase_generation["offsets"],
                "valid": (output["completion_mask"].sum(1) > 0).cpu(),
                "readouts": torch.zeros(num_rows, self.bank.hidden_size),
                "filled": torch.zeros(num_rows, dtype=torch.bool),
                "updated": False,
            }
            if scored is not None:
                self._ase_store_readouts(torch.arange(num_rows), scored["readouts"])
        self._ase_generation = self._ase_rewards = None
        return output

    def _log_route_diagnostics(self, mode, routes, correct, completions):
        from trl_explore.rewards.math_verify_reward import extract_answer

        all_routes = self.accelerator.gather(routes.to(self.accelerator.device)).cpu()
        scored = torch.isfinite(correct)
        accuracy, counts = per_route_accuracy(correct[scored], all_routes[scored], self.args.num_vectors)
        for s in range(len(counts)):
            if counts[s] > 0:
                self._metrics[mode][f"ase/route_{s}_accuracy"].append(accuracy[s].item())
        answers = gather_object([extract_answer(c) for c in completions])
        group = self.num_generations if mode == "train" else self.num_generations_eval
        disagreement = pairwise_answer_disagreement(answers, group)
        if disagreement is not None:
            self._metrics[mode]["ase/answer_disagreement"].append(disagreement)

    # ------------------------------------------------------------------ bank
    def _ase_store_readouts(self, rows: torch.Tensor, readouts: torch.Tensor) -> None:
        step = self._ase_step
        if readouts.shape[0] != rows.numel():
            raise RuntimeError(f"ASE: captured {readouts.shape[0]} readouts for {rows.numel()} rows")
        step["readouts"][rows] = readouts
        step["filled"][rows] = True
        if bool(step["filled"].all()):  # every process completes at the same micro-step: collectives are safe
            self._ase_update_bank()

    def _ase_update_bank(self) -> None:
        """Estimate the pending bank from this generation's readouts, R_m and problem ids (all processes)."""
        step = self._ase_step
        step["updated"] = True
        device = self.accelerator.device
        readouts = step["readouts"]
        if step["offsets"] is not None:  # steered readout = clean block output + alpha * v_route (exact)
            readouts = readouts + step["offsets"]
        readouts = self.accelerator.gather(readouts.to(device)).cpu()
        valid = self.accelerator.gather(step["valid"].to(device)).cpu() & torch.isfinite(step["correct"])
        keep = valid.nonzero().squeeze(1)
        start = time.perf_counter()
        diagnostics = self.bank.update(
            readouts[keep], [step["problem_ids"][i] for i in keep.tolist()], step["correct"][keep]
        )
        elapsed = time.perf_counter() - start
        if self.accelerator.num_processes > 1:  # every process holds process 0's bank, bit for bit
            synced = broadcast_object_list([self.bank.state_dict(), diagnostics], from_process=0)
            self.bank.load_state_dict(synced[0])
            diagnostics = synced[1]
        self.bank_diagnostics.append({"global_step": self.state.global_step, **diagnostics})
        metrics = self._metrics["train"]
        metrics["ase/num_pairs"].append(diagnostics["num_pairs"])
        metrics["ase/skipped_updates"].append(float(self.bank.num_skipped_updates))
        metrics["ase/bank_update_time"].append(elapsed)
        for key, value in diagnostics.items():
            if key.startswith("cluster_share/"):
                metrics[f"ase/cluster_share_{key.split('/')[1]}"].append(value)
            elif key in ("temporal_alignment", "inter_cluster_alignment"):
                metrics[f"ase/{key}"].append(value)
            elif key == "mean_vector_norm":
                metrics["ase/vector_norm"].append(value)

    # ------------------------------------------------------------------ loss
    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        # Overrides GRPOTrainer._get_per_token_logps_and_entropies; active only for the policy forward inside
        # `_compute_loss` and for TRL's scoring forward after generation. It reads the block-L readouts from that
        # forward (a hook) and, in `_compute_loss`, turns the forward's log-probs into the truncated importance
        # weights, written into the batch copy whose advantages TRL reads after this call.
        loss_ctx = self._ase_loss if self._ase_loss is not None and not self._ase_loss["done"] else None
        scoring = self._ase_scoring if self._ase_scoring is not None and self._ase_scoring["readouts"] is None else None
        if (loss_ctx is None or not loss_ctx["capture"]) and scoring is None:
            output = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        else:
            block = self.steerer.decoder_block()
            with _block_readouts(block, input_ids, attention_mask, logits_to_keep, self.args.readout_fraction) as parts:
                output = super()._get_per_token_logps_and_entropies(
                    model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
                )
            readouts = torch.cat(parts) if parts else torch.zeros(0, self.bank.hidden_size)
            (loss_ctx if scoring is None else scoring)["readouts"] = readouts
        if loss_ctx is not None:
            loss_ctx["done"] = True
            if loss_ctx["weigh"]:
                loss_ctx["stats"] = self._weigh_advantages(loss_ctx["batch"], output[0])
        return output

    def _weigh_advantages(self, batch: dict, per_token_logps: torch.Tensor) -> torch.Tensor:
        """Replace ``batch["advantages"]`` by ``A[:, None] * w`` with the truncated IS weights ``w`` (SPEC §3.5).

        ``w = min(pi_unsteered / pi_steered, is_cap)`` on steered rows, exactly 1 on clean rows. Since ``w >= 0``,
        TRL's ``-min(r * A * w, clip(r) * A * w) = -w * min(r * A, clip(r) * A)``: the weight multiplies the
        per-token objective, as in verl's token-level TIS. (Every TRL loss type is linear in ``A`` once the sign of
        ``A`` is fixed, and ``w > 0`` keeps the sign, so this holds for grpo, dapo, dr_grpo, bnpo, GSPO's
        sequence-level ratio, cispo, sapo, luspo and vespo; the KL and entropy terms are not weighted.)
        ``pi_unsteered`` is the policy at rollout time: TRL's
        ``old_per_token_logps`` when it kept them, else this forward's (detached) log-probs, equal to them when
        generation is aligned with the optimizer step. Returns ``[sum w, clipped tokens, tokens]`` over steered tokens.
        """
        mask = batch["completion_mask"]
        if "tool_mask" in batch:
            mask = mask * batch["tool_mask"]
        current = batch.get("old_per_token_logps")
        current = per_token_logps.detach() if current is None else current
        behaviour = batch["sampling_per_token_logps"]
        steered = batch["ase_route"] != 0
        weights = torch.ones_like(current, dtype=torch.float32)
        steered_mask = mask.bool() & steered[:, None]
        clipped = torch.zeros((), device=current.device)
        if bool(steered.any()):
            weights[steered] = truncated_importance_weights(
                current[steered], behaviour[steered], mask[steered], cap=self.args.is_cap
            )
            log_ratio = current.float() - behaviour.float()
            clipped = ((log_ratio > math.log(self.args.is_cap)) & steered_mask).sum().float()
        advantages = batch["advantages"]
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        batch["advantages"] = advantages * weights.to(advantages.dtype)
        return torch.stack([(weights * steered_mask).sum(), clipped, steered_mask.sum().float()])

    def _compute_loss(self, model, inputs):
        # Overrides GRPOTrainer._compute_loss: TRL's objective, run on a copy of the batch whose advantages the
        # `_get_per_token_logps_and_entropies` override replaces by IS-weighted ones after the policy forward (TRL
        # reads `inputs["advantages"]` after that forward and accepts [B, T] advantages). The same forward gives
        # the readouts of this micro-batch's rows; the bank is updated once every row of the generation was read.
        # Every process takes the same branches (steering and micro-step schedule are identical across processes).
        mode = "train" if self.model.training else "eval"
        step = self._ase_step if mode == "train" else None
        rows = inputs.get("ase_row")
        capture = (
            step is not None
            and rows is not None
            and not step["updated"]
            and not bool(step["filled"][rows.cpu()].all())
        )
        weigh = mode == "train" and "ase_route" in inputs and "sampling_per_token_logps" in inputs
        if self.use_vllm:  # TRL's token_truncate importance sampling is the TIS weight (ASEConfig)
            weigh = False
            if mode == "train" and "importance_sampling_ratio" in inputs and "ase_route" in inputs:
                self._log_vllm_is_weights(inputs)
        if not (capture or weigh):
            return super()._compute_loss(model, inputs)
        batch = dict(inputs)
        self._ase_loss = {
            "batch": batch, "capture": capture, "weigh": weigh, "done": False, "readouts": None, "stats": None
        }
        try:
            loss = super()._compute_loss(model, batch)
            ctx = self._ase_loss
        finally:
            self._ase_loss = None
        if weigh:
            stats = self.accelerator.reduce(ctx["stats"], reduction="sum")
            if stats[2] > 0:
                self._metrics[mode]["ase/is_weight_mean"].append((stats[0] / stats[2]).item())
                self._metrics[mode]["ase/is_weight_clipped_frac"].append((stats[1] / stats[2]).item())
        if capture:
            self._ase_store_readouts(rows.cpu(), ctx["readouts"])
        return loss

    def _log_vllm_is_weights(self, inputs) -> None:
        """``ase/is_weight_mean`` and ``ase/is_weight_clipped_frac`` over steered tokens, from TRL's vLLM ratio."""
        ratio = inputs["importance_sampling_ratio"].float()
        mask = inputs["completion_mask"].bool() & (inputs["ase_route"] != 0)[:, None]
        if ratio.dim() == 1 or ratio.shape[1] == 1:
            ratio = ratio.reshape(-1, 1).expand_as(mask)
        clipped = ratio >= self.args.is_cap
        stats = torch.stack([(ratio * mask).sum(), (clipped & mask).sum().float(), mask.sum().float()])
        stats = self.accelerator.reduce(stats, reduction="sum")
        if stats[2] > 0:
            self._metrics["train"]["ase/is_weight_mean"].append((stats[0] / stats[2]).item())
            self._metrics["train"]["ase/is_weight_clipped_frac"].append((stats[1] / stats[2]).item())

    # ------------------------------------------------------------------ checkpoints
    def save_model(self, output_dir: str | None = None, _internal_call: bool = False):
        # Overrides Trainer.save_model, which `_save_checkpoint` calls for every checkpoint and users call for the
        # final model: the bank (K x d floats, safetensors + json) goes to `steering_bank/` next to the weights.
        # It is training state; `from_pretrained` ignores it, deployment does not need it, and evaluation with
        # inference-time steering (the paper's ^S) can load it with `SteeringVectorBank.load`.
        super().save_model(output_dir, _internal_call)
        if self.args.should_save:
            self.bank.save(os.path.join(output_dir or self.args.output_dir, BANK_DIR))

    def _load_optimizer_and_scheduler(self, checkpoint):
        # Overrides GRPOTrainer._load_optimizer_and_scheduler, as TRL does for its entropy controller: restores the
        # bank (active and pending vectors, counters, random generator) when resuming from a checkpoint.
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        path = os.path.join(checkpoint, BANK_DIR)
        if os.path.isdir(path):
            self.bank.load_state_dict(SteeringVectorBank.load(path).state_dict())
        else:
            logger.warning("ASE: checkpoint %s has no %s/; the vector bank starts empty", checkpoint, BANK_DIR)
