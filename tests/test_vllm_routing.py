"""The vLLM-independent parts of steering through vLLM: request splitting, reassembly, table rows (no vLLM needed)."""

from types import SimpleNamespace

import pytest
import torch

from trl_explore.ase.steering.vllm_server import (
    STEER_PROMPT_KEY,
    VECTOR_KEY,
    RequestVectorRows,
    route_requests,
    routed_generate,
)


def test_route_requests_groups_prompts_by_route_and_count():
    # 3 prompts x n=4; prompt 0: routes 0,1,1,2 ; prompt 1: 0,0,1,2 ; prompt 2: 1,1,1,1
    keys = [0, 1, 1, 2, 0, 0, 1, 2, 1, 1, 1, 1]
    assert route_requests(keys, 4) == [
        (0, 1, [0]),
        (0, 2, [1]),
        (1, 1, [1]),
        (1, 2, [0]),
        (1, 4, [2]),
        (2, 1, [0, 1]),
    ]
    with pytest.raises(ValueError, match="whole groups"):
        route_requests(keys[:5], 4)


def test_routed_generate_puts_every_rollout_back_in_its_slot():
    keys = [0, 1, 1, 2, 0, 0, 1, 2]  # 2 prompts x n=4
    calls = []

    def fake_generate(prompts, features, n, generation_kwargs, temperature):
        calls.append((list(prompts), n, generation_kwargs))
        route = generation_kwargs.get("vllm_xargs", {}).get("route", 0)
        completions = [[p[0], route, j] for p in prompts for j in range(n)]  # (prompt, route, draw)
        return {
            "prompt_ids": [list(p) for p in prompts],
            "completion_ids": completions,
            "logprobs": [[[-float(route)]] for _ in completions],
            "logprob_token_ids": None,
        }

    out = routed_generate(
        fake_generate, [[10], [20]], 4, keys,
        lambda key: {} if key == 0 else {"vllm_xargs": {"route": key}, "cache_salt": f"s{key}"},
        generation_kwargs={"vllm_xargs": {"user": 1}, "seed": 3}, temperature=0.7,
    )
    assert out["prompt_ids"] == [[10], [20]]
    assert out["completion_ids"] == [
        [10, 0, 0], [10, 1, 0], [10, 1, 1], [10, 2, 0],
        [20, 0, 0], [20, 0, 1], [20, 1, 0], [20, 2, 0],
    ]
    assert [lp[0][0] for lp in out["logprobs"]] == [-0.0, -1.0, -1.0, -2.0, -0.0, -0.0, -1.0, -2.0]
    assert out["logprob_token_ids"] is None
    # user generation kwargs are kept and merged; the clean route carries no vector and no salt
    (clean, _, clean_kwargs) = calls[0]
    assert clean_kwargs == {"vllm_xargs": {"user": 1}, "seed": 3}
    steered_kwargs = [c[2] for c in calls if "route" in c[2]["vllm_xargs"]]
    assert all(k["vllm_xargs"]["user"] == 1 and k["cache_salt"].startswith("s") and k["seed"] == 3
               for k in steered_kwargs)
    assert sum(len(p) * n for p, n, _ in calls) == 8  # exactly the 8 rollouts asked for
    with pytest.raises(ValueError, match="7 route keys for 2 prompts x 4"):
        routed_generate(fake_generate, [[10], [20]], 4, keys[:7], lambda key: {}, temperature=0.7)


def test_request_vector_rows_share_reuse_and_free_rows():
    table = torch.zeros(3, 4)  # row 0 clean + 2 vector rows
    live = {}
    rows = RequestVectorRows(table, live)

    def state(vector=None, steer_prompt=None):
        extra = {} if vector is None else {VECTOR_KEY: vector}
        if steer_prompt is not None:
            extra[STEER_PROMPT_KEY] = steer_prompt
        return SimpleNamespace(sampling_params=SimpleNamespace(extra_args=extra))

    a, b, c = [1.0, 0, 0, 0], [0, 2.0, 0, 0], [0, 0, 3.0, 0]
    for req in ("r1", "r2", "r3", "r4"):
        live[req] = True
    assert rows.row_of("r0", state()) == (0, True)
    assert rows.row_of("r0b", state(steer_prompt="false")) == (0, False)  # vllm_xargs may carry strings
    assert rows.row_of("r1", state(a)) == (1, True)
    assert rows.row_of("r2", state(a, steer_prompt=False)) == (1, False)  # same vector, same row
    assert rows.row_of("r3", state(b)) == (2, True)
    assert torch.equal(table, torch.tensor([[0.0] * 4, a, b]))
    assert rows.row_of("r4", state(c)) == (0, True)  # both rows in use: refused, generated unsteered, counted
    assert rows.rejected == 1
    del live["r1"], live["r2"]  # the requests using `a` finished
    assert rows.row_of("r6", state(c)) == (1, True)
    assert torch.equal(table[1], torch.tensor(c))
    assert rows.row_of("r5", state([1.0, 2.0])) == (0, True)  # wrong hidden size
    assert rows.row_of("r7", state([float("nan")] * 4)) == (0, True)
    assert rows.rejected == 3
    assert rows.status(layer=0, calls=5) == {"layer": 0, "hidden_size": 4, "max_vectors": 2, "calls": 5, "rejected": 3}
