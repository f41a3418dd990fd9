"""User-function interfaces of the DataStream API.

Elements are dicts of field name to value (Spark types become Python values: `long` → int, `timestamp` →
`datetime` in UTC, `binary` → bytes). Every function may also be given as a plain callable where an interface
has a single method. Functions are pickled and run on executors: they must be importable (defined in a module,
not in `__main__` of a script run by spark-submit) and deterministic — processing time, randomness or external
lookups break byte-identical replay.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

# Re-exported: the aggregate interface lives with no dependency on state (which refers to it).
from ethereal_kafka.api.aggregate import ACC, AggregateFunction, Element  # noqa: F401

if TYPE_CHECKING:
    from ethereal_kafka.api.state import (
        AggregatingState,
        AggregatingStateDescriptor,
        ListState,
        ListStateDescriptor,
        MapState,
        MapStateDescriptor,
        ValueState,
        ValueStateDescriptor,
    )
    from ethereal_kafka.api.tags import OutputTag
    from ethereal_kafka.api.windows import TimeWindow


class MapFunction(ABC):
    """One element in, one element out."""

    @abstractmethod
    def map(self, value: Element) -> Element:
        """Called once per element, on an executor."""


class FilterFunction(ABC):
    """Keep the elements for which `filter` is true."""

    @abstractmethod
    def filter(self, value: Element) -> bool:
        """Called once per element, on an executor."""


class FlatMapFunction(ABC):
    """One element in, zero or more out."""

    @abstractmethod
    def flat_map(self, value: Element) -> Iterable[Element]:
        """Called once per element, on an executor; yields or returns the output elements."""


class ReduceFunction(ABC):
    """Combine two elements of a key (or window) into one of the same type."""

    @abstractmethod
    def reduce(self, a: Element, b: Element) -> Element:
        """`a` is the running result, `b` the new element (in event-time order within an epoch)."""


class WindowContext:
    """What a `ProcessWindowFunction` knows about the window it is called for."""

    def __init__(self, window: TimeWindow, watermark: int, late_firing: bool) -> None:
        self.window = window
        self._watermark = watermark
        self.late_firing = late_firing

    def current_watermark(self) -> int:
        """The watermark of the epoch in which the window fires."""
        return self._watermark


class ProcessWindowFunction(ABC):
    """Called with all elements of a window when it fires (elements are buffered in state until then)."""

    @abstractmethod
    def process(self, key: Any, context: WindowContext, elements: list[Element]) -> Iterable[Element]:
        """Yield the window's output elements; `elements` are in event-time order."""


class TimerService:
    """Time and timers of a keyed process function (see `KeyedProcessFunction`)."""

    def current_watermark(self) -> int:
        """The watermark of the current epoch (epoch ms; `-1`/0 before any)."""
        raise NotImplementedError

    def current_processing_time(self) -> int:
        """The epoch's processing time (the batch timestamp Spark logged for it: stable when the epoch is replayed)."""
        raise NotImplementedError

    def register_event_time_timer(self, timestamp: int) -> None:
        """Call `on_timer` once the watermark reaches `timestamp` (one timer per key and time)."""
        raise NotImplementedError

    def register_processing_time_timer(self, timestamp: int) -> None:
        """Call `on_timer` once processing time reaches `timestamp`."""
        raise NotImplementedError

    def delete_event_time_timer(self, timestamp: int) -> None:
        """Remove a registered event-time timer (no error if absent)."""
        raise NotImplementedError

    def delete_processing_time_timer(self, timestamp: int) -> None:
        """Remove a registered processing-time timer (no error if absent)."""
        raise NotImplementedError


class KeyedContext:
    """The context handed to `process_element` and `on_timer`."""

    def get_current_key(self) -> Any:
        """The key of the element or timer."""
        raise NotImplementedError

    def timestamp(self) -> int | None:
        """The element's event time (epoch ms), or the firing timer's time in `on_timer`."""
        raise NotImplementedError

    def timer_service(self) -> TimerService:
        """Timers and time."""
        raise NotImplementedError

    def output(self, tag: OutputTag, value: Element) -> None:
        """Emit `value` to the side output `tag` (declared in `process(..., side_outputs=[tag])`)."""
        raise NotImplementedError


