"""The CPU precision tier (trl_explore.precision): measurement -> dtype, the probe's cache, the override, the float32
fallback, the autocast on the rollout and held-out paths, and exact resumption under bfloat16."""

import contextlib
import types

import pytest
import torch
from datasets import Dataset

import trl_explore.precision as precision
from trl_explore import ASEConfig, ASEGRPOTrainer
from trl_explore.driver import ExplorationTrainer
from trl_explore.driver.config import ExplorationConfig
from trl_explore.evaluation import heldout, heldout_evaluator
from trl_explore.precision import (
    PROBE_SHAPES,
    PrecisionProbe,
    apply_cpu_precision,
    bf16_flags,
    cpu_bf16_active,
    cpu_compute_dtype,
    cpu_flags,
    generation_autocast,
    measure_precision,
    precision_line,
    probe_precision,
)
from trl_explore.testing import doubling_dataset, make_tiny_causal_lm, parity_reward, tiny_training_args

XEON = "processor\t: 0\nflags\t\t: fpu sse avx2 avx512f avx512_bf16 amx_tile\nbogomips\t: 4000\n"
ARM = "processor\t: 0\nFeatures\t: fp asimd bf16 sve\n"


def test_cpu_flags_reads_x86_and_arm_lines_and_nothing_else():
    assert cpu_flags(XEON) == {"fpu", "sse", "avx2", "avx512f", "avx512_bf16", "amx_tile"}
    assert cpu_flags(ARM) == {"fp", "asimd", "bf16", "sve"}
    assert cpu_flags("model name\t: Some CPU with flags in its name\n") == frozenset()
    assert bf16_flags(cpu_flags(XEON)) == ("avx512_bf16",)  # named in the start line, deciding nothing
    assert bf16_flags(["AMX_BF16", "avx512_bf16"]) == ("amx_bf16", "avx512_bf16")
    assert bf16_flags(cpu_flags(ARM)) == ()


def _probe(float32_ms, bfloat16_ms, threads=2, cached=False):
    return PrecisionProbe(tuple(float32_ms), tuple(bfloat16_ms), threads, "Test CPU", torch.__version__, cached)


def _never():
    raise AssertionError("only cpu_precision='auto' measures")


# (float32 ms, bfloat16 ms) per probe shape; speed-ups worked out by hand
@pytest.mark.parametrize("float32_ms, bfloat16_ms, expected", [
    ((31.0, 75.0), (11.0, 30.0), torch.bfloat16),  # 2.82x and 2.5x (a Zen 4 EPYC's figures): geometric mean 2.65
    ((27.5, 60.0), (5.0, 20.0), torch.bfloat16),  # 5.5x and 3.0x (an AMX Xeon)
    ((33.5, 60.0), (50.6, 43.0), torch.float32),  # 0.66x and 1.4x (a Xeon with avx512_bf16, no AMX): one slower
    ((26.0, 26.0), (20.0, 20.0), torch.bfloat16),  # 1.3x on both: just over the 1.25 margin
    ((24.0, 24.0), (20.0, 20.0), torch.float32),  # 1.2x: inside the margin
    ((40.0, 20.0), (10.0, 21.0), torch.float32),  # 4x and 0.95x: mean 1.95 but one shape slower
])
def test_auto_follows_the_measurement(float32_ms, bfloat16_ms, expected):
    probe = _probe(float32_ms, bfloat16_ms)
    assert cpu_compute_dtype("auto", lambda: probe) == expected


def test_a_slower_bfloat16_reads_as_how_many_times_slower():
    # found by a newcomer on a CPU that emulates bfloat16: "bfloat16 measured 0.0x as fast as float32"
    probe = _probe((24.0, 72.0), (952.0, 3602.0))
    assert probe.summary() == ("bfloat16 measured 45x slower than float32 (a training forward's MLP matmul 40x "
                               "slower, a decoding step's LM head 50x slower; 2 threads)")
    assert _probe((33.5, 60.0), (50.6, 43.0)).summary().startswith(  # the geometric mean 0.96: about as fast
        "bfloat16 measured 1.0x as fast as float32 (a training forward's MLP matmul 1.5x slower, a decoding step's "
        "LM head 1.4x;")


def test_the_probe_summary_and_speedups_by_hand():
    probe = _probe((31.0, 75.0), (11.0, 30.0))
    assert probe.speedups == pytest.approx((31 / 11, 2.5))
    assert probe.speedup == pytest.approx((31 / 11 * 2.5) ** 0.5)
    assert probe.summary() == ("bfloat16 measured 2.7x as fast as float32 (a training forward's MLP matmul 2.8x, "
                               "a decoding step's LM head 2.5x; 2 threads)")
    assert _probe((1.0, 1.0), (1.0, 1.0), threads=1, cached=True).summary().endswith("(a training forward's MLP "
                                                                                      "matmul 1.0x, a decoding "
                                                                                      "step's LM head 1.0x; 1 thread, "
                                                                                      "cached)")


