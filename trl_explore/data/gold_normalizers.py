"""The gold normalisers of the data sets: each data set's phrasing rules for its gold answers, by name.

A gold normaliser maps a gold answer's text to the maths it states, one string per accepted reading
(``gold_normalizer(text) -> [alternatives]``); the grader applies it to golds that Math-Verify cannot read whole
(:class:`~trl_explore.rewards.grading.GraderOptions`). The rules belong to the data, so they live here and reach the
grader as a value: ``GOLD_NORMALIZERS[name]`` (``None`` for ``"none"``) is what the rewards, the builder and the
evaluation are given. The option is ``gold_normalizer`` (``ExplorationConfig``, the offline builder).
"""

from __future__ import annotations

from trl_explore.data.champ_answers import gold_alternatives
from trl_explore.utils.registry import Registry

GOLD_NORMALIZERS = Registry("gold_normalizer", kind="gold normaliser")
GOLD_NORMALIZERS.register("none", None, help="the gold text as it is; default")
GOLD_NORMALIZERS.register("champ", gold_alternatives, help="CHAMP's phrasing: 'X is the only possible value', ...")

_BY_DATASET = {"champ": "champ"}


def gold_normalizer_for(dataset_name: str | None) -> str:
    """The name of the gold normaliser a data set needs: ``"champ"`` for the embedded CHAMP set (training or its
    benchmark), ``"none"`` for everything else."""
    return _BY_DATASET.get(str(dataset_name), "none")
