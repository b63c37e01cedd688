"""core.engines.turn_order: the person's turn first, API replies bounded, work beside a
conversation last (issue 45 item 3, issue 46 item 4)."""

from __future__ import annotations

from collections import deque

from core.engines.base import GenerationRequest
from core.engines.turn_order import MAX_PAUSES, TURNS_PER_RESUME, TurnOrder


def _r(rid: str, *, interactive: bool = False, aside: bool = False) -> GenerationRequest:
    return GenerationRequest(rid, (), interactive=interactive, aside=aside)


def test_a_turn_takes_over_an_api_reply_and_it_resumes_first_of_its_rank() -> None:
    queue: deque[GenerationRequest] = deque()
    order: TurnOrder[str] = TurnOrder(queue)
    api = _r("api")
    queue.extend([_r("api-2"), _r("person", interactive=True)])
    assert order.should_yield(api)
    order.set_aside(api, "state")
    assert order.next() == (_r("person", interactive=True), None)
    assert order.next() == (api, "state")  # before api-2, which came later
    assert order.next() == (_r("api-2"), None)
    assert order.next() is None


def test_an_api_reply_is_set_aside_a_bounded_number_of_times() -> None:
    queue: deque[GenerationRequest] = deque()
    order: TurnOrder[int] = TurnOrder(queue)
    api = _r("api")
    for i in range(MAX_PAUSES):
        queue.append(_r(f"p{i}", interactive=True))
        assert order.should_yield(api)
        order.set_aside(api, i)
        order.next()  # the person
        order.next()  # the API reply again
    queue.append(_r("late", interactive=True))
    assert not order.should_yield(api)  # it finishes now


def test_an_api_reply_resumes_after_a_bounded_number_of_turns() -> None:
    queue: deque[GenerationRequest] = deque(_r(f"p{i}", interactive=True) for i in range(5))
    order: TurnOrder[int] = TurnOrder(queue)
    order.set_aside(_r("api"), 0)
    started = [order.next()[0].request_id for _ in range(TURNS_PER_RESUME + 1)]
    assert started == [f"p{i}" for i in range(TURNS_PER_RESUME)] + ["api"]


def test_work_beside_a_conversation_yields_to_everyone_without_bound() -> None:
    queue: deque[GenerationRequest] = deque()
    order: TurnOrder[int] = TurnOrder(queue)
    summary = _r("summary", aside=True)
    queue.append(_r("api"))
    assert order.should_yield(summary)  # an API request outranks it too
    for i in range(MAX_PAUSES + 2):
        queue.append(_r(f"p{i}", interactive=True))
        assert order.should_yield(summary)
        order.set_aside(summary, i)
        while (nxt := order.next()) and nxt[0].request_id != "summary":
            pass
    queue.extend(_r(f"q{i}", interactive=True) for i in range(TURNS_PER_RESUME + 2))
    order.set_aside(summary, 9)
    started = [order.next()[0].request_id for _ in range(TURNS_PER_RESUME + 3)]
    assert started[-1] == "summary"  # after every turn waiting, not overdue