def test_auto_keeps_float32_where_bfloat16_cannot_be_measured():
    def unmeasurable():
        raise RuntimeError("no bfloat16 matmul")

    assert cpu_compute_dtype("auto", unmeasurable) == torch.float32


def test_the_probe_measures_once_per_cpu_torch_and_thread_count(tmp_path, monkeypatch):
    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path))
    calls = []
    monkeypatch.setattr(precision, "measure_precision",
                        lambda: calls.append(1) or _probe((30.0, 60.0), (10.0, 30.0), torch.get_num_threads()))
    first = probe_precision()
    again = probe_precision()
    assert len(calls) == 1 and not first.cached and again.cached
    assert (again.float32_ms, again.bfloat16_ms) == ((30.0, 60.0), (10.0, 30.0))
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads + 1)  # another thread count is another reading
        assert not probe_precision().cached and len(calls) == 2
    finally:
        torch.set_num_threads(threads)
    assert probe_precision(cache=False) and len(calls) == 3  # cache=False always measures
    (tmp_path / "cpu_precision.json").write_text("{torn")
    assert not probe_precision().cached and len(calls) == 4  # a torn cache file is measured again and rewritten
    # one model name, other bfloat16 flags (a VM shows "AMD EPYC" for Zen 3 and Zen 4): another reading
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"avx512_bf16"}))
    assert not probe_precision().cached and len(calls) == 5
    monkeypatch.setattr(precision, "cpu_flags", lambda: frozenset({"amx_bf16", "avx512_bf16"}))
    assert not probe_precision().cached and len(calls) == 6
    assert probe_precision().cached and len(calls) == 6


def test_a_slow_product_is_timed_within_the_budget(monkeypatch):
    clock = iter(range(0, 10_000, 2))  # every perf_counter call 2 s later: the warm-up alone overruns a 1 s budget
    monkeypatch.setattr(precision.time, "perf_counter", lambda: next(clock))
    assert precision._best_matmul_ms(2, 2, 2, torch.float32, repeats=5, budget_s=1.0) == 2000
    ticks = iter([0.0, 0.1] + [x / 10 for x in range(10, 40)])  # warm-up 0.1 s, then every product 0.1 s
    monkeypatch.setattr(precision.time, "perf_counter", lambda: next(ticks))
    assert precision._best_matmul_ms(2, 2, 2, torch.float32, repeats=50, budget_s=0.25) == pytest.approx(100)
    assert next(ticks) == pytest.approx(1.6)  # 3 repeats (0.3 s > 0.25 s), 6 clock reads after the warm-up's 2


def test_a_real_measurement_times_every_shape_in_both_precisions():
    probe = measure_precision(repeats=1)
    assert len(probe.float32_ms) == len(probe.bfloat16_ms) == len(PROBE_SHAPES) == 2
    assert all(ms > 0 for ms in probe.float32_ms + probe.bfloat16_ms)
    assert probe.threads == torch.get_num_threads() and probe.torch_version == torch.__version__


def test_forced_values_and_an_explicit_bf16():
    assert cpu_compute_dtype("bfloat16", _never) == torch.bfloat16  # forced, whatever the CPU measures
    assert cpu_compute_dtype("float32", _never) == torch.float32
    assert cpu_compute_dtype("auto", _never, bf16=True) == torch.bfloat16  # an explicit bf16 wins over auto
    assert cpu_compute_dtype("auto", _never, bf16=False) == torch.float32
    assert cpu_compute_dtype("bfloat16", _never, bf16=True) == torch.bfloat16
    assert cpu_compute_dtype("float32", _never, bf16=False) == torch.float32


@pytest.mark.parametrize("option, bf16, fp16, match", [
    ("float32", True, False, r"bf16=True contradicts cpu_precision='float32'"),
    ("bfloat16", False, False, r"bf16=False contradicts cpu_precision='bfloat16'"),
    ("auto", None, True, r"fp16=True on a CPU"),
    ("half", None, False, r"cpu_precision='half': use one of \['auto', 'bfloat16', 'float32'\]"),
])
def test_contradictions_are_refused_naming_the_fields(option, bf16, fp16, match):
    with pytest.raises(ValueError, match=match):
        cpu_compute_dtype(option, _never, bf16=bf16, fp16=fp16)


