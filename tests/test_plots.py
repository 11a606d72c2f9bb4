"""Overlay plots of runs of different methods (GRPO, OGER, ASE-GRPO, both) from small fake ``trainer_state.json``
log histories: shared metrics, run-name labels, a training folder and its evaluation folder, empty panels that say
why, 0-1 axes for fractions, readable axes on constant values, and the teacher-length histogram's range."""

import json
import math
import pathlib

import pytest

from trl_explore.data.stats import plot_length_distribution
from trl_explore.evaluation import plots, runner


def _grpo(step: int, scale: float = 1.0) -> dict:
    """The keys TRL's GRPOTrainer logs every step (a subset), with made-up values."""
    return {"step": step, "loss": 0.01 * step, "reward": scale * 0.1 * step, "reward_std": 0.3,
            "entropy": 2.0 - 0.1 * step * scale, "completions/mean_length": 200.0 - 5 * step,
            "completions/clipped_ratio": 0.5, "frac_reward_zero_std": 0.25 * (step % 2), "step_time": 90.0}


def _oger(step: int) -> dict:
    return {**_grpo(step, 1.2), "oger/reward_mean": 0.01 * step, "oger/reward_max": 0.05 * step,
            "oger/failed_ratio": 1 - 0.1 * step, "oger/divergence_mean": 0.5, "oger/last_token_entropy_mean": 2.5,
            "oger/offline_fraction": 0.25}


def _ase(step: int, bank: bool = True) -> dict:
    entry = {**_grpo(step, 0.8), "ase/answer_disagreement": 0.4, "ase/route_0_accuracy": 0.0,
             "ase/route_1_accuracy": 0.0, "ase/route_2_accuracy": 0.0, "ase/is_weight_mean": 0.98,
             "ase/is_weight_clipped_frac": 0.01}  # fmt: skip
    if bank and step >= 2:  # the first bank update happens at step 2
        entry.update({"ase/num_pairs": 6.0, "ase/cluster_share_0": 0.5, "ase/cluster_share_1": 0.5,
                      "ase/temporal_alignment": 0.7, "ase/inter_cluster_alignment": -0.2, "ase/vector_norm": 3.1})
    return entry


def _run(folder: pathlib.Path, history: list[dict]) -> pathlib.Path:
    folder.mkdir(parents=True, exist_ok=True)
    summary = {"step": len(history), "train_runtime": 100.0, "train_loss": 0.02}
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": len(history),
                                                           "log_history": [*history, summary]}))
    return folder


@pytest.fixture
def make_runs(make_summary):
    """``make_runs(root, steps=4)``: four training runs of the four methods, an ASE run without any bank update, and
    one evaluation folder (``root/eval/oger-demo``, the evaluation of ``root/oger-demo``)."""
    return lambda root, steps=4: _make_runs(root, steps, make_summary)


def _make_runs(root: pathlib.Path, steps: int, make_summary) -> dict[str, pathlib.Path]:
    runs = {
        "grpo": _run(root / "baseline", [_grpo(s) for s in range(1, steps + 1)]),
        "oger": _run(root / "oger-demo", [_oger(s) for s in range(1, steps + 1)]),
        "ase": _run(root / "ase-demo", [_ase(s) for s in range(1, steps + 1)]),
        "both": _run(root / "oger-ase-demo", [{**_oger(s), **_ase(s), **_grpo(s, 1.1)} for s in range(1, steps + 1)]),
        "ase_no_bank": _run(root / "ase-1-step", [_ase(1, bank=False)]),
    }
    evaluation = root / "eval" / "oger-demo"
    evaluation.mkdir(parents=True)
    (evaluation / runner.SUMMARY_JSON).write_text(json.dumps(make_summary("oger-demo", {"aime2024": (0.0, 0.0)})))
    runs["eval"] = evaluation
    return runs


def _axes(fig) -> dict:
    return {ax.get_title().split(" (")[0]: ax for ax in fig.axes if ax.get_visible()}


