"""Registries of named choices (trl_explore/utils/registry.py) and the ones the package declares."""

import pytest

from trl_explore.utils.registry import Registry


def test_a_registry_lists_checks_and_maps_names():
    colours = Registry("colour", kind="colour")
    colours.register("red", 1, help="warm")
    colours.register("blue", 2)
    assert colours.names() == ("red", "blue") and "red" in colours and len(colours) == 2
    assert colours["blue"] == 2 and colours.check("red") == "red" and colours.help("red") == "warm"
    assert colours.describe() == "'red' (warm), 'blue'"
    with pytest.raises(ValueError, match="colour='green' is not a colour; valid: red, blue"):
        colours["green"]
    with pytest.raises(ValueError, match="shade='green' is not a colour"):
        colours.check("green", option="shade")
    with pytest.raises(ValueError, match="'red' is registered twice"):
        colours.register("red")
    assert Registry("x").register("a") == "a"  # the entry defaults to the name


def test_the_package_registries_hold_their_choices():
    from trl_explore.ase.controls import BANK_CONTROLS, BANK_READOUTS, ROUTE_ALLOCATIONS
    from trl_explore.oger.embedding import EMBEDDING_DTYPES, LONG_TEXT_MODES
    from trl_explore.oger.options import LAST_TOKEN
    from trl_explore.oger.replacement import REPLACEMENT_RULES
    from trl_explore.rewards.modes import GRADER_MODES

    assert BANK_CONTROLS.names() == ("none", "random_directions", "shuffled_labels", "reversed", "unstructured_random")
    assert [name for name in BANK_CONTROLS if not BANK_CONTROLS[name].estimates_bank] == ["unstructured_random"]
    assert BANK_READOUTS["steered"] and not BANK_READOUTS["clean"]
    assert ROUTE_ALLOCATIONS.names() == ("balanced_uniform",)
    assert LONG_TEXT_MODES.names() == ("truncate", "chunk_mean") and "bfloat16" in EMBEDDING_DTYPES
    assert REPLACEMENT_RULES["lowest_divergence"].uses_divergence and not REPLACEMENT_RULES["random"].uses_divergence
    assert LAST_TOKEN["before_eos"] and not LAST_TOKEN["final_token"]
    assert GRADER_MODES.names()[0] == "math_verify"