def _config(tmp_path, **kwargs):
    return ExplorationConfig(output_dir=str(tmp_path), report_to="none", **kwargs)


def test_config_sets_use_cpu_and_bf16_from_the_measurement(tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "probe_precision", lambda: _probe((31.0, 75.0), (11.0, 30.0)))
    args = _config(tmp_path)
    assert (args.use_cpu, args.bf16, args.mixed_precision) == (True, True, "bf16")
    monkeypatch.setattr(precision, "probe_precision", lambda: _probe((33.5, 60.0), (50.6, 43.0)))
    args = _config(tmp_path)
    assert (args.use_cpu, args.bf16, args.mixed_precision) == (True, False, "no")  # the float32 fallback
    args = _config(tmp_path, cpu_precision="bfloat16")
    assert (args.bf16, args.mixed_precision) == (True, "bf16")
    assert _config(tmp_path, bf16=False).bf16 is False  # a recipe's explicit bf16: false stays float32
    with pytest.raises(ValueError, match="bf16=True contradicts cpu_precision='float32'"):
        _config(tmp_path, bf16=True, cpu_precision="float32")


def test_on_a_gpu_nothing_is_changed(monkeypatch):
    monkeypatch.setattr(precision, "runs_on_cpu", lambda use_cpu: False)
    for bf16, fp16 in ((None, False), (False, True), (True, False)):
        args = types.SimpleNamespace(cpu_precision="float32", use_cpu=False, bf16=bf16, fp16=fp16)
        assert apply_cpu_precision(args) is None
        assert (args.use_cpu, args.bf16, args.fp16) == (False, bf16, fp16)  # TRL's meaning, untouched
    gpu = torch.device("cuda")
    args = types.SimpleNamespace(bf16=True, fp16=False)
    assert not cpu_bf16_active(args, gpu)
    assert isinstance(generation_autocast(args, gpu), contextlib.nullcontext)  # TRL's own generate, as it was
    assert precision_line(args, gpu) == "precision: bfloat16 on cuda (bf16=True, fp16=False)"


def test_the_precision_line_says_what_and_why():
    cpu = torch.device("cpu")
    on = types.SimpleNamespace(bf16=True, fp16=False, cpu_precision="auto")
    assert precision_line(on, cpu, flags={"avx512_bf16", "avx2"}, probe=_probe((31.0, 75.0), (11.0, 30.0))) == (
        "precision: bfloat16 mixed on the CPU (float32 weights and optimizer; bfloat16 autocast for the loss, the "
        "rollouts and the held-out evaluation): cpu_precision='auto', bfloat16 measured 2.7x as fast as float32 (a "
        "training forward's MLP matmul 2.8x, a decoding step's LM head 2.5x; 2 threads); CPU flag avx512_bf16")
    off = types.SimpleNamespace(bf16=False, fp16=False, cpu_precision="auto")
    assert precision_line(off, cpu, flags=set(), probe=_probe((33.5, 60.0), (50.6, 43.0), cached=True)) == (
        "precision: float32 on the CPU: cpu_precision='auto', bfloat16 measured 1.0x as fast as float32 (a training "
        "forward's MLP matmul 1.5x slower, a decoding step's LM head 1.4x; 2 threads, cached); no bfloat16 CPU flag")
    forced = types.SimpleNamespace(bf16=True, fp16=False, cpu_precision="bfloat16")
    assert precision_line(forced, cpu, flags={"amx_bf16"}).endswith(": cpu_precision='bfloat16'; CPU flag amx_bf16")


class _Recorder:
    """Records, inside each ``generate`` call of a model, the autocast state and a matmul's output dtype."""

    def __init__(self, model):
        self.calls, self.matmul_dtypes, self._inside = [], set(), False
        generate = model.generate

        def recording_generate(*args, **kwargs):
            self.calls.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
            self._inside = True
            try:
                return generate(*args, **kwargs)
            finally:
                self._inside = False

        model.generate = recording_generate
        model.model.layers[0].mlp.down_proj.register_forward_hook(self._hook)

    def _hook(self, module, args, output):
        if self._inside:
            self.matmul_dtypes.add(output.dtype)


@pytest.mark.parametrize("option, autocast, dtype", [("bfloat16", True, torch.bfloat16),
                                                     ("float32", False, torch.float32)])
