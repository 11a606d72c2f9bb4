"""Shared fixtures: the real SmolLM2 tokenizer and tiny causal LMs built from a config (no hub)."""

import importlib.util
import os
import pathlib
import sys

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("WANDB_MODE", "disabled")

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
    terminalreporter.write_line(f"{sum(_FILE_SECONDS.values()):9.1f}s in all")
