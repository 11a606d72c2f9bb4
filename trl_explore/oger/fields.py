"""The per-completion fields OGER adds to the inputs of the reward functions (and TRL's ``extra_fields``).

Each name carries the method's prefix, so a field never takes the place of a dataset column: a dataset column named
``teacher`` reaches the reward functions unchanged, next to OGER's ``oger_teacher``. A dataset column that uses one
of these names is refused when the trainer is built (``ExplorationTrainer``, "column clash").
"""

IS_OFFLINE = "oger_is_offline"
"""bool: the completion is a teacher trajectory that replaced an online one (OGER §3.3)."""
TEACHER = "oger_teacher"
"""str or None: the teacher of an offline completion; None on online rows."""
DIVERGENCE = "oger_divergence"
"""float or None: ``D_i`` (OGER Eq. 5), cosine distance to the group's teacher trajectories; None on offline rows."""
LAST_TOKEN_ENTROPY = "oger_last_token_entropy"
"""float or None: ``H_last_i`` in nats (OGER Eq. 6); None on offline rows and when not computed."""

REWARD_FIELDS = (IS_OFFLINE, TEACHER, DIVERGENCE, LAST_TOKEN_ENTROPY)