def test_the_rollouts_run_under_the_tiers_autocast(tmp_path, smollm2_tokenizer, option, autocast, dtype):
    model = make_tiny_causal_lm(smollm2_tokenizer)
    args = ExplorationConfig(**{**tiny_training_args(tmp_path, max_steps=1, max_completion_length=4),
                                "bf16": None, "cpu_precision": option})
    trainer = ExplorationTrainer(model, reward_funcs=parity_reward, args=args, train_dataset=doubling_dataset(2),
                                 processing_class=smollm2_tokenizer)
    assert trainer.precision_note.startswith(f"precision: {'bfloat16 mixed' if autocast else 'float32'} on the CPU")
    recorder = _Recorder(model)
    trainer.train()
    assert len(recorder.calls) == 1
    assert recorder.calls[0][0] is autocast and (not autocast or recorder.calls[0][1] == torch.bfloat16)
    assert recorder.matmul_dtypes == {dtype}
    assert all(p.dtype == torch.float32 for p in model.parameters())  # master weights stay float32


@pytest.mark.parametrize("bf16", [True, False])
def test_the_heldout_evaluation_runs_under_the_tiers_autocast(tmp_path, monkeypatch, bf16):
    seen = []

    def fake_evaluate(model, tokenizer, **settings):
        seen.append((torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")))
        return "result"

    monkeypatch.setattr(heldout_evaluator, "evaluate_heldout", fake_evaluate)
    accelerator = types.SimpleNamespace(device=torch.device("cpu"), is_main_process=True, unwrap_model=lambda m: m,
                                        wait_for_everyone=lambda: None, state=types.SimpleNamespace())
    trainer = types.SimpleNamespace(args=types.SimpleNamespace(bf16=bf16, fp16=False), accelerator=accelerator,
                                    model=None, processing_class=None, max_completion_length=8)
    options = heldout.HeldoutEvalArguments(eval_heldout=True, eval_problems=4, eval_cache=False)
    assert heldout_evaluator.HeldoutEvaluator(trainer, options, levels=["one_digit"])("before") == "result"
    # one evaluation per prompt format (training and neutral), each under the tier's autocast
    assert len(seen) == 2 and all(s[0] is bf16 and (not bf16 or s[1] == torch.bfloat16) for s in seen)


def _ase_trainer(output_dir, tokenizer, **overrides):
    args = ASEConfig(**{**dict(
        output_dir=str(output_dir), per_device_train_batch_size=6, num_generations=6, steps_per_generation=2,
        max_completion_length=8, max_steps=4, learning_rate=1e-3, logging_steps=1, report_to="none",
        save_strategy="no", use_cpu=True, cpu_precision="bfloat16", seed=0, log_completions=False, num_vectors=2,
        pca_dim=4, kmeans_n_init=2, steering_alpha=4.0, min_pairs_per_cluster=1), **overrides})
    assert args.bf16 and args.mixed_precision == "bf16"
    data = Dataset.from_list([{"prompt": [{"role": "user", "content": f"What is {i} + {i}?"}], "answer": str(2 * i),
                               "problem_id": f"p{i}"} for i in range(2)])
    return ASEGRPOTrainer(make_tiny_causal_lm(tokenizer), reward_funcs=[parity_reward], args=args, train_dataset=data,
                          processing_class=tokenizer)


@pytest.mark.slow
def test_resume_is_exact_under_bfloat16(tmp_path, smollm2_tokenizer):
    # ASE-GRPO: steered rollouts under autocast, behaviour log-probs in the buffered batch, a bank update per
    # generation; checkpoint 1 lies inside a generation, 3 inside the next epoch's
    full = _ase_trainer(tmp_path / "full", smollm2_tokenizer, save_strategy="steps", save_steps=1)
    full.train()
    losses = {e["step"]: e["loss"] for e in full.state.log_history if "loss" in e}
    assert sorted(losses) == [1, 2, 3, 4] and any(v != 0 for v in losses.values())
    weights = {name: p.detach().clone() for name, p in full.model.named_parameters()}
    for checkpoint in (1, 3):
        resumed = _ase_trainer(tmp_path / f"resumed_{checkpoint}", smollm2_tokenizer)
        resumed.train(resume_from_checkpoint=str(tmp_path / "full" / f"checkpoint-{checkpoint}"))
        assert {e["step"]: e["loss"] for e in resumed.state.log_history if "loss" in e} == losses
        diff = max((p.detach() - weights[name]).abs().max().item() for name, p in resumed.model.named_parameters())
        assert diff == 0.0, (checkpoint, diff)
        bank, resumed_bank = full.ase.bank.state_dict(), resumed.ase.bank.state_dict()
        assert all(torch.equal(v, resumed_bank[k]) if isinstance(v, torch.Tensor) else v == resumed_bank[k]
                   for k, v in bank.items())
