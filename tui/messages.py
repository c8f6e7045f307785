"""Messages the live worker and the panes exchange: small dataclasses, posted, never shared state."""

from __future__ import annotations

from dataclasses import dataclass, field

from textual.message import Message


# Message.__init__ calls __post_init__, so dataclass messages need nothing more.
_Msg = Message


@dataclass
class RunsUpdated(_Msg):
    runs: list[dict]
    stalled: set[str] = field(default_factory=set)
    sparks: dict[str, list[float]] = field(default_factory=dict)   # run_id -> recent reward/mean values
    stall_after_s: float = 0.0     # the threshold core.runs used (for the header's wording)


@dataclass
class RunSampled(_Msg):
    """get_run() of the selected run: processes with cpu/rss/health."""
    run_id: str
    run: dict


@dataclass
class MetricsUpdated(_Msg):
    run_id: str
    rows: list[dict]


@dataclass
class LogsGrew(_Msg):
    """Some of the selected run's logs grew (or were rotated); the views re-read only what is visible."""
    run_id: str
    names: tuple[str, ...]


@dataclass
class EnvironmentsChanged(_Msg):
    environments: list


@dataclass
class RunSelected(_Msg):
    run_id: str | None


@dataclass
class EnvironmentSelected(_Msg):
    name: str | None


@dataclass
class ConfigLoaded(_Msg):
    environment: str
    view: object | None
    error: str | None = None


@dataclass
class InferenceResult(_Msg):
    """One model's result (or progress line) from a test-inference call."""
    model: str
    result: dict
    done: bool = False


@dataclass
class LiveBatch(_Msg):
    """Everything one cycle of the live worker found, delivered together so it costs one frame."""
    updates: list
