"""The bank controls of ASE-GRPO (SPEC §3.6, paper Table 4 and App. D.2) and its readout choices, in one place.

A module of its own so that ``ASEConfig`` can check the option without importing the bank (which pulls in
scikit-learn). ``"none"`` is the method itself.
"""

BANK_CONTROLS = ("none", "random_directions", "shuffled_labels", "reversed", "unstructured_random")

BANK_READOUTS = ("clean", "steered")
"""Values of ``ASEConfig.bank_readouts``: the unsteered block-L readout, or the steered one (clean + alpha v_route)."""
