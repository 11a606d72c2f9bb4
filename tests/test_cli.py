"""The example scripts' command line (trl_explore/cli.py): method options first, under their own headings."""

import dataclasses

from trl import ModelConfig

from trl_explore import OGERASEConfig, OGERConfig
from trl_explore.cli import make_parser, with_default_recipe


@dataclasses.dataclass
class Script:
    section = "Script options"
    dataset_name: str = dataclasses.field(default="ladder", metadata={"help": "Which data."})


def _headings(parser) -> list[str]:
    return [line for line in parser.format_help().splitlines() if line and not line.startswith(" ")]


def test_help_lists_the_script_then_each_method_then_the_rest():
    headings = _headings(make_parser((Script, OGERASEConfig, ModelConfig), sections=(Script,)))
    assert headings[1:] == ["Script options:", "OGER options (trl_explore.OGEROptions):",
                            "ASE-GRPO options (trl_explore.ASEOptions):",
                            "Shared options (trl_explore.ExplorationConfig):",
                            "TRL GRPOConfig, Transformers TrainingArguments and other options:"]
    assert headings[0].startswith("usage:") and "[--config RECIPE.yaml]" in headings[0]


def test_regrouping_changes_no_parsed_value():
    parser = make_parser((Script, OGERConfig, ModelConfig), sections=(Script,))
    script, config, model = parser.parse_args_into_dataclasses(
        ["--output_dir", "o", "--bf16", "false", "--num_replacements", "2", "--learning_rate", "3e-5",
         "--dataset_name", "champ", "--model_name_or_path", "embedded"])
    assert (script.dataset_name, config.num_replacements, config.learning_rate) == ("champ", 2, 3e-5)
    assert model.model_name_or_path == "embedded"


def test_the_default_recipe_applies_only_without_a_config():
    assert with_default_recipe(["--lr", "1"], "r.yaml") == ["--config", "r.yaml", "--lr", "1"]
    assert with_default_recipe(["--config=x.yaml"], "r.yaml") == ["--config=x.yaml"]
    assert with_default_recipe(["--config", "x.yaml"], "r.yaml") == ["--config", "x.yaml"]


def test_the_scripts_help_formats_with_every_option_group():
    """`--help` of the training scripts (data, held-out evaluation, each preset's config, ModelConfig): argparse
    formats every help string (a bare percent sign in one made `--help` crash)."""
    from trl_explore import ASEConfig
    from trl_explore.data.training_data import DataArguments
    from trl_explore.evaluation.heldout import HeldoutEvalArguments

    for config in (OGERConfig, ASEConfig, OGERASEConfig):
        text = make_parser((DataArguments, HeldoutEvalArguments, config, ModelConfig),
                           sections=(DataArguments, HeldoutEvalArguments)).format_help()
        assert "--eval_heldout" in text and "--dataset_name" in text and "--learning_rate" in text
