"""trl_explore.data.loading.load_split: a name that is no folder fails naming the path it looked for, before or
instead of a Hub request that cannot succeed."""

import os

import pytest
from datasets import Dataset, DatasetDict

from trl_explore.data.loading import load_split, looks_like_a_path


@pytest.mark.parametrize("name, expected", [
    ("./data/set", True), ("../set", True), ("/abs/set", True), ("~/set", True), ("~", True), ("a/b/c", True),
    ("gsm8k", False), ("openai/gsm8k", False), ("champ", False),
])
def test_looks_like_a_path(name, expected):
    assert looks_like_a_path(name) is expected


@pytest.mark.parametrize("name", ["./no/such/set", "~/no-such-trl-explore-set", "data/no/such/set"])
def test_a_missing_local_folder_names_the_path_and_asks_no_hub(name, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: pytest.fail("asked the Hub"))
    with pytest.raises(FileNotFoundError, match="there is no folder") as err:
        load_split(name)
    assert os.path.abspath(os.path.expanduser(name)) in str(err.value) and repr(name) in str(err.value)


def test_offline_a_hub_id_that_is_not_cached_names_the_path_and_hf_hub_offline(monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # as conftest.py sets it; datasets then never reaches the Hub

    def offline(*args, **kwargs):
        raise ConnectionError("Couldn't reach 'someone/no-such-set' on the Hub (OfflineModeIsEnabled)")

    monkeypatch.setattr("datasets.load_dataset", offline)
    with pytest.raises(FileNotFoundError, match="HF_HUB_OFFLINE is set") as err:
        load_split("someone/no-such-set")
    assert str(tmp_path / "someone" / "no-such-set") in str(err.value)
    assert isinstance(err.value.__cause__, ConnectionError)


def test_a_folder_under_home_loads(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    DatasetDict({"train": Dataset.from_list([{"prompt": "1 + 1?", "answer": "2"}])}).save_to_disk(tmp_path / "set")
    assert load_split("~/set", "train").to_list() == [{"prompt": "1 + 1?", "answer": "2"}]


@pytest.mark.parametrize("min_offline", [0, 1])
def test_training_data_without_the_offline_column_names_it_and_the_fixes(tmp_path, min_offline):
    from trl_explore.data.training_data import DataArguments, load_training_data

    folder = tmp_path / "no-teachers"
    Dataset.from_list([{"prompt": "What is 1 + 1?", "answer": "2"}]).save_to_disk(str(folder))
    args = DataArguments(dataset_name=str(folder), min_offline_completions=min_offline)
    with pytest.raises(ValueError, match="has no column 'offline_completions'") as err:
        load_training_data(args, 64, offline=True)
    message = str(err.value)
    assert "['prompt', 'answer']" in message and "--offline_completions_column" in message
    assert "examples/train_ase_grpo.py" in message
    assert len(load_training_data(args, 64, offline=False)) == 1  # ASE-GRPO reads no offline column
