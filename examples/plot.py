"""Draw the papers' figures for one or more runs, overlaid.

    python examples/plot.py                                   # the main job -> outputs/oger-smollm2-ladder/plots/
    python examples/plot.py outputs/x outputs/eval/x          # a run and its evaluation -> outputs/plots/x/
    python examples/plot.py RUN_DIR [RUN_DIR ...] --labels OGER GRPO   # -> outputs/plots/OGER+GRPO/

A RUN_DIR is a training output folder (its `trainer_state.json`, or the latest checkpoint's) and/or an
evaluation folder of `examples/evaluate.py` (`summary.json`, `temperature_sweep.json`); a training folder and
its evaluation folder (`outputs/x`, `outputs/eval/x`) are one run, labelled by its name. Writes, when the data
exist: `training_dynamics.png` (every run on the metrics all methods log: GRPO, OGER, ASE-GRPO, both),
`training_dynamics_oger.png` (OGER Fig. 2 and 5: policy entropy, failed-response ratio, OGER
reward mean and max, ...), `training_dynamics_ase.png` (ASE Fig. 4-5: cluster shares, temporal and
inter-cluster alignment, answer disagreement, ...), `pass_at_k.png` (OGER Fig. 3, ASE Fig. 3) and
`temperature_sweep.png` (OGER Fig. 6).
"""

from __future__ import annotations

import pathlib
import sys
from dataclasses import dataclass, field

import yaml

from trl_explore.cli import run_script

# the main job is examples/train_oger.py on its default recipe; its output folder is that recipe's output_dir
MAIN_JOB_RECIPE = pathlib.Path(__file__).resolve().parent.parent / "recipes" / "oger_smollm2_ladder_cpu.yaml"
MAIN_JOB_OUTPUT = yaml.safe_load(MAIN_JOB_RECIPE.read_text())["output_dir"]


@dataclass
class PlotArguments:
    """Options of `examples/plot.py`; leading positional arguments are the run folders."""

    run_dirs: list[str] = field(
        default_factory=lambda: [MAIN_JOB_OUTPUT],
        metadata={"help": "Training and/or evaluation folders (also accepted as leading positional arguments)."},
    )
    labels: list[str] = field(default_factory=list, metadata={"help": "Legend label per run (default: folder names)."})
    output_dir: str | None = field(
        default=None,
        metadata={"help": "Where to write the PNGs (default: RUN_DIR/plots for one folder; outputs/plots/<label> "
                  "for a run's training and evaluation folders together; outputs/plots/<label>+<label>+... for "
                  "several runs)."},
    )
    smooth: int = field(default=1, metadata={"help": "Rolling-mean window over training steps (1: raw)."})


def main(args: PlotArguments) -> list:
    from pathlib import Path

    from trl_explore.evaluation.plots import default_plot_dir, plot_runs

    output_dir = Path(args.output_dir) if args.output_dir else default_plot_dir(args.run_dirs, args.labels or None)
    written = plot_runs(args.run_dirs, output_dir, labels=args.labels or None, smooth=args.smooth)
    for path in written:
        print(f"[plot] wrote {path}")
    return written


def positional_to_flags(argv: list[str]) -> list[str]:
    """`plot.py A B --x 1` -> `--run_dirs A B --x 1`."""
    runs = []
    while argv and not argv[0].startswith("-"):
        runs.append(argv.pop(0))
    return (["--run_dirs", *runs] if runs else []) + argv


if __name__ == "__main__":
    run_script(main, PlotArguments, "plot", positional_to_flags(sys.argv[1:]))  # user errors: one line (--debug)
