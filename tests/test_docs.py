"""Every fenced code block of README.md and docs/*.md runs as written (issue 21).

A block's info string is its language, optionally followed by ``no-test``:

* ``python``: run as a script; ``bash``: run with ``bash -e -o pipefail``. The blocks of one page run in page order, in
  one scratch folder (links to the repository's folders, and an empty ``outputs/``), with ``TRL_EXPLORE_TINY_POLICY=1``
  (``trl_explore.defaults.resolve_model_path("embedded")`` then gives a tiny random model over the SmolLM2 tokenizer),
  ``TRL_EXPLORE_CHAMP_PROBLEMS=27`` (a CHAMP build takes 27 of the 270 problems: seconds, not the ten minutes of
  grading a first full build costs) and ``HF_HUB_OFFLINE=1``. Running them is the slow tier.
* ``bash no-test``: not run (installs, the test suite itself, GPUs, vLLM, long measurements). Every such block is
  listed in :data:`NOT_RUN` with the reason, and the page says it too: a new one fails the fast tier until it is
  listed here.
* ``text``, ``yaml``, ``json``: shown, not run.

The fast tier checks what needs no run: the languages and markers, that Python blocks compile and shell blocks parse,
that the files a block names exist, that every ``--option`` given to an example script is one of its options, and
that relative links resolve.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
RUN_LANGUAGES = ("python", "bash")
SHOWN_LANGUAGES = ("text", "yaml", "json")
MARKER = "no-test"

# (page, first command line of the block) -> why it is not run. Keep this short: a block that can run, runs.
NOT_RUN = {
    ("README.md", "bash scripts/install.sh && accelerate launch examples/train_oger.py"): "installs packages",
    ("README.md", "bash scripts/install.sh && python -m pytest -q tests"): "installs packages; runs the suite",
    ("README.md", 'python -m pytest -q -m "not slow" tests'): "runs the test suite itself; installs vLLM",
    ("README.md", 'python -m pip install --dry-run --ignore-installed -q --report - ".[vllm]" | python -c "import '
                  'json, sys; \\'): "resolves vLLM's dependencies on PyPI; installs a second environment",
    ("docs/training.md", "bash scripts/install.sh"): "installs packages",
    ("docs/training.md", 'pip install -e ".[vllm,tensorboard]"'): "8 GPUs, the Hub, days of compute",
    ("docs/offline-datasets.md",
     "python examples/build_offline_dataset.py --source luffy --data_files openr1.parquet \\"):
        "needs the LUFFY files and teacher models from the Hub",
    ("docs/distributed.md",
     "accelerate launch --config_file accelerate_configs/zero3.yaml --num_processes 2 --mixed_precision no \\"):
        "DeepSpeed's first run builds an op; tests/test_distributed_engines.py runs these engines",
    ("docs/distributed.md",
     "accelerate launch --config_file accelerate_configs/multi_gpu.yaml examples/train_oger.py"):
        "GPUs, several nodes",
    ("docs/vllm.md", "bash scripts/install_vllm.sh"): "installs vLLM; tests/test_vllm.py runs these paths",
    ("docs/vllm.md",
     "TRL_EXPLORE_STEERING_LAYER=0 CUDA_VISIBLE_DEVICES=0 trl vllm-serve --model Qwen/Qwen3-1.7B-Base"):
        "GPUs (NCCL weight transfer)",
    ("docs/performance.md", "python benchmarks/overhead.py --model embedded --variants grpo,oger_full,ase "
                            "--repeats 5 --steps 1 --threads 1 \\"):
        "measurements: tens of minutes, on a quiet host",
    ("docs/performance.md", "python benchmarks/precision.py --threads 2 --steps 3 "
                            "--out benchmarks/results/precision_cpu_amx --runs \\"):
        "measurements: about 40 minutes, on a quiet host with AMX",
    ("docs/grading.md", "python benchmarks/grader_agreement.py"): "downloads Math-Verify's sdist; minutes",
    ("docs/reproduction.md",
     "nice -n 5 python benchmarks/dynamics.py --workers 2 --threads 1   # resumable; --report-only: tables, plots"):
        "the dynamics study: about 90 minutes of two cores",
    ("docs/reproduction.md",
     "nohup nice -n 5 bash benchmarks/run_collapse_study.sh > collapse.log 2>&1 &   # resumable; commits each run"):
        "the collapse study: hours of the machine, across sessions",
    ("docs/reproduction.md",
     "python benchmarks/guidance_setting.py                                            # the setting's evidence "
     "(validation)"):
        "the guidance study: the setting rewrites its committed tables; the runs take many hours, across sessions",
    ("docs/reproduction.md", "git worktree add ../study b1823de && OUT=$PWD/benchmarks/results/collapse "
                             "PYTHONPATH=$(realpath ../study) nohup nice -n 5 bash "
                             "../study/benchmarks/run_collapse_study.sh > collapse.log 2>&1 &"):
        "the collapse study's remaining runs, at the code it started with: hours",
    ("docs/evaluation.md",
     "python examples/evaluate.py --model_name_or_path me/oger-qwen-7b --protocol oger \\"):
        "Hub benchmarks and a Hub model; GPU hours",
}

SCRIPTS = {  # example script -> how its parser is built (module, data arguments, training config)
    "examples/train_oger.py": ("trl_explore.data.training_data:DataArguments", "trl_explore:OGERConfig"),
    "examples/train_ase_grpo.py": (None, "trl_explore:ASEConfig"),  # its own ScriptArguments
    "examples/train_oger_ase.py": ("trl_explore.data.training_data:DataArguments", "trl_explore:OGERASEConfig"),
    "examples/train_exgrpo.py": ("trl_explore.data.training_data:DataArguments", "trl_explore:ExGRPOConfig"),
    "examples/train_sft.py": ("trl_explore.data.training_data:DataArguments", "trl_explore.sft:SFTBaselineConfig"),
    "examples/evaluate.py": ("EvalArguments", None),
    "examples/plot.py": ("PlotArguments", None),
    "examples/build_offline_dataset.py": ("ScriptArguments", None),
}


@dataclasses.dataclass(frozen=True)
class Block:
    page: str  # relative to the repository root
    line: int  # of the opening fence
    language: str
    markers: tuple[str, ...]
    code: str

    @property
    def first_line(self) -> str:
        lines = [ln for ln in self.code.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
        return lines[0].strip() if lines else ""

    @property
    def runs(self) -> bool:
        return self.language in RUN_LANGUAGES and MARKER not in self.markers

    def __str__(self) -> str:
        return f"{self.page}:{self.line} ({self.language} {' '.join(self.markers)})".strip()


def blocks_of(page: pathlib.Path) -> list[Block]:
    """The fenced blocks of a markdown page (fences of three or more backticks; indented fences included)."""
    found, lines, i = [], page.read_text().splitlines(), 0
    while i < len(lines):
        opening = re.match(r"^(\s*)(`{3,})(.*)$", lines[i])
        if not opening:
            i += 1
            continue
        indent, fence, info = opening.groups()
        start, body = i + 1, []
        i += 1
        while i < len(lines) and not re.match(rf"^\s*{fence}\s*$", lines[i]):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        if i == len(lines):
            raise AssertionError(f"{page.name}:{start}: unclosed code fence")
        words = info.split()
        found.append(Block(str(page.relative_to(ROOT)), start, words[0] if words else "", tuple(words[1:]),
                           "\n".join(body) + "\n"))
        i += 1
    return found


ALL_BLOCKS = [block for page in PAGES for block in blocks_of(page)]


# ---------------------------------------------------------------- fast tier: no block runs


def test_every_block_has_a_known_language_and_marker():
    for block in ALL_BLOCKS:
        assert block.language in RUN_LANGUAGES + SHOWN_LANGUAGES, f"{block}: name the language (python, bash, text)"
        assert set(block.markers) <= {MARKER}, f"{block}: the only marker is {MARKER!r}"
        assert not block.markers or block.language == "bash", f"{block}: only shell blocks may be {MARKER!r}"


def test_the_not_run_blocks_are_the_listed_ones():
    marked = {(b.page, b.first_line) for b in ALL_BLOCKS if MARKER in b.markers}
    assert marked == set(NOT_RUN), (f"marked but not listed: {sorted(marked - set(NOT_RUN))}; listed but not marked "
                                    f"(or the page moved): {sorted(set(NOT_RUN) - marked)}")


def test_python_blocks_compile():
    for block in ALL_BLOCKS:
        if block.language == "python":
            compile(block.code, str(block), "exec")


def test_shell_blocks_parse():
    for block in ALL_BLOCKS:
        if block.language == "bash":
            result = subprocess.run(["bash", "-n"], input=block.code, text=True, capture_output=True)
            assert result.returncode == 0, f"{block}: {result.stderr}"


def _commands(block: Block) -> list[list[str]]:
    """The shell words of each command of a block (continuation lines joined, comments dropped)."""
    text = block.code.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        for part in re.split(r"&&|\|\||;|\|", line):
            try:
                words = shlex.split(part, comments=True)
            except ValueError:
                continue
            if words:
                commands.append(words)
    return commands


PATH_WORD = re.compile(r"^(examples|recipes|accelerate_configs|scripts|benchmarks|tests|trl_explore|docs)/[\w./-]+$")
OUTPUT_FLAGS = ("--out", "--output_dir", "--json")  # their values are written, not read


def test_files_named_in_blocks_exist():
    for block in ALL_BLOCKS:
        if block.language != "bash":
            continue
        for words in _commands(block):
            for before, word in zip(["", *words], words):
                value = word.split("=", 1)[-1]
                if before in OUTPUT_FLAGS:
                    continue
                if PATH_WORD.match(value) and not any(c in value for c in "*<>"):
                    assert (ROOT / value).exists(), f"{block}: {value} does not exist"


def _load(spec: str, module=None):
    name, _, attr = spec.partition(":")
    if not attr:
        return getattr(module, name)
    return getattr(importlib.import_module(name), attr)


def _script_options(script: str, load_script) -> set[str]:
    from trl import TrlParser

    from trl_explore.cli import make_parser, script_dataclasses

    module = load_script(script, f"docs_{pathlib.Path(script).stem}")  # the scripts run only under __main__
    data, config = SCRIPTS[script]
    if config is None:
        parser = TrlParser((_load(data, module),))
    else:
        data_cls = _load(data) if data else module.ScriptArguments
        parser = make_parser(*script_dataclasses(data_cls, _load(config)))  # as run_training
    return set(parser._option_string_actions) | {"--config"}


def test_options_given_to_example_scripts_exist(load_script):
    known = {}
    for block in ALL_BLOCKS:
        if block.language != "bash":
            continue
        for words in _commands(block):
            scripts = [i for i, w in enumerate(words) if w in SCRIPTS]
            if not scripts:
                continue
            script = words[scripts[0]]
            if script not in known:
                known[script] = _script_options(script, load_script)
            for word in words[scripts[0] + 1:]:
                if word.startswith("--"):
                    option = word.split("=", 1)[0]
                    assert option in known[script], f"{block}: {script} has no option {option}"


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PENDING_PAGES = {  # linked before they exist: written by others; the check applies once the file is there
}


def test_relative_links_resolve():
    for page in PAGES:
        for target in LINK.findall(page.read_text()):
            if re.match(r"^[a-z]+://|^mailto:", target):
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            relative = resolved.relative_to(ROOT).as_posix() if resolved.is_relative_to(ROOT) else str(resolved)
            if not resolved.exists() and relative in PENDING_PAGES:
                continue
            assert resolved.exists(), f"{page.name}: link to {target} does not resolve"
            if anchor and resolved.suffix == ".md":
                headings = [re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                            for h in re.findall(r"^#+ (.+)$", resolved.read_text(), flags=re.M)]
                assert anchor in headings, f"{page.name}: no heading #{anchor} in {relative}"


def test_pages_open_with_what_a_user_does_there():
    for page in PAGES[1:]:
        text = page.read_text().split("\n\n")
        assert text[1].startswith("What you do here:"), f"{page.name}: the first paragraph says what a user does there"


# ---------------------------------------------------------------- slow tier: the blocks run


def _scratch_folder(tmp_path: pathlib.Path) -> pathlib.Path:
    """A folder that looks like the repository root to a command (links to its folders), with its own outputs/."""
    for entry in ROOT.iterdir():
        if entry.name not in ("outputs", ".git") and not entry.name.startswith("."):
            (tmp_path / entry.name).symlink_to(entry)
    (tmp_path / "outputs").mkdir()
    return tmp_path


def _environment() -> dict:
    env = dict(os.environ)
    env.update({"TRL_EXPLORE_TINY_POLICY": "1", "TRL_EXPLORE_CHAMP_PROBLEMS": "27", "HF_HUB_OFFLINE": "1",
                "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled",
                "PATH": f"{pathlib.Path(sys.executable).parent}{os.pathsep}{env['PATH']}",
                "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)})
    return env


def run_block(block: Block, folder: pathlib.Path, env: dict, timeout: int = 1800) -> subprocess.CompletedProcess:
    script = folder / f".block_{block.line}.{'py' if block.language == 'python' else 'sh'}"
    script.write_text(block.code)
    command = [sys.executable, script.name] if block.language == "python" else ["bash", "-e", "-o", "pipefail",
                                                                                 script.name]
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


@pytest.mark.slow
@pytest.mark.parametrize("page", [str(p.relative_to(ROOT)) for p in PAGES])
def test_blocks_of_the_page_run(page, tmp_path):
    folder, env = _scratch_folder(tmp_path), _environment()
    for block in (b for b in ALL_BLOCKS if b.page == page and b.runs):
        result = run_block(block, folder, env)
        output = (result.stdout + result.stderr)[-4000:]
        assert result.returncode == 0, f"{block} exited with {result.returncode}:\n{block.code}\n---\n{output}"
