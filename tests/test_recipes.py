"""Every recipe in recipes/ loads through the example script's TrlParser, with every option a real field."""

import pathlib

import pytest
import yaml
from trl import ModelConfig, TrlParser

ROOT = pathlib.Path(__file__).resolve().parent.parent
RECIPES = sorted((ROOT / "recipes").glob("*.yaml"))


def _parse(recipe, load_script):
    from trl_explore import ASEConfig, OGERASEConfig, OGERConfig
    from trl_explore.data.training_data import DataArguments
    from trl_explore.evaluation.heldout import HeldoutEvalArguments
    from trl_explore.sft import SFTBaselineConfig

    name, config = ("train_oger_ase", OGERASEConfig) if recipe.name.startswith("oger_ase") else (
        ("train_oger", OGERConfig) if recipe.name.startswith("oger") else ("train_ase_grpo", ASEConfig))
    if recipe.name.startswith("sft"):
        name, config = "train_sft", SFTBaselineConfig
    if recipe.name.startswith("exgrpo"):
        from trl_explore import ExGRPOConfig

        name, config = "train_exgrpo", ExGRPOConfig
    if recipe.name.startswith("dynamic_sampling"):
        from trl_explore import DynamicSamplingConfig

        name, config = "train_dynamic_sampling", DynamicSamplingConfig
    script = load_script(f"examples/{name}.py")
    # the scripts' run_training parses these (DataArguments unless the script has its own ScriptArguments)
    dataclasses = (getattr(script, "ScriptArguments", DataArguments), HeldoutEvalArguments, config, ModelConfig)
    # bf16 and vLLM are checked against this machine (CPU, no vLLM) by the configs: switched off here only
    vllm = [] if config is SFTBaselineConfig else ["--use_vllm", "false"]  # SFT makes no rollouts
    return TrlParser(dataclasses).parse_args_and_config(args=["--config", str(recipe), "--bf16", "false", *vllm])


def test_there_are_six_recipes():
    assert {r.name for r in RECIPES} >= {
        "oger_smollm2_champ_cpu.yaml", "oger_qwen2.5_math_1.5b.yaml", "oger_qwen2.5_math_7b.yaml",
        "ase_grpo_smollm2_champ_cpu.yaml", "ase_grpo_qwen3_1.7b_base.yaml", "ase_grpo_qwen3_8b_base.yaml",
    }


@pytest.mark.parametrize("recipe", RECIPES, ids=lambda p: p.name)
def test_recipe_loads_and_every_option_is_a_field(recipe, load_script):
    values = yaml.safe_load(recipe.read_text())
    parsed = _parse(recipe, load_script)
    fields = {name for obj in parsed for name in vars(obj)}
    unknown = sorted(set(values) - fields)
    assert not unknown, f"{recipe.name}: options that are no field of the script's dataclasses: {unknown}"
    for key, value in values.items():
        if key in ("bf16", "use_vllm"):
            continue
        got = next(getattr(obj, key) for obj in parsed if hasattr(obj, key))
        got = got.value if hasattr(got, "value") else got  # enums (lr_scheduler_type, ...)
        if key == "report_to":  # TrainingArguments keeps a list; "none" is the empty one
            value = [] if value == "none" else [value]
        if isinstance(value, list) and got is not None:
            got = list(got)
        assert got == value or str(got) == str(value), (recipe.name, key, got, value)


@pytest.mark.parametrize("recipe", [r for r in RECIPES if "cpu" not in r.name and not r.name.startswith("sft")],
                         ids=lambda p: p.name)
def test_paper_recipes_use_vllm_and_name_their_install(recipe):
    values = yaml.safe_load(recipe.read_text())
    assert values["use_vllm"] is True and values["vllm_mode"] == "colocate"
    if recipe.name.startswith("oger"):
        assert values["loss_remove_clip"] is True  # LUFFY's and OGER's runs
    # the install that the recipe's header names gives what it uses: vLLM rollouts and TensorBoard logs
    assert values["report_to"] == "tensorboard" and '".[vllm,tensorboard]"' in recipe.read_text()


@pytest.mark.parametrize("recipe", [r for r in RECIPES if "cpu" in r.name], ids=lambda p: p.name)
def test_cpu_recipes_run_with_the_base_install(recipe):
    values = yaml.safe_load(recipe.read_text())
    assert values["report_to"] == "none" and not values.get("use_vllm", False)
    # weights only, once: no checkpoint copy of the model, no optimizer state (1 GB for SmolLM2) on disk
    assert values["save_strategy"] == "no" and values["save_only_model"] is True
