"""Reward functions with TRL's ``reward_funcs`` signature: the verifiable math reward R_m
(OGER's exploration reward is ``trl_explore.oger.reward.OGERRewardFunction``).

Loaded on first access, so ``import trl_explore.rewards`` pulls in neither torch nor math-verify.
"""

from trl_explore.utils.lazy import lazy_exports

_LAZY = {
    "GRADER_MODES": "trl_explore.rewards.grading",
    "GUARDS": "trl_explore.rewards.grading",
    "GoldAnswerError": "trl_explore.rewards.math_verify_reward",
    "GraderOptions": "trl_explore.rewards.grading",
    "MathVerifyReward": "trl_explore.rewards.math_verify_reward",
    "extract_answer": "trl_explore.rewards.math_verify_reward",
    "grade_batch": "trl_explore.rewards.math_verify_reward",
    "math_reward": "trl_explore.rewards.math_verify_reward",
    "verify_answer": "trl_explore.rewards.math_verify_reward",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _LAZY, aliases={"GRADER_MODES": "MODES"})
