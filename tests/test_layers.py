"""The package's layering rules, checked on its own imports (every ``import`` statement: module level, inside
functions and under ``if TYPE_CHECKING:``, since a type hint ties two files as much as any import).

Rooms: a top-level module, or a first-level subpackage with all its files (``trl_explore.driver``,
``trl_explore.trl_guards``, ``trl_explore.checkpoints``, ``trl_explore.utils``, ``trl_explore.rewards``, ...).

* shared code: every room that is not a method or a composition (the driver, TRL guards, checkpoints, utilities,
  rewards/, data/, sampling/, evaluation/, the product surface: cli, hub, readiness, reporting);
* methods: ``trl_explore.oger``, ``trl_explore.ase``, ``trl_explore.exgrpo``, ``trl_explore.dynamic_sampling``
  (a method may import shared code: its preset trainer the driver, its card the Hub's card template);
* compositions: ``trl_explore.oger_ase`` and the package's ``__init__`` (may import anything).

Rules: shared code never imports a method; a method never imports another method; ``rewards/`` imports neither
``data/``, ``sampling/``, ``evaluation/`` nor the driver; no import cycle between modules; no cycle between rooms
either (so the rooms stack in layers with no import climbing back up); and no file imports another file's private
(underscored) name.
"""

import ast
import importlib
import importlib.util
import pathlib
import re

import pytest

from trl_explore.moved import MOVED, current_path

ROOT = pathlib.Path(__file__).resolve().parent.parent / "trl_explore"
METHODS = ("trl_explore.oger", "trl_explore.ase", "trl_explore.exgrpo", "trl_explore.dynamic_sampling")
COMPOSITIONS = ("trl_explore", "trl_explore.oger_ase")
REWARDS_MAY_NOT_IMPORT = ("trl_explore.data", "trl_explore.sampling", "trl_explore.evaluation", "trl_explore.driver",
                          *METHODS)


def _modules() -> dict[str, pathlib.Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _resolve(name: str, modules) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _edges(name: str, path: pathlib.Path, modules) -> set[tuple[str, int]]:
    """``{(imported trl_explore module, line)}`` of one module."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    edges = set()

    def visit(node):
        for child in ast.iter_child_nodes(node):
            targets = []
            if isinstance(child, ast.Import):
                targets = [alias.name for alias in child.names]
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    parts = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join(parts + ([child.module] if child.module else []))
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in child.names]
            for target in targets:
                resolved = _resolve(target, modules) if target.startswith("trl_explore") else None
                if resolved is not None and resolved != name:
                    edges.add((resolved, child.lineno))
            visit(child)

    visit(ast.parse(path.read_text()))
    return edges


def import_graph() -> dict[str, set[tuple[str, int]]]:
    """``{module: {(imported trl_explore module, line)}}`` over every module of the package."""
    modules = _modules()
    return {name: _edges(name, path, modules) for name, path in modules.items()}


def _in(module: str, packages) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _method_of(module: str) -> str | None:
    return next((m for m in METHODS if _in(module, (m,))), None)


def layer_violations(graph) -> list[str]:
    """One line per import that breaks a rule (``module:line -> imported``)."""
    problems = []
    for module, edges in graph.items():
        for target, line in sorted(edges):
            where = f"{module}:{line} imports {target}"
            source_method, target_method = _method_of(module), _method_of(target)
            if module in COMPOSITIONS:
                continue
            if target_method and source_method is None:
                problems.append(f"{where}: shared code imports a method")
            elif target_method and source_method != target_method:
                problems.append(f"{where}: a method imports another method")
            if _in(module, ("trl_explore.rewards",)) and _in(target, REWARDS_MAY_NOT_IMPORT):
                problems.append(f"{where}: rewards/ imports {target}")
    return problems


def import_cycles(graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, cycles, counter = {}, {}, [], set(), [], [0]

    def connect(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target, _ in graph.get(node, ()):
            if target not in index:
                connect(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            connect(node)
    return cycles


def room_of(module: str) -> str:
    """The room of a module: its top-level module or first-level subpackage (``trl_explore.driver.scoring`` ->
    ``trl_explore.driver``); the package's ``__init__`` is a room of its own."""
    return ".".join(module.split(".")[:2])


def room_graph(graph) -> dict[str, set[tuple[str, int]]]:
    """The import graph between rooms (imports inside one room left out)."""
    rooms = {}
    for module, edges in graph.items():
        rooms.setdefault(room_of(module), set()).update(
            (room_of(target), line) for target, line in edges if room_of(target) != room_of(module))
    return rooms


def private_imports() -> list[str]:
    """``module:line imports name from other`` for each underscored (not dunder) name one file of the package takes
    from another."""
    modules, found = _modules(), []
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + [base] * bool(base))
            for alias in node.names:
                private = alias.name.startswith("_") and not alias.name.startswith("__")
                if base.startswith("trl_explore") and private and f"{base}.{alias.name}" not in modules:
                    found.append(f"{name}:{node.lineno} imports {alias.name} from {base}")
    return found


def test_layering_rules_hold():
    problems = layer_violations(import_graph())
    assert problems == [], "\n".join(problems)


def test_no_import_cycles():
    cycles = import_cycles(import_graph())
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def test_rooms_stack_in_layers():
    """No cycle between rooms: each room can sit above every room it imports, so no import climbs back up."""
    cycles = import_cycles(room_graph(import_graph()))
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


def test_no_file_imports_another_files_private_name():
    assert private_imports() == []


