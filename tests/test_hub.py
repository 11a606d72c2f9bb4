"""Hub model cards: base_model only for a Hub id; push_to_hub with the network calls patched out."""

import types

import pytest
import transformers.trainer
import yaml

from trl_explore.testing import make_tiny_causal_lm
from test_ase_trainer import _config as ase_config
from test_ase_trainer import _dataset as ase_dataset
from test_ase_trainer import parity_reward
from test_oger_trainer import _config as oger_config
from test_oger_trainer import _dataset as oger_dataset
from trl_explore import ASEGRPOTrainer, OGERTrainer
from trl_explore.hub import hub_base_model


@pytest.mark.parametrize(
    "name, expected",
    [("Qwen/Qwen2.5-Math-7B", "Qwen/Qwen2.5-Math-7B"), ("gpt2", "gpt2"), ("embedded", None), ("", None),
     (None, None), ("/data/my-model", None), ("./ckpt", None), ("~/models/x", None), ("a/b/c", None),
     ("C:\\models\\x", None)],
)  # fmt: skip
def test_hub_base_model(name, expected):
    assert hub_base_model(name) == expected


def test_existing_folder_is_never_a_hub_id(tmp_path, monkeypatch):
    (tmp_path / "org" / "model").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    assert hub_base_model("org/model") is None  # a local folder that looks like an id
    assert hub_base_model("org/other") == "org/other"


def _card(folder):
    text = (folder / "README.md").read_text()
    _, front, body = text.split("---", 2)
    return yaml.safe_load(front), body


def _oger(tmp_path, tokenizer, name_or_path):
    model = make_tiny_causal_lm(tokenizer)
    model.config._name_or_path = name_or_path
    return OGERTrainer(model, args=oger_config(tmp_path), train_dataset=oger_dataset(), processing_class=tokenizer)


def test_model_card_names_a_hub_base_model_and_no_local_one(tmp_path, smollm2_tokenizer):
    trainer = _oger(tmp_path / "hub", smollm2_tokenizer, "Qwen/Qwen2.5-Math-1.5B")
    trainer.create_model_card(model_name="oger-test", dataset_name="champ")
    meta, body = _card(tmp_path / "hub" / "out")
    assert meta["base_model"] == "Qwen/Qwen2.5-Math-1.5B"
    assert "[Qwen/Qwen2.5-Math-1.5B](https://huggingface.co/Qwen/Qwen2.5-Math-1.5B)" in body
    assert "datasets/champ" not in body  # the embedded CHAMP set is not a Hub dataset
    assert "ma2025oger" in body and "oger" in meta["tags"]
    assert trainer.model.config._name_or_path == "Qwen/Qwen2.5-Math-1.5B"  # restored after the card

    for local in (str(tmp_path), "./relative/ckpt"):  # an existing folder, a path that does not exist here
        trainer = _oger(tmp_path / "local", smollm2_tokenizer, local)
        trainer.create_model_card(model_name="oger-test")
        meta, body = _card(tmp_path / "local" / "out")
        assert "base_model" not in meta and "None" not in body and "a local model" in body


def test_push_to_hub_with_the_upload_patched(tmp_path, smollm2_tokenizer, monkeypatch):
    uploads = []

    class FakeApi:
        def create_repo(self, repo_id, **kwargs):
            return types.SimpleNamespace(repo_id=f"me/{repo_id.split('/')[-1]}")

        def upload_folder(self, repo_id, folder_path, **kwargs):
            uploads.append((repo_id, (tmp_path / "out" / "README.md").read_text(), sorted(
                p.name for p in (tmp_path / "out").iterdir())))
            return "https://huggingface.co/me/ase-test/commit/0"

    monkeypatch.setattr(transformers.trainer, "hf_api", lambda: FakeApi())
    model = make_tiny_causal_lm(smollm2_tokenizer)
    model.config._name_or_path = "HuggingFaceTB/SmolLM2-135M-Instruct"
    args = ase_config(tmp_path, max_steps=1, hub_model_id="ase-test")
    trainer = ASEGRPOTrainer(model, reward_funcs=[parity_reward], args=args, train_dataset=ase_dataset(),
                             processing_class=smollm2_tokenizer)
    trainer.train()
    trainer.push_to_hub(dataset_name="champ")
    (repo, card, files) = uploads[-1]
    assert repo == "me/ase-test"
    assert "base_model: HuggingFaceTB/SmolLM2-135M-Instruct" in card
    assert "Exploration via Activation-Space Steering" in card and "@misc{ase_grpo" in card  # the ASE citation
    assert {"model.safetensors", "config.json", "README.md", "steering_bank"} <= set(files)
