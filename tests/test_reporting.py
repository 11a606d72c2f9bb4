"""The readable console: one compact line per logged step (the full dict still in trainer_state.json) and the
filter of known third-party warnings."""

import io
import types
import warnings

import pytest
from transformers.trainer_callback import PrinterCallback, ProgressCallback
from trl import GRPOConfig

from trl_explore import ExplorationTrainer, reporting
from trl_explore.reporting import CompactLogCallback, compact_log_line, format_number, use_compact_logs
from trl_explore.testing import doubling_dataset, make_tiny_causal_lm, parity_reward

# a training log as TRL 1.16 hands it to the callbacks (from `accelerate launch examples/train_oger.py --max_steps 1`)
LOGS = {"loss": 0.07961, "grad_norm": 0.7803, "learning_rate": 1e-05, "num_tokens": 2202.0,
        "completions/mean_length": 203.25, "completions/clipped_ratio": 0.625, "oger/divergence_mean": 0.50817,
        "oger/failed_ratio": 1.0, "oger/reward_mean": 0.0, "reward": 0.25, "reward_std": 0.46291,
        "entropy": 2.23712, "ase/route_0_accuracy": 0.5, "ase/route_1_accuracy": 0.25, "step_time": 102.94,
        "epoch": 0.03448}  # fmt: skip


def test_format_number_keeps_four_significant_digits():
    assert [format_number(v) for v in (0.0796123, 203.25, 1e-05, 2202.0, 3, 0.0, float("nan"), True, "x")] == [
        "0.07961", "203.2", "1e-05", "2202", "3", "0", "nan", "True", "x"]


def test_compact_line_of_a_training_step_an_evaluation_and_the_summary():
    line = compact_log_line(LOGS, 1, 30, ("oger/reward_mean", "oger/failed_ratio", "ase/route_*_accuracy", "nope"))
    assert line == ("step 1/30 | loss 0.07961 | reward 0.25 ± 0.4629 | entropy 2.237 | len 203.2 | 102.9 s/step | "
                    "oger/reward_mean 0 | oger/failed_ratio 1 | ase/route_0_accuracy 0.5 | ase/route_1_accuracy 0.25")
    assert len(line) < 200 < len(str(LOGS))
    evaluation = {"eval_reward": 0.5, "eval_reward_std": 0.1, "eval_loss": 0.2, "eval_oger/failed_ratio": 0.5}
    assert compact_log_line(evaluation, 4, 30, ("oger/failed_ratio",)) == (
        "eval step 4/30 | loss 0.2 | reward 0.5 ± 0.1 | eval_oger/failed_ratio 0.5")
    assert compact_log_line({"train_runtime": 103.71, "train_loss": 0.0796, "epoch": 0.03}, 1, 1) == (
        "done: 1 step in 103.7 s | mean loss 0.0796")
    assert compact_log_line({}, 1, 1) is None


def _trainer(tmp_path, tokenizer, **overrides):
    args = GRPOConfig(output_dir=str(tmp_path / "out"), per_device_train_batch_size=4, num_generations=4,
                      max_completion_length=8, max_steps=2, learning_rate=1e-3, logging_steps=1, report_to="none",
                      use_cpu=True, bf16=False, save_strategy="no", **overrides)
    return ExplorationTrainer(make_tiny_causal_lm(tokenizer), [parity_reward], args=args,
                              train_dataset=doubling_dataset(4), processing_class=tokenizer)


@pytest.mark.slow
@pytest.mark.parametrize("disable_tqdm", [False, True])
def test_compact_logs_replace_the_dict_print_and_keep_the_full_logs(tmp_path, smollm2_tokenizer, capsys,
                                                                    disable_tqdm):
    trainer = _trainer(tmp_path, smollm2_tokenizer, disable_tqdm=disable_tqdm)
    printer = ProgressCallback if not disable_tqdm else PrinterCallback
    assert any(type(c) is printer for c in trainer.callback_handler.callbacks)
    callback = use_compact_logs(trainer, ("rewards/parity_reward/mean",))
    use_compact_logs(trainer, ("rewards/parity_reward/mean",))  # twice: still one printer
    printers = [c for c in trainer.callback_handler.callbacks if isinstance(c, (ProgressCallback, PrinterCallback))]
    assert len(printers) == 1 and isinstance(printers[0], CompactLogCallback)
    assert callback.progress_bar is not disable_tqdm
    capsys.readouterr()
    trainer.train()
    out = capsys.readouterr().out
    lines = [line for line in out.splitlines() if line.startswith(("step ", "done:"))]
    assert [line.split(" | ")[0] for line in lines[:2]] == ["step 1/2", "step 2/2"]
    assert len(lines) == 3 and lines[2].startswith("done: 2 steps in ") and " | mean loss " in lines[2]
    assert all("rewards/parity_reward/mean" in line and "reward " in line for line in lines[:2])
    assert "{'loss'" not in out and "'grad_norm'" not in out  # no dict printed
    history = trainer.state.log_history  # what report_to and trainer_state.json get: every key, untouched
    assert {"loss", "grad_norm", "learning_rate", "reward", "reward_std", "entropy", "completions/max_length",
            "rewards/parity_reward/mean", "step"} <= set(history[0])
    assert "train_runtime" in history[-1]


