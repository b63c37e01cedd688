"""core.engines.prefill_order: which waiting prompts prefill together next."""

from __future__ import annotations

from functools import partial

from core.engines import prefill_order
from core.engines.prefill_order import OVERDUE_S, Waiting, padded_tokens

cpu = partial(prefill_order.next_group, free_tokens=prefill_order.FREE_PADDED_TOKENS["cpu"],
              slack=prefill_order.PADDING_SLACK["cpu"])
gpu = partial(prefill_order.next_group, free_tokens=prefill_order.FREE_PADDED_TOKENS["gpu"],
              slack=prefill_order.PADDING_SLACK["gpu"])


def waiting(*lengths: int, arrived: float = 0.0) -> list[Waiting]:
    return [Waiting(n, arrived + i * 0.001) for i, n in enumerate(lengths)]


def groups_of(pick, w: list[Waiting]) -> list[list[int]]:
    """Every group in turn, as the engine takes them."""
    groups, left = [], list(range(len(w)))
    while left:
        chosen = [left[j] for j in pick([w[i] for i in left], 8, now=0.1)]
        groups.append(chosen)
        left = [i for i in left if i not in chosen]
    return groups


def test_the_shortest_prompt_goes_first_whatever_the_arrival_order():
    w = waiting(1140, 900, 300, 660)
    assert cpu(w, 8, now=0.1)[0] == 2
    assert gpu(w, 8, now=0.1)[0] == 2


def test_on_a_cpu_long_prompts_go_one_by_one_short_first():
    w = waiting(*(300 + 120 * i for i in range(8)))
    assert groups_of(cpu, w) == [[i] for i in range(8)]


def test_on_a_gpu_the_shortest_share_a_pass_and_the_longest_wait():
    w = waiting(*(400 + 380 * i for i in range(8)))  # 400 .. 3060 tokens
    assert groups_of(gpu, w) == [[0, 1, 2, 3, 4, 5], [6, 7]]
    # Against one pass of all eight padded to the longest: fewer tokens.
    assert padded_tokens(w, range(6)) + padded_tokens(w, [6, 7]) < padded_tokens(w, range(8))


def test_short_prompts_still_batch_eight_at_a_time():
    w = waiting(*(20 + i % 5 * 9 for i in range(20)))
    for pick in (cpu, gpu):
        group = pick(w, 8, now=0.1)
        assert len(group) == 8
        assert sorted(w[i].new_tokens for i in group) == sorted(x.new_tokens for x in w)[:8]


def test_the_group_never_exceeds_the_free_slots():
    assert len(cpu(waiting(*[30] * 10), 3, now=0.1)) == 3
    assert cpu(waiting(30), 0, now=0.1) == []
    assert gpu([], 8, now=0.1) == []


def test_an_overdue_long_prompt_goes_next_before_shorter_newcomers():
    old = Waiting(3000, arrived=0.0)
    fresh = [Waiting(40, arrived=0.5 + i * 0.01) for i in range(5)]
    assert cpu([*fresh, old], 8, now=OVERDUE_S + 0.1)[0] == 5
    # Not yet overdue: the newcomers go first, and together.
    assert cpu([*fresh, old], 8, now=1.0) == [0, 1, 2, 3, 4]


def test_a_persons_prompt_is_prefilled_before_api_prompts_of_any_length() -> None:
    """Issue 45: the app's turn (interactive) goes ahead of waiting API prompts, even
    shorter ones; an API prompt overdue still leads (the API's wait stays bounded)."""
    api = [Waiting(40, 0.0), Waiting(60, 0.0), Waiting(30, 0.1)]
    person = Waiting(900, 0.2, interactive=True)
    assert cpu([*api, person], 1, now=0.5) == [3]
    overdue = Waiting(50, -5.0)
    assert cpu([*api, person, overdue], 1, now=0.5) == [4]
