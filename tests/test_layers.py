"""The package's layering rules, checked on its own imports (every ``import`` statement, module level and inside
functions; ``if TYPE_CHECKING:`` blocks excepted).

Layers:

* shared code: everything that is not a method package or a composition (the driver, components, config, registry,
  positions, models, vLLM engine access, distributed, resume, hub, reporting, defaults, rewards/, data/, sampling/,
  evaluation/, cli);
* methods: ``trl_explore.oger``, ``trl_explore.ase`` (a method may import shared code);
* compositions: ``trl_explore.oger_ase`` and the package's ``__init__`` (may import anything).

Rules: shared code never imports a method; a method never imports another method; ``rewards/`` imports neither
``data/``, ``sampling/``, ``evaluation/`` nor the driver; and there is no import cycle between modules.
"""

import ast
import pathlib
import re

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent / "trl_explore"
METHODS = ("trl_explore.oger", "trl_explore.ase", "trl_explore.dynamic_sampling")
COMPOSITIONS = ("trl_explore", "trl_explore.oger_ase")
REWARDS_MAY_NOT_IMPORT = ("trl_explore.data", "trl_explore.sampling", "trl_explore.evaluation", "trl_explore.driver",
                          "trl_explore.components", *METHODS)


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
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
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


def test_layering_rules_hold():
    problems = layer_violations(import_graph())
    assert problems == [], "\n".join(problems)


def test_no_import_cycles():
    cycles = import_cycles(import_graph())
    assert cycles == [], "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize(
    "graph, expected",
    [
        ({"trl_explore.driver": {("trl_explore.oger.fields", 3)}}, ["shared code imports a method"]),
        ({"trl_explore.ase.component": {("trl_explore.oger.fields", 29)}}, ["a method imports another method"]),
        ({"trl_explore.rewards.grading": {("trl_explore.data.champ_answers", 69)}}, ["rewards/ imports"]),
        ({"trl_explore.oger_ase": {("trl_explore.oger.component", 1), ("trl_explore.ase.component", 2)}}, []),
        ({"trl_explore.oger.component": {("trl_explore.components", 1), ("trl_explore.rewards.checks", 2)}}, []),
    ],
)
def test_the_rules_catch_what_they_are_written_for(graph, expected):
    problems = layer_violations(graph)
    assert len(problems) == len(expected) and all(e in p for e, p in zip(expected, problems))


def test_module_sizes():
    """No module of the package over 600 lines; the driver, read in one sitting, at most 300."""
    sizes = {name: len(path.read_text().splitlines()) for name, path in _modules().items()}
    assert {name: n for name, n in sizes.items() if n > 600} == {}
    assert sizes["trl_explore.driver"] <= 300


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
