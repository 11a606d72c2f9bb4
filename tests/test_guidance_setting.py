"""benchmarks/guidance_setting.py: the expected share of all-wrong GRPO groups, from each problem's saved samples."""

import pytest

SCRIPT = "benchmarks/guidance_setting.py"


def test_all_wrong_probability_is_hypergeometric(load_script):
    g = load_script(SCRIPT, "guidance_setting_script")
    assert g.all_wrong_probability(8, 0, 4) == 1.0
    assert g.all_wrong_probability(8, 2, 4) == pytest.approx(15 / 70)  # C(6, 4) / C(8, 4)
    assert g.all_wrong_probability(8, 1, 8) == 0.0  # the whole set holds the correct one
    assert g.all_wrong_probability(8, 5, 4) == 0.0  # only 3 wrong samples: no group of 4 is all wrong
    with pytest.raises(ValueError, match="group_size <= num_samples"):
        g.all_wrong_probability(4, 0, 8)


def test_level_table_reads_sampled_rows_per_problem(load_script):
    g = load_script(SCRIPT, "guidance_setting_script")
    rows = [{"problem_id": f"ladder:two_digit:{p}", "level": "two_digit", "kind": kind, "completion_ids": [1] * n}
            for p, kind, n in [("a", "sampled", 2)] * 4 + [("b", "sampled", 4)] * 4 + [("a", "greedy", 9)]]
    scores = [1.0, 0.0, 0.0, 0.0] + [0.0] * 4 + [1.0]  # a: 1 of 4 correct, b: none; the greedy row is not counted
    table = g.level_table(rows, scores, [2, 4])["two_digit"]
    assert table["problems"] == 2 and table["pass_rate"] == pytest.approx(1 / 8) and table["never"] == 0.5
    assert table["all_wrong"]["2"] == pytest.approx((3 / 6 + 1) / 2)  # a: C(3, 2) / C(4, 2); b: 1
    assert table["all_wrong"]["4"] == pytest.approx(0.5)
    assert table["tokens_mean"] == 3 and table["tokens_max"] == 4
