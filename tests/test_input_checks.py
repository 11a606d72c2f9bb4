"""Bad inputs of issue 22 ("Measured", item 4): each class gets a clear error at construction or at the first batch,
naming the row, field, option or file and the fix, or a one-time warning where a user may mean it. The issue's exact
cases are kept (marked "issue 22 case")."""

import logging
import math
import os

import pytest
import torch
from datasets import Dataset, IterableDataset
from transformers import GPT2Config, GPT2LMHeadModel
from trl import GRPOConfig

from trl_explore import ASEConfig, ASEGRPOTrainer, OGERConfig, OGERTrainer
from trl_explore.ase.bank import SteeringVectorBank
from trl_explore.ase.routing import prompt_key, shared_problem_id_warning
from trl_explore.driver import ExplorationTrainer
from trl_explore.driver.resume import check_buffered_geometry
from trl_explore.driver.rows import check_prompt_rows
from trl_explore.oger.offline import offline_trajectories, teacher_completion
from trl_explore.rewards.checks import check_reward_values, unscored_correctness_warning
from trl_explore.testing import make_tiny_causal_lm, parity_reward, teacher_math_dataset, tiny_training_args
from trl_explore.trl_guards.positions import context_length_problem


def _args(tmp_path, config=GRPOConfig, **overrides):
    return config(**tiny_training_args(tmp_path / "out", **{"per_device_train_batch_size": 2, "num_generations": 2,
                                                            "max_steps": 1, "max_completion_length": 4, **overrides}))


def _iterable(rows):
    return IterableDataset.from_generator(lambda: iter(rows))


def _train(tokenizer, tmp_path, dataset, reward_funcs=(parity_reward,), model=None, **overrides):
    trainer = ExplorationTrainer(model or make_tiny_causal_lm(tokenizer), reward_funcs=list(reward_funcs),
                                 args=_args(tmp_path, **overrides), train_dataset=dataset, processing_class=tokenizer)
    trainer.train()
    return trainer


# ---------------------------------------------------------------- prompts (rows.py)
def test_prompt_rows_on_hand_values():
    where = "this batch"
    assert check_prompt_rows([{"prompt": "1 + 1 ="}] * 2, where) == "plain text"
    chat = {"prompt": [{"role": "user", "content": "1 + 1?"}]}
    assert check_prompt_rows([chat], where, "conversational") == "conversational"
    tool_call = {"prompt": [{"role": "assistant", "content": None, "tool_calls": [{"name": "f"}]}]}
    assert check_prompt_rows([tool_call], where) == "conversational"
    with pytest.raises(ValueError, match="row 0 of this batch: message 0 of 'prompt' has no text 'content'"):
        check_prompt_rows([{"prompt": [{"role": "user"}]}], where)
    with pytest.raises(ValueError, match="row 0 of this batch: 'prompt' must be a string or a non-empty list"):
        check_prompt_rows([{"prompt": []}], where)
    with pytest.raises(ValueError, match="row 1 of this batch has a plain text prompt but the earlier batches were "
                                         "conversational"):
        check_prompt_rows([chat, {"prompt": "2 + 2 ="}], where, "conversational")


@pytest.mark.slow
def test_a_message_without_role_is_refused_naming_row_and_message(tmp_path, smollm2_tokenizer):
    # issue 22 case: a chat message without `role` (was: a tokenizer error 16 frames deep)
    dataset = Dataset.from_list([{"prompt": [{"content": "What is 1 + 1?"}]}] * 2)
    with pytest.raises(ValueError, match=r"row 0 of this process's train generation batch: message 0 of 'prompt' has "
                                         r"no 'role' .*\{'content': 'What is 1 \+ 1\?'\}; add it"):
        _train(smollm2_tokenizer, tmp_path, dataset)


@pytest.mark.slow
def test_mixed_plain_and_conversational_prompts_are_refused(tmp_path, smollm2_tokenizer):
    # issue 22 case: conversational and plain prompts mixed in an IterableDataset
    # (TRL gives each of its rows a batch of its own: the second batch is the other kind; within one batch, see above)
    rows = [{"prompt": "What is 2 + 2?"}, {"prompt": [{"role": "user", "content": "What is 1 + 1?"}]}] * 2
    with pytest.raises(ValueError, match="row 0 of this process's train generation batch has a conversational prompt "
                                         "but the earlier batches were plain text: one dataset must hold one kind"):
        _train(smollm2_tokenizer, tmp_path, _iterable(rows), per_device_train_batch_size=4, max_steps=2)


