"""The named choices of ASE-GRPO's bank: the controls of the paper's Table 4 and App. D.2 (SPEC §3.6) and the readouts
the bank is built from, each a :class:`~trl_explore.utils.registry.Registry` entry.

A module of its own so that the options can check their values without importing the bank (which pulls in
scikit-learn). ``"none"`` is the method itself. Code reads an entry's flags (``BANK_CONTROLS[name].estimates_bank``)
instead of comparing names.
"""

from __future__ import annotations

from dataclasses import dataclass

from trl_explore.utils.registry import Registry


@dataclass(frozen=True)
class BankControl:
    """What a bank control changes in :meth:`~trl_explore.ase.bank.SteeringVectorBank.update` and the routing.

    Attributes:
        estimates_bank: False: no bank at all; every rollout is steered with its own unit random vector (App. D.2:
            no clustering, no EMA, no contrast pairs).
        shuffle_labels: swap each pair's positive and negative labels with probability 1/2 before PCA.
        random_directions: replace each cluster candidate by a random direction of the same norm.
        reverse: negate the candidates after clustering.
    """

    estimates_bank: bool = True
    shuffle_labels: bool = False
    random_directions: bool = False
    reverse: bool = False


BANK_CONTROLS = Registry("bank_control", kind="bank control")
BANK_CONTROLS.register("none", BankControl(), help="the method")
BANK_CONTROLS.register("random_directions", BankControl(random_directions=True),
                       help="random directions of each candidate's norm")
BANK_CONTROLS.register("shuffled_labels", BankControl(shuffle_labels=True), help="pair labels swapped at random")
BANK_CONTROLS.register("reversed", BankControl(reverse=True), help="the learned vectors negated")
BANK_CONTROLS.register("unstructured_random", BankControl(estimates_bank=False),
                       help="one unit random vector per rollout, no bank")

BANK_READOUTS = Registry("bank_readouts", kind="bank readout")
"""The block-L readout a rollout contributes to the bank: the unsteered one, or the steered one (clean + alpha v); an
entry is True when the route's offset ``alpha * v_route`` is added to the clean readout."""
BANK_READOUTS.register("clean", False, help="the unsteered block output; default")
BANK_READOUTS.register("steered", True, help="clean + alpha * v_route, as generated")

ROUTE_ALLOCATIONS = Registry("route_allocation", kind="route allocation")
"""How a group's rollouts are split over the clean route and the K steering routes (``trl_explore.ase.routing``)."""
ROUTE_ALLOCATIONS.register("balanced_uniform", help="equal shares, the remainder drawn at random; the paper's")

CLEAN_ROUTE = 0
"""The route of unsteered rollouts (``v_0 = 0``); steering routes are 1..K."""
OFFLINE_ROUTE = -1
"""The route logged for a row that was not sampled from the policy (e.g. a teacher trajectory)."""
