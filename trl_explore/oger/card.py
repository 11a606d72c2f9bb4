"""OGER's model-card entry (:class:`~trl_explore.hub.MethodCard`), the ``card`` of ``OGERComponent``.

Paper: Ma et al., "OGER: A Robust Offline-Guided Exploration Reward for Hybrid Reinforcement Learning", arXiv
2604.18530 (submitted 20 April 2026); the authors' code: https://github.com/ecoli-hit/OGER.
"""

from __future__ import annotations

import textwrap

from trl_explore.hub import MethodCard

OGER_CARD = MethodCard(
    name="OGER",
    paper_title="OGER: A Robust Offline-Guided Exploration Reward for Hybrid Reinforcement Learning",
    paper_url="https://arxiv.org/abs/2604.18530",
    # docstyle-ignore
    citation=textwrap.dedent("""\
        @misc{ma2026oger,
            title         = {{OGER: A Robust Offline-Guided Exploration Reward for Hybrid Reinforcement Learning}},
            author        = {Xinyu Ma and Mingzhou Xu and Xuebo Liu and Chang Jin and Qiang Wang and
                             Derek F. Wong and Min Zhang},
            year          = 2026,
            eprint        = {2604.18530},
            archivePrefix = {arXiv},
            url           = {https://arxiv.org/abs/2604.18530},
        }"""),
    hyperparameters=(
        "num_replacements", "replacement_rule", "use_exploration_reward", "entropy_refinement", "last_token",
        "policy_shaping_gamma", "loss_remove_clip", "embedding_model", "embedding_long_text_mode", "entropy_coef",
        "offline_completions_column", "grader_mode",
    ),  # fmt: skip
    notes="The authors' code: [github.com/ecoli-hit/OGER](https://github.com/ecoli-hit/OGER).",
)
"""OGER: paper, BibTeX and the ``OGERConfig`` fields a model card lists."""