@pytest.mark.slow
def test_an_iterable_row_without_prompt_is_refused_naming_its_fields(tmp_path, smollm2_tokenizer):
    # issue 22 case: an IterableDataset row without a prompt (was: KeyError 'prompt' inside TRL)
    with pytest.raises(ValueError, match=r"row 0 of this process's train generation batch has no 'prompt' field "
                                         r"\(its fields: \['question'\]\)"):
        _train(smollm2_tokenizer, tmp_path, _iterable([{"question": "What is 1 + 1?"}] * 4))


def test_a_dataset_without_prompt_column_is_refused_at_construction(tmp_path, smollm2_tokenizer):
    with pytest.raises(ValueError, match=r"train_dataset has no 'prompt' column \(its columns: \['question'\]\); "
                                         r"rename the column"):
        ExplorationTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[parity_reward], args=_args(tmp_path),
                           train_dataset=Dataset.from_list([{"question": "1 + 1?"}] * 2),
                           processing_class=smollm2_tokenizer)


# ---------------------------------------------------------------- reward outputs (rewards/checks.py)
def test_reward_values_on_hand_values():
    check_reward_values([1.0, None, 0, True, torch.tensor(0.5), math.nan], "r")  # what TRL takes
    with pytest.raises(TypeError, match=r"reward function 'r' returned '1' \(str\) for completion 1: return one"):
        check_reward_values([0.0, "1"], "r")
    with pytest.raises(TypeError, match=r"returned \[1.0\] \(list\) for completion 0"):
        check_reward_values([[1.0]], "r")
    with pytest.raises(TypeError, match="reward function 'r' returned a float"):
        check_reward_values(1.0, "r")


@pytest.mark.slow
def test_a_reward_function_returning_strings_is_named(tmp_path, smollm2_tokenizer):
    # issue 22 case: a reward function returning strings (was: TRL's "too many dimensions 'str'", naming no function)
    def text_reward(completions, **kwargs):
        return ["1.0"] * len(completions)

    with pytest.raises(TypeError, match=r"reward function 'text_reward' returned '1.0' \(str\) for completion 0"):
        _train(smollm2_tokenizer, tmp_path, Dataset.from_list([{"prompt": "1 + 1 ="}] * 2), [text_reward])


# ---------------------------------------------------------------- position tables (positions.py, oger/embedding.py)
def test_context_length_problem_on_hand_values(smollm2_tokenizer):
    rope = make_tiny_causal_lm(smollm2_tokenizer)
    rope.config.max_position_embeddings = 32
    assert context_length_problem(rope, [10, 20], 12) is None  # 20 + 12 fits
    kind, text = context_length_problem(rope, [10, 25], 12)
    assert kind == "warning" and "row 1 of the generation batch has a prompt of 25 tokens" in text
    assert "max_completion_length=12 a completion can run past it (37 positions)" in text
    kind, text = context_length_problem(rope, [40], 4)
    assert kind == "warning" and "positions it was not trained on" in text
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(smollm2_tokenizer), n_positions=32, n_embd=16, n_layer=1,
                                      n_head=2))
    kind, text = context_length_problem(gpt2, [5, 40], 4)
    assert kind == "error" and "holds 32: a model with absolute positions cannot read past it" in text


@pytest.mark.slow
def test_a_prompt_longer_than_the_position_table_warns_once(tmp_path, smollm2_tokenizer, caplog):
    # issue 22 case: a prompt longer than the policy's position table (was: no warning; TRL adds none)
    model = make_tiny_causal_lm(smollm2_tokenizer)
    model.config.max_position_embeddings = 32
    prompt = "What is " + " + ".join(["1"] * 20) + "?"
    assert len(smollm2_tokenizer(prompt)["input_ids"]) > 32
    with caplog.at_level(logging.WARNING, logger="trl_explore.driver"):
        _train(smollm2_tokenizer, tmp_path, Dataset.from_list([{"prompt": prompt}] * 2), model=model, max_steps=2)
    warnings = [r.getMessage() for r in caplog.records if "position table" in r.getMessage()]
    assert len(warnings) == 1 and "holds 32: the model reads it at positions it was not trained on" in warnings[0]


@pytest.mark.slow
def test_a_prompt_past_an_absolute_position_table_is_refused_before_generation(tmp_path, smollm2_tokenizer):
    gpt2 = GPT2LMHeadModel(GPT2Config(vocab_size=len(smollm2_tokenizer), n_positions=16, n_embd=16, n_layer=1,
                                      n_head=2, eos_token_id=smollm2_tokenizer.eos_token_id,
                                      pad_token_id=smollm2_tokenizer.pad_token_id))
    prompt = "What is " + " + ".join(["1"] * 20) + "?"
    with pytest.raises(ValueError, match=r"row 0 of the generation batch has a prompt of \d+ tokens, and the policy's "
                                         "position table .* holds 16: a model with absolute positions cannot read"):
        _train(smollm2_tokenizer, tmp_path, Dataset.from_list([{"prompt": prompt}] * 2), model=gpt2)


