"""Options per component (trl_explore/driver/config.py): a method's options alone, as bases of a training config, and
read back by its component; checks at construction naming the option."""

import dataclasses

import pytest
from trl import GRPOConfig

from trl_explore import ASEConfig, ASEOptions, ExplorationConfig, OGERASEConfig, OGERConfig, OGEROptions
from trl_explore.driver.config import ComponentOptions, options_classes


def _args(**overrides):
    return dict(output_dir="out", bf16=False, report_to="none", **overrides)


def test_options_alone_are_checked_at_construction():
    assert OGEROptions().num_replacements == 1 and ASEOptions().num_vectors == 3
    with pytest.raises(ValueError, match="steering_alpha must be >= 0, got -1.*bank_control='reversed'"):
        ASEOptions(steering_alpha=-1.0)
    with pytest.raises(ValueError, match="replacement_rule='highest' is not a replacement rule; valid: "
                                         "lowest_divergence, random"):
        OGEROptions(replacement_rule="highest")
    with pytest.raises(TypeError, match="num_replacements must be an int"):
        OGEROptions(num_replacements=1.5)


def test_checks_against_the_training_config_run_when_the_config_is_built():
    with pytest.raises(ValueError, match=r"num_replacements must be in \[0, num_generations - 1\] = \[0, 3\]"):
        OGERConfig(**_args(num_generations=4, per_device_train_batch_size=4, num_replacements=4))
    with pytest.raises(ValueError, match=r"num_generations \(2\) must be at least num_vectors \+ 1 \(4\)"):
        ASEConfig(**_args(num_generations=2, per_device_train_batch_size=2))
    options = OGEROptions(num_replacements=4)  # fine alone; refused against a group of 4
    with pytest.raises(ValueError, match="a group needs at least one online completion"):
        options.apply(GRPOConfig(**_args(num_generations=4, per_device_train_batch_size=4)))


def test_a_config_is_grpo_plus_the_options_and_reads_them_back():
    config = OGERConfig("out", bf16=False, num_replacements=2, embedding_model="embedded")  # output_dir stays first
    assert isinstance(config, GRPOConfig) and config.output_dir == "out" and config.entropy_coef == 0.01
    options = OGEROptions.from_config(config)
    assert type(options) is OGEROptions and options.num_replacements == 2 and options.embedding_model == "embedded"
    assert OGEROptions.from_config(GRPOConfig(**_args())) == OGEROptions()  # another config: the defaults
    assert options_classes(OGERASEConfig) == [ASEOptions, OGEROptions]
    assert set(OGEROptions.option_names()) == {f.name for f in dataclasses.fields(OGEROptions)}
    assert not set(OGEROptions.option_names()) & set(ASEOptions.option_names())  # one name, one place
    assert not set(OGEROptions.option_names()) & {f.name for f in dataclasses.fields(GRPOConfig)}


def test_the_composed_config_validates_both_methods_and_their_combination():
    config = OGERASEConfig(**_args(num_generations=8, per_device_train_batch_size=8, num_vectors=3))
    assert config.num_replacements == 1 and config.num_vectors == 3 and config.entropy_coef == 0.01
    with pytest.raises(ValueError, match="include_offline_in_bank=True but num_replacements=0"):
        OGERASEConfig(**_args(num_generations=8, per_device_train_batch_size=8, num_replacements=0,
                              include_offline_in_bank=True))
    with pytest.raises(ValueError, match="grader_mode='lenient' is not a grader mode"):
        ExplorationConfig(**_args(grader_mode="lenient"))


def test_a_new_method_options_class_composes_without_a_config_subclass():
    @dataclasses.dataclass
    class NoisyOptions(ComponentOptions):
        noise: float = 0.1

        def validate(self):
            if self.noise < 0:
                raise ValueError(f"noise must be >= 0, got {self.noise}")

    @dataclasses.dataclass
    class NoisyOGERConfig(NoisyOptions, OGERConfig):
        pass

    config = NoisyOGERConfig(**_args(noise=0.5))
    assert NoisyOptions.from_config(config).noise == 0.5 and OGEROptions.from_config(config).num_replacements == 1
    with pytest.raises(ValueError, match="noise must be >= 0"):
        NoisyOGERConfig(**_args(noise=-1.0))
