"""The rules a setting's value must follow, one function a field, shared by the two places
values come from: the settings screen (tui.settings_form, as typed text) and the config
file (core.config, as TOML values, passed in as their text). Each rule refuses a value with
a sentence that says what is allowed.
"""

from __future__ import annotations

from collections.abc import Callable

MIN_CONTEXT = 256
MAX_CONTEXT = 1_048_576
# Python sandbox limits. Below 256 MiB the sandbox's own interpreter and imports do not
# fit its address-space limit; an hour is long enough for any run a chat should wait on.
MIN_PYTHON_MEMORY_MB, MAX_PYTHON_MEMORY_MB = 256, 65_536
MIN_PYTHON_TIMEOUT_S, MAX_PYTHON_TIMEOUT_S = 1.0, 3600.0
# The scratch folder (/tmp in the sandbox, a tmpfs that counts as memory while it holds
# files): 16 MiB holds matplotlib's font cache; 64 GiB is past any desktop's memory.
MIN_PYTHON_SCRATCH_MB, MAX_PYTHON_SCRATCH_MB = 16, 65_536
MAX_PENALTY_WINDOW = 32_768  # as core.engines.base.MAX_PENALTY_WINDOW


class Refused(ValueError):
    """A value the settings cannot take; str() is the reason to show."""


def _number(text: str, label: str, cast: Callable[[str], float]) -> float:
    try:
        return cast(text.strip())
    except ValueError:
        kind = "a whole number" if cast is int else "a number"
        raise Refused(f"{label} must be {kind}.") from None


def temperature(text: str) -> float:
    value = _number(text, "Temperature", float)
    if not 0.0 <= value <= 2.0:
        raise Refused("Temperature must be between 0 and 2.")
    return value


def top_p(text: str) -> float:
    value = _number(text, "Top-p", float)
    if not 0.0 <= value <= 1.0:
        raise Refused("Top-p must be between 0 and 1.")
    return value


def top_k(text: str) -> int:
    value = int(_number(text, "Top-k", int))
    if value < 1:
        raise Refused("Top-k must be 1 or more.")
    return value


def min_p(text: str) -> float:
    value = _number(text, "Min-p", float)
    if not 0.0 <= value <= 1.0:
        raise Refused("Min-p must be between 0 (off) and 1.")
    return value


def repetition_penalty(text: str) -> float:
    value = _number(text, "Repetition penalty", float)
    if not 0.5 <= value <= 2.0:
        raise Refused("Repetition penalty must be between 0.5 and 2 (1 is off).")
    return value


def _additive_penalty(label: str) -> Callable[[str], float]:
    def rule(text: str) -> float:
        value = _number(text, label, float)
        if not -2.0 <= value <= 2.0:
            raise Refused(f"{label} must be between -2 and 2 (0 is off).")
        return value
    return rule


presence_penalty = _additive_penalty("Presence penalty")
frequency_penalty = _additive_penalty("Frequency penalty")


def penalty_window(text: str) -> int:
    value = int(_number(text, "Penalty window", int))
    if not 1 <= value <= MAX_PENALTY_WINDOW:
        raise Refused(f"Penalty window must be between 1 and {MAX_PENALTY_WINDOW} tokens.")
    return value


def seed(text: str) -> int:
    """A blank field means a fresh random seed per reply (stored as -1)."""
    if not text.strip():
        return -1
    value = int(_number(text, "Seed", int))
    if not 0 <= value < 2**63:
        raise Refused("Seed must be a whole number from 0, or blank for a random one.")
    return value


def context_size(text: str) -> int:
    value = int(_number(text, "Context size", int))
    if not MIN_CONTEXT <= value <= MAX_CONTEXT:
        raise Refused(f"Context size must be between {MIN_CONTEXT} and {MAX_CONTEXT}.")
    return value


def max_tokens(text: str, context: int) -> int:
    """A blank field (or 0) means no cap: a reply may use the room left in the context."""
    if not text.strip():
        return 0
    value = int(_number(text, "Max tokens", int))
    if value < 0:
        raise Refused("Max tokens must be 1 or more, or blank for the room left in the context.")
    if value >= context:
        raise Refused(f"Max tokens must be less than the context size ({context}).")
    return value


def python_timeout(text: str) -> float:
    value = _number(text, "Python time limit", float)
    if not MIN_PYTHON_TIMEOUT_S <= value <= MAX_PYTHON_TIMEOUT_S:
        raise Refused(f"Python time limit must be between {MIN_PYTHON_TIMEOUT_S:g} and "
                      f"{MAX_PYTHON_TIMEOUT_S:g} seconds.")
    return value


def python_memory(text: str) -> int:
    value = int(_number(text, "Python memory limit", int))
    if not MIN_PYTHON_MEMORY_MB <= value <= MAX_PYTHON_MEMORY_MB:
        raise Refused(f"Python memory limit must be between {MIN_PYTHON_MEMORY_MB} and "
                      f"{MAX_PYTHON_MEMORY_MB} MiB.")
    return value