def test_an_encoder_window_above_the_embedders_position_table_is_refused():
    # issue 22 case: TrajectoryEncoder(max_seq_length=...) above the embedder's position table (was: a shape error at
    # the first long text)
    from trl_explore.oger.embedding import TrajectoryEncoder

    with pytest.raises(ValueError, match=r"TrajectoryEncoder\(max_seq_length=1000\) is above the 512 positions of "
                                         "the embedding model 'embedded' .*use at most 512, and long_text_mode="):
        TrajectoryEncoder(max_seq_length=1000).encode(["a text"])
    assert TrajectoryEncoder(max_seq_length=512).window == 510  # the table's size itself is fine


# ---------------------------------------------------------------- OGER teacher texts (oger/offline.py)
@pytest.mark.parametrize("text", ["<|im_end|>", "<|endoftext|>\n<|im_end|> "])
def test_a_teacher_text_of_special_tokens_only_is_refused(tmp_path, smollm2_tokenizer, text):
    # issue 22 case: a teacher text that tokenises to special tokens only (e.g. the EOS string)
    rows = teacher_math_dataset().to_list()
    rows[1]["offline_completions"] = ["Since 3 times 3 is 9, the answer is \\boxed{9}.", text]
    rows[1]["offline_teachers"] = ["teacher-c", "teacher-d"]
    args = OGERConfig(**tiny_training_args(tmp_path, embedding_model="embedded"))
    with pytest.raises(ValueError, match="training row 1: offline trajectory 1 of 'offline_completions' is .*special "
                                         "tokens only: as a completion it is a bare EOS"):
        OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=args, train_dataset=Dataset.from_list(rows),
                    processing_class=smollm2_tokenizer)
    with pytest.raises(ValueError, match="tokenises to special tokens only"):  # rows seen only at use (iterable)
        teacher_completion(text, smollm2_tokenizer, smollm2_tokenizer, 8, conversational=True)
    ids, _, _ = teacher_completion("<|im_end|> 4", smollm2_tokenizer, smollm2_tokenizer, 8, conversational=True)
    assert len(ids) > 2  # a special token inside a real text is the text's


# ---------------------------------------------------------------- ASE (ase/routing.py, rewards/checks.py)
def test_shared_problem_id_warning_on_hand_values():
    a, b = prompt_key({"prompt": "What is 1 + 1?"}), prompt_key({"prompt": "What is 2 + 2?"})
    assert shared_problem_id_warning(["p0", "p0", "p1"], [a, a, b], "problem_id") is None
    text = shared_problem_id_warning(["p0", "p0", "p0", "p0"], [a, a, b, b], "problem_id")
    assert text.startswith("ASE: rows 0 and 2 of the generation batch share the problem id 'p0' (column 'problem_id') "
                           "but have different prompts (\"What is 1 + 1?\" and \"What is 2 + 2?\")")


def test_unscored_correctness_warning_on_hand_values():
    nan = math.nan
    assert unscored_correctness_warning(torch.tensor([nan, 1.0]), "math", 0) is None
    text = unscored_correctness_warning(torch.tensor([nan, nan]), "math", 0)
    assert "the correctness reward 'math' (correctness_reward_index=0) scored none of the 2 rollouts" in text


def _ase_args(tmp_path, **overrides):
    return ASEConfig(**tiny_training_args(tmp_path, **{
        "per_device_train_batch_size": 6, "num_generations": 6, "num_vectors": 2, "pca_dim": 4, "kmeans_n_init": 2,
        "min_pairs_per_cluster": 1, "max_steps": 2, **overrides}))


@pytest.mark.slow
def test_ase_warns_once_about_a_shared_problem_id_and_a_reward_that_never_scores(tmp_path, smollm2_tokenizer, caplog):
    # issue 22 cases: one problem_id shared by different prompts (was: paired across prompts, silently); an ASE
    # correctness reward that never scores (was: every bank update skipped with no warning)
    def never_scores(completions, **kwargs):
        return [None] * len(completions)

    rows = [{"prompt": f"What is {i} + {i}?", "problem_id": "same"} for i in range(2)]
    trainer = ASEGRPOTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[never_scores, parity_reward],
                             args=_ase_args(tmp_path, per_device_train_batch_size=12, max_steps=2),
                             train_dataset=Dataset.from_list(rows), processing_class=smollm2_tokenizer)
    with caplog.at_level(logging.WARNING, logger="trl_explore.ase.component"):
        trainer.train()
    shared = [r.getMessage() for r in caplog.records if "share the problem id" in r.getMessage()]
    unscored = [r.getMessage() for r in caplog.records if "scored none of the" in r.getMessage()]
    assert len(shared) == 1 and "rows 0 and 6 of the generation batch share the problem id 'same'" in shared[0]
    assert len(unscored) == 1 and "'never_scores' (correctness_reward_index=0) scored none of the 12" in unscored[0]
    assert trainer.ase.bank.num_updates == 0


