"""Stream parsing: reasoning/tool-call splitting per model family, stop sequences."""