def _note(ax) -> str:
    return " ".join(t.get_text() for t in ax.texts)


def test_runs_are_labelled_by_name_and_an_evaluation_folder_is_its_training_run(tmp_path, make_runs):
    runs = make_runs(tmp_path)
    dirs = [runs["oger"], runs["eval"], runs["grpo"]]
    assert [plots.folder_kind(d) for d in dirs] == ["training", "evaluation", "training"]
    assert plots.run_labels(dirs) == ["oger-demo", "oger-demo", "baseline"]  # not "(0)" / "(1)"
    twin = _run(tmp_path / "other" / "oger-demo", [_oger(1)])  # another training run of the same name
    assert plots.run_labels([runs["oger"], twin]) == [f"{tmp_path.name}/oger-demo", "other/oger-demo"]
    assert plots.run_labels(dirs, ["OGER", "OGER eval", "GRPO"]) == ["OGER", "OGER eval", "GRPO"]
    with pytest.raises(ValueError, match="2 labels for 3 runs"):
        plots.run_labels(dirs, ["a", "b"])
    assert plots.default_plot_dir(dirs) == pathlib.Path("outputs/plots/oger-demo+baseline")  # the pair counts once
    assert plots.folder_kind(tmp_path / "nothing-here") == "empty"


def test_an_exgrpo_run_is_named_exgrpo_not_grpo(tmp_path, monkeypatch):
    """An ExGRPO run's logs (``exgrpo/`` keys) name the method ExGRPO in its label and in the figure's title, and it
    is not drawn as a plain GRPO baseline beside the OGER runs."""
    exgrpo = _run(tmp_path / "replay", [{**_grpo(s), "exgrpo/replayed_fraction": 0.1 * s} for s in range(1, 4)])
    oger = _run(tmp_path / "oger-demo", [_oger(s) for s in range(1, 4)])
    assert plots.run_method(plots.load_log_history(exgrpo)) == "ExGRPO"
    drawn = []
    monkeypatch.setattr(plots, "plot_training_dynamics",
                        lambda frames, panels, path, title=None, smooth=1: drawn.append((path.name, title,
                                                                                         list(frames))))
    plots.plot_runs([exgrpo, oger], tmp_path / "out")
    assert drawn == [("training_dynamics.png", "Training dynamics: ExGRPO vs. OGER", ["replay (ExGRPO)", "oger-demo"]),
                     ("training_dynamics_oger.png", "OGER training dynamics", ["oger-demo"])]


def test_methods_are_overlaid_on_their_shared_metrics(tmp_path, make_runs):
    runs = make_runs(tmp_path / "runs")
    dirs = [runs[k] for k in ("grpo", "oger", "ase", "both", "eval")]
    written = plots.plot_runs(dirs, tmp_path / "out", labels=None)
    assert [p.name for p in written] == ["training_dynamics.png", "training_dynamics_oger.png",
                                         "training_dynamics_ase.png", "pass_at_k.png"]
    assert all(p.stat().st_size > 5_000 for p in written)
    assert [plots.run_method(plots.load_log_history(runs[k])) for k in ("grpo", "oger", "ase", "both")] == [
        "GRPO", "OGER", "ASE-GRPO", "OGER + ASE-GRPO"]

    frames = {plots._with_method(name, plots.run_method(frame)): frame for name, frame in
              ((d.name, plots.load_log_history(d)) for d in dirs[:4])}
    assert list(frames) == ["baseline (GRPO)", "oger-demo", "ase-demo", "oger-ase-demo"]  # the name says it, or added
    fig = plots.plot_training_dynamics(frames, plots.SHARED_PANELS)
    axes = _axes(fig)
    for title in ("Training reward", "Policy entropy", "Zero-variance groups", "Response length"):
        assert [line.get_label() for line in axes[title].get_lines()] == list(frames)  # one line per run
    assert "no eval_reward" in _note(axes["Evaluation reward"]) and "eval_strategy" in _note(axes["Evaluation reward"])
    assert not axes["Evaluation reward"].get_lines()
    assert axes["Zero-variance groups"].get_ylim() == pytest.approx((-0.03, 1.03))  # a fraction: 0 to 1

    # the OGER figure: OGER runs with the GRPO baseline; the ASE figure: ASE runs with it
    oger = {k: plots.load_log_history(runs[k]) for k in ("oger", "both", "grpo")}
    fig = plots.plot_training_dynamics(oger, plots.OGER_PANELS)
    axes = _axes(fig)
    assert len(axes["Failed-response ratio"].get_lines()) == 2 and len(axes["Policy entropy"].get_lines()) == 3


