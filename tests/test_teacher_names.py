"""Issue 45 item 5: every offline row keeps its teacher's name, also when the teacher's text is what the policy
sampled word for word (the ladder's ``terse`` style, which the worked example in its prompt teaches; seen as teacher
NaN in the main job's completion log). Over the four ladder styles and CHAMP's four teachers."""

import pytest

from trl_explore import ExplorationConfig, ExplorationTrainer, OGERComponent, OGEROptions
from trl_explore.oger import fields
from trl_explore.oger.offline import teacher_completion
from trl_explore.testing import parity_reward, tiny_training_args


def _rows():
    """One row per teacher: each ladder style (its own name) and each CHAMP model (one solution of problem 1)."""
    from trl_explore.data.ladder import ladder_dataset
    from trl_explore.data.ladder_teachers import TEACHER_STYLES
    from trl_explore.data.sources import champ_records

    ladder = ladder_dataset(train_size=1, validation_size=1, test_size=1)["train"][0]
    rows = [{"prompt": ladder["prompt"], "answer": ladder["answer"], "problem_id": f"ladder-{style}",
             "offline_completions": [ladder["offline_completions"][TEACHER_STYLES.index(style)]],
             "offline_teachers": [style]} for style in TEACHER_STYLES]
    record = next(iter(champ_records()))
    firsts = {}
    for teacher, text in record.completions:
        firsts.setdefault(teacher, text)
    assert len(firsts) == 4, firsts.keys()
    rows += [{"prompt": [{"role": "user", "content": record.problem}], "answer": record.answer,
              "problem_id": f"champ-{teacher}", "offline_completions": [text], "offline_teachers": [teacher]}
             for teacher, text in firsts.items()]
    return rows


class TeacherRecorder:
    __name__ = "teacher_recorder"

    def __init__(self):
        self.calls = []

    def __call__(self, completions, **kwargs):
        self.calls.append((list(kwargs["problem_id"]), list(kwargs[fields.TEACHER]), list(kwargs[fields.IS_OFFLINE]),
                           list(kwargs["row_owner"])))
        return [0.0] * len(completions)


@pytest.mark.slow
def test_a_teacher_row_identical_to_the_sampled_completion_keeps_its_teacher(tmp_path, smollm2_tokenizer,
                                                                             tiny_model):
    from datasets import Dataset

    rows = _rows()
    texts = {row["problem_id"]: row["offline_completions"][0] for row in rows}

    def rollout_func(prompts, trainer):  # the policy "samples" its prompt's teacher text, token for token
        tokenizer = trainer.processing_class
        prompt_ids, completion_ids = [], []
        ids_of = {tokenizer.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=False):
                  teacher_completion(texts[r["problem_id"]], trainer._tokenizer, tokenizer,
                                     trainer.max_completion_length, True)[0] for r in rows}
        for p in prompts:
            text = tokenizer.apply_chat_template(p, add_generation_prompt=True, tokenize=False)
            prompt_ids.append(tokenizer(text, add_special_tokens=False)["input_ids"])
            completion_ids.append(ids_of[text])
        return {"prompt_ids": prompt_ids, "completion_ids": completion_ids,
                "logprobs": [[-1.0] * len(ids) for ids in completion_ids]}

    recorder = TeacherRecorder()
    args = ExplorationConfig(**tiny_training_args(tmp_path, per_device_train_batch_size=8, num_generations=2,
                                                  max_steps=2, max_completion_length=48, log_completions=True))
    oger = OGERComponent(OGEROptions(embedding_model="embedded", use_exploration_reward=False))
    trainer = ExplorationTrainer(tiny_model, reward_funcs=[parity_reward, recorder], args=args,
                                 train_dataset=Dataset.from_list(rows), processing_class=smollm2_tokenizer,
                                 components=[oger], rollout_func=rollout_func)
    trainer.train()
    named = {}
    for problem_ids, teachers, offline, owners in recorder.calls:
        for pid, teacher, off, owner in zip(problem_ids, teachers, offline, owners):
            if off:
                assert owner == "oger" and teacher == rows[[r["problem_id"] for r in rows].index(pid)][
                    "offline_teachers"][0], (pid, teacher, owner)
                named[pid] = teacher
    assert set(named) == {row["problem_id"] for row in rows}  # every teacher replaced a row and was named
    logged = trainer._logs["extra"]["teacher"]
    assert None not in [t for t, off in zip(logged, trainer._logs["extra"]["is_offline"]) if off]