class RuntimeContext:
    """Access to keyed state, given to `KeyedProcessFunction.open`."""

    def get_state(self, descriptor: ValueStateDescriptor) -> ValueState:
        """A single value per key."""
        raise NotImplementedError

    def get_list_state(self, descriptor: ListStateDescriptor) -> ListState:
        """A list per key."""
        raise NotImplementedError

    def get_map_state(self, descriptor: MapStateDescriptor) -> MapState:
        """A map per key."""
        raise NotImplementedError

    def get_aggregating_state(self, descriptor: AggregatingStateDescriptor) -> AggregatingState:
        """An `AggregateFunction` accumulator per key."""
        raise NotImplementedError


class KeyedProcessFunction(ABC):
    """Low-level keyed processing with state and timers (Flink's KeyedProcessFunction).

    Lifecycle: `open(runtime_context)` once per executor-side instance, before any element (declare state there);
    `process_element` for every element of a key, in event-time order within an epoch; `on_timer` when a timer
    fires (after the epoch's elements of that key). Outputs are yielded (or returned as a list).
    """

    def open(self, runtime_context: RuntimeContext) -> None:  # noqa: B027 - optional hook
        """Declare state here."""

    @abstractmethod
    def process_element(self, value: Element, ctx: KeyedContext) -> Iterable[Element] | None:
        """Handle one element."""

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> Iterable[Element] | None:
        """Handle a timer registered for the current key."""
        return None


class CoMapFunction(ABC):
    """One element in, one element out, on two connected streams (Flink's CoMapFunction): `map1` for the first
    stream's elements, `map2` for the second's. Both must return elements of the same output type."""

    @abstractmethod
    def map1(self, value: Element) -> Element:
        """Called once per element of the first stream, on an executor."""

    @abstractmethod
    def map2(self, value: Element) -> Element:
        """Called once per element of the second stream, on an executor."""


class CoFlatMapFunction(ABC):
    """Zero or more elements out per element in, on two connected streams (Flink's CoFlatMapFunction)."""

    @abstractmethod
    def flat_map1(self, value: Element) -> Iterable[Element]:
        """Called once per element of the first stream; yields or returns the output elements."""

    @abstractmethod
    def flat_map2(self, value: Element) -> Iterable[Element]:
        """Called once per element of the second stream; yields or returns the output elements."""


class KeyedCoProcessFunction(ABC):
    """Low-level processing of two keyed streams connected on the same key (Flink's KeyedCoProcessFunction): both
    inputs share the key's state and timers (the machinery of `KeyedProcessFunction`).

    Lifecycle: `open(runtime_context)` once per executor-side instance (declare state there); per key and epoch,
    `process_element1` for the first stream's elements and `process_element2` for the second's, interleaved in the
    connected order (event time, then input — the first before the second —, then source partition and offset:
    a function of the offsets, so a replayed epoch sees the same interleaving); `on_timer` when a timer fires.
    Outputs are yielded (or returned as a list).
    """

    def open(self, runtime_context: RuntimeContext) -> None:  # noqa: B027 - optional hook
        """Declare state here."""

    @abstractmethod
    def process_element1(self, value: Element, ctx: KeyedContext) -> Iterable[Element] | None:
        """Handle one element of the first stream."""

    @abstractmethod
    def process_element2(self, value: Element, ctx: KeyedContext) -> Iterable[Element] | None:
        """Handle one element of the second stream."""

    def on_timer(self, timestamp: int, ctx: KeyedContext) -> Iterable[Element] | None:
        """Handle a timer registered for the current key (by either input)."""
        return None


class CoProcessFunction(ABC):
    """Low-level processing of two connected streams that are not keyed (Flink's CoProcessFunction):
    `process_element1` for the first stream's elements, `process_element2` for the second's, with the element's
    time (`ctx.timestamp()`) and side outputs (`ctx.output`). No keyed state and no timers (`ctx.timer_service()`
    raises, as Flink's does on a non-keyed stream): key both inputs and use a `KeyedCoProcessFunction` for those.
    Within an epoch the two inputs meet in the connected order, as in `KeyedCoProcessFunction`.
    """

    @abstractmethod
    def process_element1(self, value: Element, ctx: KeyedContext) -> Iterable[Element] | None:
        """Handle one element of the first stream (`ctx.get_current_key()` is None)."""

    @abstractmethod
    def process_element2(self, value: Element, ctx: KeyedContext) -> Iterable[Element] | None:
        """Handle one element of the second stream."""