class _Stream(io.StringIO):
    def __init__(self, tty: bool):
        super().__init__()
        self.tty = tty

    def isatty(self):
        return self.tty


@pytest.mark.parametrize("tty", [False, True])
def test_no_evaluation_bar_nests_under_the_training_bar_in_a_log(tty):
    """--eval_strategy steps: in a log file (no terminal) the evaluation opens no second bar under the training bar,
    whose cursor-up codes (ESC[A) would stay in the log; in a terminal Transformers' nested bar is kept."""
    from tqdm import tqdm

    from trl_explore.reporting import nesting_garbles, open_training_bar

    state = types.SimpleNamespace(is_world_process_zero=True)
    callback = CompactLogCallback()
    trainer = types.SimpleNamespace(callback_handler=types.SimpleNamespace(callbacks=[callback]))
    assert open_training_bar(trainer) is None and not nesting_garbles(None)
    callback.training_bar = tqdm(total=2, file=_Stream(tty))
    try:
        assert open_training_bar(trainer) is callback.training_bar
        assert nesting_garbles(callback.training_bar) is not tty
        callback.on_prediction_step(None, state, None, eval_dataloader=[1, 2])
        assert (callback.prediction_bar is not None) is tty
        callback.on_evaluate(None, state, None)
        assert callback.prediction_bar is None
    finally:
        callback.training_bar.close()


def test_known_warnings_are_filtered_by_message_only(monkeypatch):
    monkeypatch.setattr(reporting, "_FILTERS_INSTALLED", False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reporting.filter_known_warnings()
        reporting.filter_known_warnings()  # once: the filter list does not grow
        installed = [f for f in warnings.filters if f[0] == "ignore" and f[1] is not None]
        for text, category in [
            ("`gradient_checkpointing` is deprecated and will be removed in v6. Use `activation_checkpointing` "
             "instead.", FutureWarning),
            ("`is_gradient_checkpointing` is deprecated and will be removed in v6. Use ...", FutureWarning),
            ("`gradient_checkpointing_disable` is deprecated and will be removed in v6. Use ...", FutureWarning),
            ("`gradient_checkpointing_enable` is deprecated and will be removed in v6. Use ...", FutureWarning),
            ("'pin_memory' argument is set as true but no accelerator is found, then device pinned memory won't "
             "be used.", UserWarning),
            ("`max_length` is deprecated and will be removed in v6", FutureWarning),  # another: still shown
            ("'pin_memory' argument is set as true but no accelerator is found", FutureWarning),  # other category
        ]:
            warnings.warn(text, category, stacklevel=1)
    shown = [str(w.message) for w in caught]
    assert shown == ["`max_length` is deprecated and will be removed in v6",
                     "'pin_memory' argument is set as true but no accelerator is found"]
    assert len([f for f in installed if f[1].pattern in {m for _, m in reporting.KNOWN_WARNINGS}]) == 2


@pytest.mark.parametrize("steps, expected", [(1, "1 step in"), (2, "2 steps in"), (0, "0 steps in")])
def test_finish_run_counts_steps_in_words(steps, expected, tmp_path, capsys):
    """The summary line of ``finish_run`` ("[tag] 1 step in 3.0 s; model saved to ...") on a stand-in trainer."""
    import types

    calls = []
    trainer = types.SimpleNamespace(
        save_model=lambda out: calls.append("save_model"), save_state=lambda: calls.append("save_state"),
        create_model_card=lambda **kwargs: calls.append("card"), args=types.SimpleNamespace(push_to_hub=False),
        accelerator=types.SimpleNamespace(is_main_process=True),
        state=types.SimpleNamespace(global_step=steps, log_history=[{"loss": 0.5, "step": steps}]),
    )
    reporting.finish_run(trainer, str(tmp_path / "run"), None, "demo", ("loss",), 3.0)
    first = capsys.readouterr().out.splitlines()[0]
    assert first == f"[demo] {expected} 3.0 s; model saved to {tmp_path / 'run'}"
    assert calls == ["save_model", "save_state", "card"]
    if steps == 1:
        assert compact_log_line({"train_runtime": 3.0, "train_loss": 0.5}, 1, 1).startswith("done: 1 step in 3 s")
