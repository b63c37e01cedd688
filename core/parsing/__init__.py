"""Stream parsing: reasoning/tool-call splitting per model family, stop sequences.

    from core.parsing import StreamParser, detect_family
    parser = StreamParser(detect_family(template, model_type), in_reasoning=opens_reasoning(template))
    for delta in deltas: events += parser.feed(delta)
    events += parser.finish()
"""

from .detect import detect_family, opens_reasoning
from .families import FAMILIES, JSON_CALL, UnknownFamilyError
from .stops import StopMatcher
from .stream import StreamParser, family_markers, family_uses_think

__all__ = [
    "FAMILIES",
    "JSON_CALL",
    "StopMatcher",
    "StreamParser",
    "UnknownFamilyError",
    "detect_family",
    "family_markers",
    "family_uses_think",
    "opens_reasoning",
]
