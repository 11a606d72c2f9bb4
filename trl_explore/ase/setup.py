"""Construction of ASE-GRPO's parts: checks before TRL's ``__init__``, the engine context TRL's vLLM engine is built
in, and, after it, the steerers and the vector bank. Used by ``ASEGRPOTrainer`` and by the composed OGER + ASE
trainer."""

from __future__ import annotations

import contextlib

from trl_explore.ase.bank import SteeringVectorBank
from trl_explore.ase.recording import check_steering_layer, max_routes
from trl_explore.ase.steering import ActivationSteeringGenerator, unwrap_model
from trl_explore.defaults import check_train_dataset_size
from trl_explore.vllm_engine import engine_options, use_reload_weights_on_cpu


def prepare(model, args, reward_funcs, kwargs: dict, name: str = "ASEGRPOTrainer") -> list:
    """Check what ASE-GRPO cannot run with and return the reward list (default ``[math_reward]``).

    Raises:
        NotImplementedError: continuous batching, tools, environments, a custom ``rollout_func``, or the unstructured
            control with vLLM tensor parallelism.
        ValueError: ``correctness_reward_index`` out of range, a steering layer the model does not have (vLLM: before
            the engine loads), fewer prompts than one generation batch.
    """
    if args.use_transformers_continuous_batching:
        raise NotImplementedError(f"{name} does not support continuous batching (per-row steering needs `generate`)")
    for option in ("tools", "rollout_func", "environment_factory"):
        if kwargs.get(option):
            raise NotImplementedError(f"{name} does not support `{option}` (single-turn generation only)")
    if reward_funcs is None:
        from trl_explore.rewards.math_verify_reward import MathVerifyReward

        reward_funcs = [MathVerifyReward(mode=args.grader_mode)]
    num_funcs = len(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else 1
    if args.correctness_reward_index >= num_funcs:
        raise ValueError(
            f"correctness_reward_index={args.correctness_reward_index} but there are only {num_funcs} reward functions"
        )
    check_train_dataset_size(kwargs.get("train_dataset"), args)
    if args.use_vllm:
        check_steering_layer(model, args.steering_layer)  # before vLLM loads the weights
        if args.bank_control == "unstructured_random" and args.vllm_mode == "colocate" and (
            args.vllm_tensor_parallel_size > 1
        ):
            raise NotImplementedError(
                "bank_control='unstructured_random' with vllm_tensor_parallel_size > 1: the per-rollout random "
                "vectors differ between the ranks of a tensor-parallel group; use tensor parallel size 1"
            )
    return reward_funcs


def engine_context(args):
    """The context TRL's ``__init__`` runs in: colocated vLLM gets its steering slot before it compiles the model."""
    if not args.use_vllm or args.vllm_mode == "server":  # the server steers (plugin); requests carry the vectors
        return contextlib.nullcontext()
    from trl_explore.ase.steering.vllm import steerable_vllm

    stack = contextlib.ExitStack()
    stack.enter_context(steerable_vllm(layer=args.steering_layer, max_routes=max_routes(args)))
    stack.enter_context(engine_options(enforce_eager=True if args.vllm_enforce_eager else None))
    return stack


def build_steerers(trainer):
    """``(HF steerer, vLLM steerer or None)`` of a constructed trainer.

    Raises:
        ValueError: the steering layer is not a block of the model.
        RuntimeError: server mode against a server that cannot steer this block of this model.
    """
    args, vllm_steerer = trainer.args, None
    if args.use_vllm and args.vllm_mode == "server":
        from trl_explore.ase.steering.vllm_server import ServerSteering

        vllm_steerer = ServerSteering(trainer.vllm_generation, trainer.accelerator, steer_prompt=args.steer_prompt)
        if trainer.accelerator.is_main_process:  # fails now if the server cannot steer this block of this model
            text_config = unwrap_model(trainer.model).config.get_text_config()
            vllm_steerer.check_server(args.steering_layer, text_config.hidden_size)
    elif args.use_vllm:
        from trl_explore.ase.steering.vllm import VLLMActivationSteeringGenerator

        use_reload_weights_on_cpu(trainer.vllm_generation)
        vllm_steerer = VLLMActivationSteeringGenerator(
            trainer.vllm_generation.llm, layer=args.steering_layer, alpha=args.steering_alpha,
            steer_prompt=args.steer_prompt, tp_group=getattr(trainer.vllm_generation, "tp_group", None),
        )
    steerer = ActivationSteeringGenerator(
        trainer.model, layer=args.steering_layer, alpha=args.steering_alpha, steer_prompt=args.steer_prompt
    )
    return steerer, vllm_steerer


def build_bank(trainer, bank: SteeringVectorBank | None) -> SteeringVectorBank:
    """The given bank (checked against the config and model) or an empty one built from the config.

    Raises:
        ValueError: the given bank's K or d differs from ``args.num_vectors`` / the model's hidden size.
    """
    args = trainer.args
    hidden_size = unwrap_model(trainer.model).config.get_text_config().hidden_size
    if bank is None:
        return SteeringVectorBank(
            hidden_size, args.num_vectors, pca_dim=args.pca_dim, ema_beta=args.bank_ema_beta,
            kmeans_n_init=args.kmeans_n_init, max_pairs_per_problem=args.max_pairs_per_problem,
            min_pairs_per_cluster=args.min_pairs_per_cluster, control=args.bank_control, seed=args.seed,
            num_threads=1,  # the bank's PCA/K-means are small; more threads oversubscribe the training host
        )
    if (bank.num_vectors, bank.hidden_size) != (args.num_vectors, hidden_size):
        raise ValueError(
            f"bank has K={bank.num_vectors}, d={bank.hidden_size}; expected K={args.num_vectors}, d={hidden_size}"
        )
    return bank