def test_the_package_imports_no_old_path():
    """Old paths (``trl_explore.moved``) are for users' code; the package's own files import the new ones."""
    modules, found = _modules(), []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = ([a.name for a in node.names] if isinstance(node, ast.Import)
                       else [node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
            found += [f"{name}:{node.lineno} imports {target}" for target in targets
                      if any(target == old or target.startswith(old + ".") for old in MOVED)]
    assert found == []


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_old_import_paths_give_the_same_module(old, new):
    module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert module.__name__ == new and module.__spec__.name == new  # the alias leaves the module's own identity


def test_recorded_paths_map_to_their_place_today():
    assert current_path("trl_explore.config.ExplorationConfig") == "trl_explore.driver.config.ExplorationConfig"
    assert current_path("trl_explore.driver.ExplorationTrainer") == "trl_explore.driver.trainer.ExplorationTrainer"
    assert current_path("trl_explore.trl_contract") == "trl_explore.trl_guards.contract"
    for unchanged in ("trl_explore.oger.trainer.OGERTrainer", "trl_explore.configs.x", "t.ASEGRPOTrainer"):
        assert current_path(unchanged) == unchanged


def test_faces_keep_the_old_names():
    from trl_explore.checkpoints import inspect_checkpoint
    from trl_explore.checkpoints.records import inspect_checkpoint as at_its_place
    from trl_explore.config import ExplorationConfig
    from trl_explore.driver.config import ExplorationConfig as config_at_its_place

    assert inspect_checkpoint is at_its_place and ExplorationConfig is config_at_its_place
    # the packages read through to the modules they were; the timers OGER once imported from components still there
    from trl_explore.checkpoints import RECORD_NAME
    from trl_explore.components import phase
    from trl_explore.driver import Rollout, check_launch
    from trl_explore.driver.components import Rollout as rollout_at_its_place
    from trl_explore.driver.profiling import phase as phase_at_its_place
    from trl_explore.trl_guards.distributed import check_launch as launch_check_at_its_place

    assert RECORD_NAME == "trl_explore_checkpoint.json" and phase is phase_at_its_place
    assert Rollout is rollout_at_its_place and check_launch is launch_check_at_its_place
    with pytest.raises(AttributeError, match="module 'trl_explore.driver' has no attribute 'no_such_name'"):
        import trl_explore.driver

        trl_explore.driver.no_such_name  # noqa: B018


def test_room_and_private_rules_on_hand_made_cases():
    graph = {"trl_explore.driver.trainer": {("trl_explore.hub", 1)}, "trl_explore.hub": {("trl_explore.cli", 2)},
             "trl_explore.cli": {("trl_explore.driver.config", 3)}, "trl_explore.driver.config": set()}
    assert import_cycles(room_graph(graph)) == [["trl_explore.cli", "trl_explore.driver", "trl_explore.hub"]]
    assert import_cycles(room_graph({"trl_explore.driver.trainer": {("trl_explore.driver.scoring", 1)},
                                     "trl_explore.driver.scoring": {("trl_explore.driver.trainer", 2)}})) == []
    assert room_of("trl_explore") == "trl_explore" and room_of("trl_explore.oger.reward") == "trl_explore.oger"


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"trl_explore.driver": {("trl_explore.oger.fields", 3)}}, ["shared code imports a method"]),
        ({"trl_explore.ase.component": {("trl_explore.oger.fields", 29)}}, ["a method imports another method"]),
        ({"trl_explore.rewards.grading": {("trl_explore.data.champ_answers", 69)}}, ["rewards/ imports"]),
        ({"trl_explore.oger_ase": {("trl_explore.oger.component", 1), ("trl_explore.ase.component", 2)}}, []),
        ({"trl_explore.oger.component": {("trl_explore.driver.components", 1), ("trl_explore.rewards.checks", 2)}},
         []),
    ],
)
def test_the_rules_catch_what_they_are_written_for(graph, expected):
    problems = layer_violations(graph)
    assert len(problems) == len(expected) and all(e in p for e, p in zip(expected, problems))


def test_module_sizes():
    """No module of the package over 600 lines; the driver, read in one sitting, at most 300."""
    sizes = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    assert {name: n for name, n in sizes.items() if n > 600} == {}
    assert sizes["trl_explore.driver.trainer"] <= 300


def test_no_test_module_imports_another():
    """Tests share helpers through conftest.py fixtures or trl_explore.testing, never by importing a test module or
    conftest (also inside the scripts that tests write out and run)."""
    tests = ROOT.parent / "tests"
    pattern = re.compile(r"^\s*(?:from|import)\s+(?:test_\w+|conftest)\b", re.MULTILINE)
    found = [f"{path.relative_to(tests)}: {match.group().strip()}" for path in sorted(tests.rglob("*.py"))
             for match in pattern.finditer(path.read_text())]
    assert found == [], "\n".join(found)


def test_cycle_finder_on_a_hand_made_graph():
    graph = {"a": {("b", 1)}, "b": {("c", 1)}, "c": {("a", 1)}, "d": {("a", 1)}}
    assert import_cycles(graph) == [["a", "b", "c"]]
    assert import_cycles({"a": {("b", 1)}, "b": set()}) == []


def test_scripts_import_names_that_exist():
    """Every ``from trl_explore... import name`` of the benchmarks, examples and test scripts names something the
    package has (a rename that missed a script fails here, not when the script is next run)."""
    folders = ("benchmarks", "examples", "tests/scripts")
    scripts = [p for folder in folders for p in (ROOT.parent / folder).glob("*.py")]
    missing = []
    for path in scripts:
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level or not (node.module or "").startswith("trl_explore"):
                continue
            module = importlib.import_module(node.module)
            for alias in node.names:
                found = hasattr(module, alias.name) or (hasattr(module, "__path__") and  # a submodule
                                                        importlib.util.find_spec(f"{node.module}.{alias.name}"))
                if not found:
                    missing.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.module}.{alias.name}")
    assert scripts and missing == [], "\n".join(missing)
