"""Construction of OGER's part: checks and the reward list, before TRL's ``__init__``. Used by ``OGERTrainer`` and by
the composed OGER + ASE trainer."""

from __future__ import annotations

from trl_explore.defaults import check_train_dataset_size
from trl_explore.oger.offline import check_prompt, offline_trajectories


def prepare(args, reward_funcs, train_dataset) -> list:
    """Construction-time checks and the reward list, before TRL's ``__init__``.

    Returns ``reward_funcs`` (default ``[math_reward, OGERRewardFunction]``, Eq. 8) with the ablation switches
    applied to every ``OGERRewardFunction`` and ``args.reward_weights`` set when None (``[1, 0]`` "w/o Reward").

    Raises:
        ValueError: "w/o Reward" with a non-zero OGER weight; a bad prompt or offline field in any row (the message
            names the row); fewer prompts than one generation batch.
    """
    from trl_explore.rewards.math_verify_reward import MathVerifyReward
    from trl_explore.rewards.oger_reward import OGERRewardFunction

    if reward_funcs is None:
        math_reward = MathVerifyReward(mode=args.grader_mode)
        reward_funcs = [math_reward, OGERRewardFunction(verifier=math_reward)]
    reward_funcs = list(reward_funcs) if isinstance(reward_funcs, (list, tuple)) else [reward_funcs]
    is_oger = [isinstance(f, OGERRewardFunction) for f in reward_funcs]
    for func, oger in zip(reward_funcs, is_oger):
        if oger:
            func.entropy_refinement = args.entropy_refinement
    if args.reward_weights is None:
        args.reward_weights = [0.0 if oger and not args.use_exploration_reward else 1.0 for oger in is_oger]
    elif not args.use_exploration_reward and any(w != 0 for w, o in zip(args.reward_weights, is_oger) if o):
        raise ValueError(
            "use_exploration_reward=False ('w/o Reward') but reward_weights gives the OGER reward a non-zero "
            f"weight: {args.reward_weights}"
        )
    if train_dataset is not None and not hasattr(train_dataset, "__len__"):
        train_dataset = None  # an IterableDataset: rows are checked as they arrive
    check_train_dataset_size(train_dataset, args)
    for i, row in enumerate(train_dataset if train_dataset is not None else []):  # every row, once, before training
        check_prompt(row, f"training row {i}")
        offline_trajectories(row, args, f"training row {i}")
    return reward_funcs
