"""benchmarks/dynamics.py never starts a steered (ASE-kind) run beside another: two do not fit a 24 GB machine."""

SCRIPT = "benchmarks/dynamics.py"


def test_a_steered_run_waits_while_another_steered_run_goes(load_script):
    d = load_script(SCRIPT, "dynamics_script")
    todo = [("ase", 0), ("oger_ase", 0), ("ase_random", 0), ("grpo", 1)]
    assert d.next_run(todo, ["oger_ase"]) == ("grpo", 1)  # the first run that is not steered
    assert todo == [("ase", 0), ("oger_ase", 0), ("ase_random", 0)]
    assert d.next_run(todo, ["ase"]) is None  # only steered runs are left: wait
    assert todo == [("ase", 0), ("oger_ase", 0), ("ase_random", 0)]
    assert d.next_run(todo, ["grpo"]) == ("ase", 0)  # beside an unsteered run a steered one starts
    assert d.next_run(todo, []) == ("oger_ase", 0)


def test_the_order_is_kept_when_nothing_steers(load_script):
    d = load_script(SCRIPT, "dynamics_script")
    todo = [("grpo", 0), ("oger", 0), ("ase", 0)]
    assert [d.next_run(todo, ["oger_noreward"]) for _ in range(3)] == [("grpo", 0), ("oger", 0), ("ase", 0)]
    assert todo == [] and d.next_run(todo, []) is None
