"""ASE-GRPO's model-card entry (:class:`~trl_explore.hub.MethodCard`), the ``card`` of ``ASEComponent``.

Paper: "Exploration via Activation-Space Steering for Reinforcement Learning with Verifiable Rewards". The text this
package follows names neither authors, year nor venue, and no arXiv id or publisher page for it was found: the card
says so and links an arXiv title search instead of a made-up identifier.
"""

from __future__ import annotations

import textwrap

from trl_explore.hub import MethodCard

ASE_CARD = MethodCard(
    name="ASE-GRPO",
    paper_title="Exploration via Activation-Space Steering for Reinforcement Learning with Verifiable Rewards",
    paper_url="",  # not verified: see the module docstring
    # docstyle-ignore
    citation=textwrap.dedent("""\
        @misc{ase_grpo,
            title = {{Exploration via Activation-Space Steering for Reinforcement Learning with Verifiable Rewards}},
            note  = {Authors, year and venue are not given in the text trl_explore follows:
                     complete this entry from the published paper},
        }"""),
    hyperparameters=(
        "num_vectors", "steering_alpha", "steering_layer", "readout_fraction", "bank_ema_beta", "pca_dim",
        "kmeans_n_init", "min_pairs_per_cluster", "bank_readouts", "bank_control", "is_cap", "steer_prompt",
        "include_offline_in_bank",
    ),  # fmt: skip
    notes=("Steering only shapes the training rollouts: the saved model is the unsteered policy and generates "
           "without steering; `steering_bank/` next to the weights is training state (the vector bank), needed "
           "only to resume training or to steer at inference."),
)
"""ASE-GRPO: paper, BibTeX and the ``ASEConfig`` fields a model card lists (``include_offline_in_bank`` only with
``OGERASEConfig``)."""
