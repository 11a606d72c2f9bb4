"""Shared fixtures: the real SmolLM2 tokenizer and tiny causal LMs built from a config (no hub)."""

import importlib.util
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")


def _usable_cores() -> int:
    """The cores this process may run on (its CPU affinity where the system has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):  # an xdist worker: the cores shared among the workers (and the
    # processes their tests start), not every core per worker: oversubscribed OpenMP threads spin and slow all of them
    os.environ.setdefault("OMP_NUM_THREADS",
                          str(max(1, _usable_cores() // int(os.environ["PYTEST_XDIST_WORKER_COUNT"]))))

import pytest  # noqa: E402

from trl_explore.testing import make_tiny_causal_lm, run_two_cpu_processes  # noqa: E402


@pytest.fixture(scope="session")
def smollm2_tokenizer():
    """The embedded SmolLM2-135M-Instruct tokenizer (:func:`trl_explore.testing.smollm2_tokenizer`)."""
    from trl_explore import testing

    return testing.smollm2_tokenizer()


@pytest.fixture
def tiny_model(smollm2_tokenizer):
    return make_tiny_causal_lm(smollm2_tokenizer)


@pytest.fixture
def make_tiny_lm(smollm2_tokenizer):
    """``make_tiny_lm(arch="llama", seed=0, hidden_size=64, num_layers=2)``: a new tiny causal LM over the SmolLM2
    vocabulary (see :func:`trl_explore.testing.make_tiny_causal_lm`)."""
    return lambda **kwargs: make_tiny_causal_lm(smollm2_tokenizer, **kwargs)


@pytest.fixture
def tiny_model_dir(tmp_path, make_tiny_lm, smollm2_tokenizer) -> pathlib.Path:
    """``tmp_path / "tiny"``: a new tiny causal LM (``make_tiny_lm()``) saved with the SmolLM2 tokenizer, for a
    script's ``--model_name_or_path``."""
    folder = tmp_path / "tiny"
    make_tiny_lm().save_pretrained(folder)
    smollm2_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def load_script(monkeypatch):
    """``load_script(path, name=None)``: a file of this repository that the package does not ship (an example or
    benchmark script; ``path`` relative to the repository root) loaded as a module named ``name`` (default: the file's
    stem). Its top level runs, its ``__main__`` block does not; the module stays in ``sys.modules`` for the test, where
    dataclasses look their module up when a parser reads their fields."""
    root = pathlib.Path(__file__).resolve().parents[1]

    def load(path: str, name: str | None = None):
        spec = importlib.util.spec_from_file_location(name or pathlib.Path(path).stem, root / path)
        module = importlib.util.module_from_spec(spec)
        monkeypatch.setitem(sys.modules, spec.name, module)
        spec.loader.exec_module(module)
        return module

    return load


@pytest.fixture
def two_cpu_processes():
    """:func:`trl_explore.testing.run_two_cpu_processes`: a script in 2 CPU processes (gloo), with torchrun."""
    return run_two_cpu_processes


@pytest.fixture
def make_summary():
    """``make_summary(model, {benchmark: (mean, pass@n)}, layout="ase", n=8)``: an evaluation summary as
    ``trl_explore.evaluation`` writes it (``summary.json``), over any of AIME 2024, MATH-500 (math) and GPQA-D (ood),
    with its domain averages."""
    from trl_explore.evaluation import scoring

    domain = {"aime2024": "math", "math500": "math", "gpqa_diamond": "ood"}
    title = {"aime2024": "AIME 2024", "math500": "MATH-500", "gpqa_diamond": "GPQA-D"}

    def make(model, scores, layout="ase", n=8):
        benchmarks = {
            name: {"title": title[name], "domain": domain[name], "mean": m, "pass_at_n": p, "num_samples": n,
                   "pass_at_k": {"1": m, str(n): p}}
            for name, (m, p) in scores.items()
        }  # fmt: skip
        return {"model": model, "layout": layout, "benchmarks": benchmarks,
                "averages": scoring.domain_averages(benchmarks)}

    return make


# ---------------------------------------------------------------- the suite's time, per test file (issue 43)
def pytest_xdist_auto_num_workers(config):
    """Workers for ``-n auto`` (``addopts`` in ``pyproject.toml``): 2 when a run names only folders (the whole suite or
    a tier of it: its subprocess-heavy tests leave a core idle about 40% of the time when run one by one), none when it
    names files or tests (one file's tests run in this process, as pytest does without xdist; the vLLM tier is one
    file). ``PYTEST_XDIST_AUTO_NUM_WORKERS`` or ``-n N`` on the command line decide instead; ``-n 0`` runs in process.
    Files are never split between workers (``--dist loadfile``): a module's fixtures are built once."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return int(os.environ["PYTEST_XDIST_AUTO_NUM_WORKERS"])
    targets = [pathlib.Path(arg.split("::", 1)[0]) for arg in (config.args or config.getini("testpaths"))]
    if not targets or not all(target.is_dir() for target in targets):
        return 0
    return min(2, _usable_cores())


_FILE_SECONDS: dict[str, float] = {}


def pytest_runtest_logreport(report):
    """Add each test's setup, call and teardown seconds to its file's total."""
    path = report.nodeid.split("::", 1)[0]
    _FILE_SECONDS[path] = _FILE_SECONDS.get(path, 0.0) + report.duration


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter):
    """After pytest's ``--durations`` table: the test files that took longest (seconds, all phases; a session or
    module fixture counts in the file of the first test that used it), and the whole."""
    if not _FILE_SECONDS:
        return
    ranked = sorted(_FILE_SECONDS.items(), key=lambda item: -item[1])
    terminalreporter.write_sep("=", f"seconds per test file (slowest {min(15, len(ranked))} of {len(ranked)})")
    for path, seconds in ranked[:15]:
        terminalreporter.write_line(f"{seconds:9.1f}s {path}")
    workers = getattr(terminalreporter.config.option, "numprocesses", 0) or 0
    terminalreporter.write_line(f"{sum(_FILE_SECONDS.values()):9.1f}s in all" +
                                (f" (summed over {workers} workers: more than the wall time)" if workers else ""))