def python_scratch(text: str) -> int:
    value = int(_number(text, "Python scratch size", int))
    if not MIN_PYTHON_SCRATCH_MB <= value <= MAX_PYTHON_SCRATCH_MB:
        raise Refused(f"Python scratch size must be between {MIN_PYTHON_SCRATCH_MB} and "
                      f"{MAX_PYTHON_SCRATCH_MB} MiB.")
    return value


# The sampling section's further fields (checked only when the form has them).
SAMPLING_RULES: tuple[tuple[str, Callable[[str], float]], ...] = (
    ("min_p", min_p), ("repetition_penalty", repetition_penalty),
    ("presence_penalty", presence_penalty), ("frequency_penalty", frequency_penalty),
    ("penalty_window", penalty_window), ("seed", seed),
)


# Settings only the config file sets (the screen has no field for them).
MAX_REPLICAS = 64


def replicas(text: str) -> int:
    value = int(_number(text, "Replicas", int))
    if not 0 <= value <= MAX_REPLICAS:
        raise Refused(f"Replicas must be between 0 (the engine's default) and {MAX_REPLICAS}.")
    return value


def idle_unload_minutes(text: str) -> float:
    value = _number(text, "Idle unload minutes", float)
    if not value >= 0:  # also refuses nan
        raise Refused("Idle unload minutes must be 0 (never) or more.")
    return value


def service_idle_minutes(text: str) -> float:
    value = _number(text, "Service idle minutes", float)
    if not value >= 0:  # also refuses nan
        raise Refused("Service idle minutes must be 0 (never) or more.")
    return value


def _positive(label: str, unit: str) -> Callable[[str], float]:
    def rule(text: str) -> float:
        value = _number(text, label, float)
        if not 0 < value < float("inf"):
            raise Refused(f"{label} must be a number of {unit} above 0.")
        return value
    return rule


attach_max_mb = _positive("The attachment size limit", "MiB")
vision_idle_unload_s = _positive("The vision model's idle time", "seconds")


MAX_MEMORY_BUDGET_GB = 65_536  # past any machine's memory; a typo of many zeros is refused


def memory_budget_gb(text: str) -> float:
    """The memory loaded models may take together, in GB; 0 is automatic (core.workers.
    memory_budget: 75% of memory, at least 2 GiB left to the system)."""
    value = _number(text, "The memory budget", float)
    if not 0 <= value <= MAX_MEMORY_BUDGET_GB:  # also refuses nan
        raise Refused(f"The memory budget must be 0 (automatic) or a number of GB up to "
                      f"{MAX_MEMORY_BUDGET_GB}.")
    return value


def kv_disk_gb(text: str) -> float:
    """Disk the KV-cache store may fill (core.engines.kv_store), in GB; 0 turns it off."""
    value = _number(text, "The KV cache on disk", float)
    if not 0 <= value <= MAX_MEMORY_BUDGET_GB:  # also refuses nan
        raise Refused(f"The KV cache on disk must be 0 (off) or a number of GB up to "
                      f"{MAX_MEMORY_BUDGET_GB}.")
    return value


# [[clusters]] (core.cluster): one model across several Macs on MLX's distributed engine.
CLUSTER_BACKENDS = ("ring", "jaccl")  # TCP on any network; RDMA over Thunderbolt 5
CLUSTER_MODES = ("tensor", "pipeline")
_NAME_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def cluster_name(text: str) -> str:
    """A name that goes into `cluster:NAME`, folder names and command lines unquoted."""
    if not text or len(text) > 64 or not set(text) <= _NAME_CHARS:
        raise Refused("A cluster's name must be 1 to 64 letters, digits, _ or -.")
    return text


def cluster_backend(text: str) -> str:
    if text not in CLUSTER_BACKENDS:
        raise Refused("A cluster's backend must be \"ring\" (TCP, any network) or \"jaccl\" "
                      "(RDMA over Thunderbolt 5).")
    return text


def cluster_mode(text: str) -> str:
    if text not in CLUSTER_MODES:
        raise Refused("A cluster's mode must be \"tensor\" (every host holds a slice of every "
                      "layer) or \"pipeline\" (each host holds some of the layers).")
    return text


def cluster_port(text: str, label: str) -> int:
    value = int(_number(text, label, int))
    if not 0 <= value <= 65_535:
        raise Refused(f"{label} must be 0 (a free one) or a port up to 65535.")
    return value


def cluster_host(text: str) -> str:
    """One host as mlx.launch takes it: an IP address or an SSH name, nothing a shell or
    its comma-separated --hosts list would split."""
    if not text or len(text) > 253 or any(c.isspace() or c in ",;'\"`$\\|&<>()" for c in text) \
            or text.startswith("-"):
        raise Refused(f"The host {text!r} is not an IP address or a host name.")
    return text