# ---------------------------------------------------------------- files and resumes
def test_a_truncated_bank_file_is_named(tmp_path):
    # issue 22 case: a truncated bank file on resume (was: an error naming no file)
    bank = SteeringVectorBank(hidden_size=4, num_vectors=2)
    bank.save(tmp_path / "bank")
    path = tmp_path / "bank" / "steering_bank.safetensors"
    os.truncate(path, os.path.getsize(path) // 2)
    with pytest.raises(ValueError, match=f"the steering bank file {path} is torn or unreadable"):
        SteeringVectorBank.load(tmp_path / "bank")
    (tmp_path / "bank" / "steering_bank.json").write_text('{"config": ')
    with pytest.raises(ValueError, match="steering_bank.json is torn or unreadable"):
        SteeringVectorBank.load(tmp_path / "bank")


def test_buffered_batches_of_another_geometry_are_refused(tmp_path):
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, steps_per_generation=2,
                      use_cpu=True, bf16=False, report_to="none")
    check_buffered_geometry([{"prompt_ids": torch.zeros(4, 3), "n": torch.tensor(1.0)}] * 2, args, "ck")
    with pytest.raises(ValueError, match="steps_per_generation=3 in the checkpoint, 2 now; "
                                         "per_device_train_batch_size=6 in the checkpoint, 4 now"):
        check_buffered_geometry([{"prompt_ids": torch.zeros(6, 3)}] * 3, args, "ck")


@pytest.mark.slow
@pytest.mark.parametrize("changed", [{"per_device_train_batch_size": 4}, {"steps_per_generation": 4}])
def test_a_resume_inside_a_generation_with_other_batch_settings_is_refused(tmp_path, smollm2_tokenizer, changed):
    # issue 22 case: resuming with changed steps_per_generation or per-device batch size (was: an IndexError inside
    # TRL, or training the checkpoint's stale buffered slice)
    dataset = Dataset.from_list([{"prompt": f"{i} + {i} ="} for i in range(4)])
    _train(smollm2_tokenizer, tmp_path, dataset, steps_per_generation=2, save_strategy="steps", save_steps=1)
    key, value = next(iter(changed.items()))
    trainer = ExplorationTrainer(make_tiny_causal_lm(smollm2_tokenizer), reward_funcs=[parity_reward],
                                 args=_args(tmp_path, **{"steps_per_generation": 2, "max_steps": 2, **changed}),
                                 train_dataset=dataset, processing_class=smollm2_tokenizer)
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    old = {"per_device_train_batch_size": 2, "steps_per_generation": 2}[key]
    with pytest.raises(ValueError, match=f"cannot resume from .*checkpoint-1: it was written inside a generation, .* "
                                         f"{key}={old} in the checkpoint, {value} now"):
        trainer.train(resume_from_checkpoint=True)
    assert all(torch.equal(p, before[n]) for n, p in trainer.model.named_parameters())  # refused before loading


@pytest.mark.slow
def test_an_oger_checkpoint_inside_a_generation_is_refused_by_ase(tmp_path, smollm2_tokenizer):
    # issue 22 case: a checkpoint of one trainer resumed by another inside a generation (was: ASE trained on OGER's
    # buffered batch, its teacher row included, as on-policy)
    dataset = teacher_math_dataset()
    common = dict(per_device_train_batch_size=4, num_generations=4, steps_per_generation=2, max_steps=1,
                  save_strategy="steps", save_steps=1)
    oger = OGERTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=OGERConfig(**tiny_training_args(
        tmp_path, embedding_model="embedded", **common)), train_dataset=dataset, processing_class=smollm2_tokenizer)
    oger.train()
    ase = ASEGRPOTrainer(make_tiny_causal_lm(smollm2_tokenizer), args=ASEConfig(**tiny_training_args(
        tmp_path, num_vectors=1, pca_dim=2, **{**common, "max_steps": 2})), train_dataset=dataset,
        processing_class=smollm2_tokenizer)
    with pytest.raises(ValueError, match=r"written inside a generation.*components \['oger'\] wrote the checkpoint, "
                                         r"this trainer has \['ase'\]"):
        ase.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))


def test_a_teacher_name_given_as_none_is_named_offline_not_none():
    # issue 31 item 6: str(None) made the logged teacher "None"
    from trl_explore.oger.options import OGEROptions

    row = {"offline_completions": ["2 + 2 = 4", "four"], "offline_teachers": [None, "teacher-b"]}
    assert offline_trajectories(row, OGEROptions()) == (["2 + 2 = 4", "four"], ["offline", "teacher-b"], None)
