"""Issue 45 item 3: one prompt renderer. A thinking model's template with ``chat_template_kwargs={"enable_thinking":
False}``: TRL trains on a prompt ending in an empty think block; the held-out evaluation's "training" format and the
sampling stack must ask that same prompt (before: the evaluation rendered without the kwargs, a shorter prompt ending
at the assistant tag). The template is written here (no hub)."""

import copy

import pytest

from trl_explore.sampling.render import render_prompt, rendering_of

# A reasoning model's ChatML template: with enable_thinking false, the generation prompt closes an empty think block
THINKING_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}"
    "{% endif %}"
)
PROMPT = [{"role": "user", "content": "What is 2 + 3?"}]


@pytest.fixture
def thinking_tokenizer(smollm2_tokenizer):
    tokenizer = copy.deepcopy(smollm2_tokenizer)
    tokenizer.chat_template = THINKING_TEMPLATE
    return tokenizer


def test_render_prompt_honours_the_kwargs(thinking_tokenizer):
    plain = render_prompt(thinking_tokenizer, PROMPT)
    closed = render_prompt(thinking_tokenizer, PROMPT, chat_template_kwargs={"enable_thinking": False})
    assert thinking_tokenizer.decode(closed).endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert thinking_tokenizer.decode(plain).endswith("<|im_start|>assistant\n")
    assert len(closed) > len(plain)


def test_the_evaluations_training_format_renders_trls_training_prompt(tmp_path, thinking_tokenizer, tiny_model,
                                                                      monkeypatch):
    from datasets import Dataset

    from trl_explore import ExplorationConfig, ExplorationTrainer
    from trl_explore.evaluation.heldout import HeldoutEvalArguments
    from trl_explore.evaluation.heldout_evaluator import HeldoutEvaluator
    from trl_explore.sampling.hf import TransformersGenerator
    from trl_explore.testing import parity_reward, tiny_training_args

    rows = [{"prompt": PROMPT, "answer": "5", "problem_id": "p0"}]
    args = ExplorationConfig(**tiny_training_args(tmp_path, per_device_train_batch_size=2, num_generations=2,
                                                  chat_template_kwargs={"enable_thinking": False}))
    trainer = ExplorationTrainer(tiny_model, reward_funcs=[parity_reward], args=args,
                                 train_dataset=Dataset.from_list(rows * 2), processing_class=thinking_tokenizer)
    trl_ids = [int(i) for i in trainer._tokenize_prompts([PROMPT])[0][0]]  # what TRL trains on
    assert thinking_tokenizer.decode(trl_ids).endswith("</think>\n\n")
    assert rendering_of(trainer) == {"chat_template_kwargs": {"enable_thinking": False}, "chat_template": None}

    encoded = []
    encode = TransformersGenerator.encode
    monkeypatch.setattr(TransformersGenerator, "encode",
                        lambda self, messages: encoded.append(encode(self, messages)) or encoded[-1])
    options = HeldoutEvalArguments(eval_problems=1, eval_samples=1, eval_greedy=False, eval_max_new_tokens=2,
                                   eval_cache=False)
    HeldoutEvaluator(trainer, options, problems=Dataset.from_list(rows))("before")
    assert encoded and encoded[0] == trl_ids  # before the fix: 9 fewer tokens, no think block
