"""Which waiting prompts to prefill together next: shortest first, little padding.

When several conversations start at once, mlx_lm's BatchGenerator prefills up to eight
prompts in one pass, right-padded to the longest, and every one of them gets its first
token only when the whole pass is done. Eight cold prompts of 300 to 1,140 tokens then
all wait for 8 x 1,140 padded tokens; on a CPU, where a 300-token prompt already fills
the matrix units, batching buys nothing and the padding is pure waste. Prefilled
shortest first, in groups of near-equal length, the short ones answer after their own
prefill and the median wait falls by half or more (bench/chat.py, scenario b).

How much batching is worth depends on the device. On a CPU a pass costs in proportion
to its tokens, so only short prompts share one (a budget of padded tokens that costs
about one decode step, so a burst of one-line questions still goes eight at a time) and
longer ones go one by one: the same total work, but each answers after its own prefill.
On a GPU a pass costs about the same until it holds thousands of tokens (Qwen3-0.6B on an
H100: 18 ms for 20 new tokens or 300), so there the budget is 16k padded tokens: the
shortest prompts share one pass and the longest wait for the next (eight cold
conversations of 400 to 3,000 tokens: median first token 492 ms, against 594-660 ms all
in one pass; budgets of 2k and 6k tokens gave 647 and 690 ms).
A prompt that has waited too long goes next whatever its length, so a long one is never
starved by a stream of short ones. A person's turn in the app (interactive) goes before
API prompts of any length (issue 45); API prompts overdue still lead, so a person typing
bounds the API's wait, never starves it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

# A group may always hold this many padded tokens: about one decode step of a full batch
# on a CPU; on a GPU, about where a pass stops being cheap per token.
FREE_PADDED_TOKENS = {"cpu": 512, "gpu": 16384}
# Past that, a group's padded size may exceed its real tokens by this factor at most
# (never on a CPU: nothing is gained by sharing a pass there).
PADDING_SLACK = {"cpu": 0.0, "gpu": 1.15}
# A prompt that has waited this long is taken next, in arrival order.
OVERDUE_S = 2.0


@dataclass(frozen=True)
class Waiting:
    """One prompt waiting for prefill: its uncached tokens and when it arrived."""

    new_tokens: int
    arrived: float
    interactive: bool = False  # a person waits for it (GenerationRequest.interactive)


def next_group(waiting: Sequence[Waiting], limit: int, now: float, free_tokens: int,
               slack: float, overdue_s: float = OVERDUE_S) -> list[int]:
    """Indices into `waiting` of the next group to prefill (at most `limit`, never empty
    when `waiting` is not). Overdue prompts lead in arrival order; then shortest first,
    adding the next shortest while the group's padded size stays within budget."""
    if not waiting or limit <= 0:
        return []
    order = sorted(range(len(waiting)), key=lambda i: (
        now - waiting[i].arrived < overdue_s,  # overdue first ...
        waiting[i].arrived if now - waiting[i].arrived >= overdue_s else 0.0,  # ... FIFO
        not waiting[i].interactive,  # then the person's turn
        waiting[i].new_tokens,
        waiting[i].arrived,
    ))
    group = [order[0]]
    longest = total = waiting[order[0]].new_tokens
    for i in order[1:]:
        if len(group) >= limit:
            break
        n = waiting[i].new_tokens
        padded = (len(group) + 1) * max(longest, n)
        if padded > free_tokens and padded > slack * (total + n):
            break
        group.append(i)
        longest, total = max(longest, n), total + n
    return group


def padded_tokens(waiting: Sequence[Waiting], group: Sequence[int]) -> int:
    """What prefilling `group` together costs, in tokens (right-padded to the longest)."""
    return len(group) * max((waiting[i].new_tokens for i in group), default=0)