class ReadOnlyBroadcastContext(KeyedContext):
    """The context handed to `process_element` (and `on_timer`) of a broadcast process function: the element's
    time (the timer's in `on_timer`), the key's timers (`timer_service()`: keyed functions that define `on_timer`),
    side outputs, and the broadcast state read-only."""

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> MapState:
        """The broadcast state `descriptor` names, as of this element (reads only: a write raises
        `BroadcastStateError`)."""
        raise NotImplementedError


class BroadcastContext:
    """The context handed to `process_broadcast_element`: the broadcast state (writable), every key's keyed state
    (`apply_to_keyed_state`), the element's time and side outputs."""

    def get_broadcast_state(self, descriptor: MapStateDescriptor) -> MapState:
        """The broadcast state `descriptor` names (one of those given to `broadcast(...)`)."""
        raise NotImplementedError

    def apply_to_keyed_state(self, descriptor: Any, function: Any) -> None:
        """Call `function(key, state)` for every key that has been seen, with its state `descriptor` names
        (declared in `open`), in a deterministic order (keyed broadcast functions only)."""
        raise NotImplementedError

    def timestamp(self) -> int | None:
        """The broadcast element's event time (epoch ms), or None."""
        raise NotImplementedError

    def current_watermark(self) -> int:
        """The watermark of the current epoch."""
        raise NotImplementedError

    def output(self, tag: OutputTag, value: Element) -> None:
        """Emit `value` to the side output `tag`."""
        raise NotImplementedError


class KeyedBroadcastProcessFunction(ABC):
    """A keyed stream connected with a broadcast stream (Flink's KeyedBroadcastProcessFunction): every key sees the
    same broadcast state, which only `process_broadcast_element` changes; `process_element` reads it and has keyed
    state.

    Lifecycle: `open(runtime_context)` once per executor-side instance (declare keyed state there); then, per
    epoch, the elements of both inputs in the connected order (event time, then the keyed input before the
    broadcast one, then partition and offset): `process_element` for a keyed element, `process_broadcast_element`
    for a broadcast element — which, with every element of the broadcast input, sees and updates the same
    broadcast state. What `process_broadcast_element` yields is emitted once (not once per parallel instance as in
    Flink). `on_timer` when a timer a key registered (`ctx.timer_service()` in `process_element` or `on_timer`)
    fires, interleaved with the elements as in `KeyedProcessFunction`; it has the key's state and reads the
    broadcast state.
    """

    def open(self, runtime_context: RuntimeContext) -> None:  # noqa: B027 - optional hook
        """Declare keyed state here."""

    @abstractmethod
    def process_element(self, value: Element, ctx: ReadOnlyBroadcastContext) -> Iterable[Element] | None:
        """Handle one element of the keyed input."""

    @abstractmethod
    def process_broadcast_element(self, value: Element, ctx: BroadcastContext) -> Iterable[Element] | None:
        """Handle one element of the broadcast input."""

    def on_timer(self, timestamp: int, ctx: ReadOnlyBroadcastContext) -> Iterable[Element] | None:
        """Handle a timer registered for the current key (a function that does not override this has no
        timers)."""
        return None


class BroadcastProcessFunction(ABC):
    """A (non-keyed) stream connected with a broadcast stream (Flink's BroadcastProcessFunction): as
    `KeyedBroadcastProcessFunction` without keyed state (`ctx.get_current_key()` is None)."""

    @abstractmethod
    def process_element(self, value: Element, ctx: ReadOnlyBroadcastContext) -> Iterable[Element] | None:
        """Handle one element of the non-broadcast input."""

    @abstractmethod
    def process_broadcast_element(self, value: Element, ctx: BroadcastContext) -> Iterable[Element] | None:
        """Handle one element of the broadcast input."""
