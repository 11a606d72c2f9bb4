"""ExGRPO's model-card entry (:class:`~trl_explore.hub.MethodCard`), the ``card`` of the ExGRPO component.

Paper: Zhan et al., "ExGRPO: Learning to Reason from Experience", arXiv 2510.02245 (2 October 2025); the authors' code:
https://github.com/ElliottYan/LUFFY/tree/main/ExGRPO.
"""

from __future__ import annotations

import textwrap

from trl_explore.hub import MethodCard

EXGRPO_CARD = MethodCard(
    name="ExGRPO",
    paper_title="ExGRPO: Learning to Reason from Experience",
    paper_url="https://arxiv.org/abs/2510.02245",
    # docstyle-ignore
    citation=textwrap.dedent("""\
        @misc{zhan2025exgrpo,
            title         = {{ExGRPO: Learning to Reason from Experience}},
            author        = {Runzhe Zhan and Yafu Li and Zhi Wang and Xiaoye Qu and Dongrui Liu and Jing Shao and
                             Derek F. Wong and Yu Cheng},
            year          = 2025,
            eprint        = {2510.02245},
            archivePrefix = {arXiv},
            url           = {https://arxiv.org/abs/2510.02245},
        }"""),
    hyperparameters=(
        "replay_ratio", "replay_start_pass_rate", "bucket_weighting", "bucket_sigma", "trajectory_selection",
        "importance_correction", "policy_shaping_gamma", "correct_threshold", "loss_type", "scale_rewards",
        "entropy_coef", "grader_mode",
    ),  # fmt: skip
    notes="A replay buffer of the policy's own correct trajectories, bucketed by their prompt's latest pass rate and "
          "replayed (the lowest-entropy one per prompt) beside fresh rollouts with the shaped importance weight "
          "`w / (w + gamma)`; prompts solved by every rollout are retired. Checkpoints hold the buffer "
          "(`exgrpo/buffer.json`); the saved model does not need it. The authors' code: "
          "[github.com/ElliottYan/LUFFY/tree/main/ExGRPO](https://github.com/ElliottYan/LUFFY/tree/main/ExGRPO).",
)
"""ExGRPO: paper, BibTeX and the ``ExGRPOConfig`` fields a model card lists."""