def test_empty_panels_say_why_and_bank_panels_stay(tmp_path, make_runs):
    runs = make_runs(tmp_path)
    no_bank = {"ase-1-step": plots.load_log_history(runs["ase_no_bank"])}
    fig = plots.plot_training_dynamics(no_bank, plots.ASE_PANELS, tmp_path / "ase_no_bank.png")
    axes = _axes(fig)
    assert list(axes) == [p.title for p in plots.ASE_PANELS]  # every panel drawn, the bank ones too
    for title in ("Cluster shares", "Vector geometry", "Steering vector norm"):
        assert not axes[title].get_lines(), title
        note = _note(axes[title])
        assert note.startswith("no ase/") and "in this run" in note and "bank updates only" in note, note
        assert "ase/skipped_updates" in note
    assert "no ase/cluster_share_*" in _note(axes["Cluster shares"])
    assert "no ase/num_pairs, ase/skipped_updates" in _note(axes["Contrast pairs"])
    accuracy = axes["Per-route accuracy"]
    assert len(accuracy.get_lines()) == 3 and accuracy.get_ylim() == pytest.approx((-0.03, 1.03))  # all 0: still 0-1
    assert list(accuracy.get_yticks()) == [0.0, 0.25, 0.5, 0.75, 1.0]

    with_bank = {"ase-demo": plots.load_log_history(runs["ase"])}
    axes = _axes(plots.plot_training_dynamics(with_bank, plots.ASE_PANELS))
    assert len(axes["Cluster shares"].get_lines()) == 2 and len(axes["Contrast pairs"].get_lines()) == 1
    assert not axes["Cluster shares"].texts


def test_constant_series_get_a_readable_axis():
    assert plots.readable_ylim([2.237, 2.237]) == pytest.approx((2.237 - 0.5, 2.237 + 0.5))
    assert plots.readable_ylim([0.0]) == (-0.5, 0.5)
    assert plots.readable_ylim([200.0, 200.0]) == (180.0, 220.0)  # 10% of the value when that is wider
    assert plots.readable_ylim([0.0, 1.0]) is None  # varying data: Matplotlib's own limits
    assert plots.readable_ylim([0.0, 0.0], plots.FRACTION) == pytest.approx((-0.03, 1.03))


def test_length_histogram_range_comes_from_the_data(tmp_path):
    lengths = {"GPT-4": [120, 300, 450, 800, 1500], "PaLM 2 Medium": [90, 260, 1900]}
    import matplotlib.image

    path = plot_length_distribution(lengths, max_length=8192, path=tmp_path / "lengths.png")
    assert matplotlib.image.imread(path).shape[1] > 500
    from trl_explore.data.stats import length_histogram_range

    upper, note = length_histogram_range([n for v in lengths.values() for n in v], max_length=8192)
    assert upper == 1900 and "max_length = 8192 lies beyond the longest trajectory (1900 tokens)" in note
    upper, note = length_histogram_range([10] * 99 + [8000], max_length=8192)  # one far outlier: the bulk shown
    assert upper < 100 and "1 trajectory longer than" in note and "up to 8000" in note
    upper, note = length_histogram_range([100, 200, 300], max_length=255)  # the cut inside the data: drawn
    assert upper == 300 and note == ""
    with pytest.raises(ValueError, match="no lengths"):
        length_histogram_range([], max_length=10)
    assert math.isfinite(upper)
