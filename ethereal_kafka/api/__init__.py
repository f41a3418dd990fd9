"""The DataStream API: describe a topic-to-topic job in Flink's terms; nothing here runs.

from ethereal_kafka.api import StreamExecutionEnvironment, TumblingEventTimeWindows, WatermarkStrategy, Time

def build(env: StreamExecutionEnvironment) -> None:
    (env.from_source("words")
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_bounded_out_of_orderness(Time.seconds(5)))
        .key_by("word")
        .window(TumblingEventTimeWindows.of(Time.seconds(10)))
        .count()
        .sink_to("counts"))
"""

from ethereal_kafka.api.datastream import (
    BroadcastConnectedStream,
    BroadcastStream,
    ConnectedStreams,
    DataStream,
    KeyedStream,
    WindowedStream,
)
from ethereal_kafka.api.environment import StreamExecutionEnvironment
from ethereal_kafka.api.errors import GraphError
from ethereal_kafka.api.functions import (
    AggregateFunction,
    BroadcastContext,
    BroadcastProcessFunction,
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedBroadcastProcessFunction,
    KeyedContext,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    MapFunction,
    ProcessWindowFunction,
    ReadOnlyBroadcastContext,
    ReduceFunction,
    RuntimeContext,
    TimerService,
    WindowContext,
)
from ethereal_kafka.api.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    StateTtlConfig,
    ValueState,
    ValueStateDescriptor,
)
from ethereal_kafka.api.tags import OutputTag
from ethereal_kafka.api.time import Duration, Time
from ethereal_kafka.api.watermarks import WatermarkStrategy
from ethereal_kafka.api.windows import (
    ContinuousEventTimeTrigger,
    CountTrigger,
    CountWindows,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindows,
    PurgingTrigger,
    SlidingEventTimeWindows,
    TimeWindow,
    Trigger,
    TumblingEventTimeWindows,
    WindowAssigner,
)

__all__ = [
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "BroadcastConnectedStream",
    "BroadcastContext",
    "BroadcastProcessFunction",
    "BroadcastStream",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "ConnectedStreams",
    "ContinuousEventTimeTrigger",
    "CountTrigger",
    "CountWindows",
    "DataStream",
    "Duration",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "FilterFunction",
    "FlatMapFunction",
    "GlobalWindows",
    "GraphError",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedContext",
    "KeyedProcessFunction",
    "KeyedStream",
    "ListState",
    "ListStateDescriptor",
    "MapFunction",
    "MapState",
    "MapStateDescriptor",
    "OutputTag",
    "ProcessWindowFunction",
    "PurgingTrigger",
    "ReadOnlyBroadcastContext",
    "ReduceFunction",
    "RuntimeContext",
    "SlidingEventTimeWindows",
    "StateTtlConfig",
    "StreamExecutionEnvironment",
    "Time",
    "TimeWindow",
    "TimerService",
    "Trigger",
    "TumblingEventTimeWindows",
    "ValueState",
    "ValueStateDescriptor",
    "WatermarkStrategy",
    "WindowAssigner",
    "WindowContext",
    "WindowedStream",
]
