"""The exactly-once protocol, in one package (docs/exactly-once.md maps onto these modules).

Along an epoch's flow:

- `names` — the ids, topics and groups the protocol derives from the app, query, task and source names.
- `markers` — epoch markers, replay markers and the owner claim (the metadata of committed offsets).
- `committed` — the one way offsets and their markers are read from Kafka (stable reads that fail closed), and the
  views of where an app stands (`ethereal-kafka offsets`).
- `ownership` — one running instance per app: the run lock, the owner claim, its heartbeat and takeover.
- `startup` — checks before any query starts: recovery, transaction timeout, progress topic, fencing the id pool;
  `layout` — a shuffling query's write layout, fixed for its checkpoint's life.
- `coordinator` — one run's hold on the protocol: start-up, phase two, the epoch history.
- `epoch_writer` — each epoch's write (`foreachBatch`): `task_plan` (what a sink task needs), `partitioning` (how
  rows reach sink tasks), `phase_one` (a sink task's transaction), `phase_two` (the epoch commit); `chained` (a
  chained query's read tasks as its sink tasks, `plan.chaining`).
- `dead_letters` — poison records committed with their epoch; `source` — the Kafka source as the runner registers
  it, handing those dead letters to the protocol.
- `gate` — epochs stop between, never inside, a write; `replay` — reprocessing from an explicit position.
- `errors` — the protocol's errors.

Kafka I/O itself (clients, range reads, decoding, encoding) is in `connectors.kafka`; the Spark checkpoint and the
epoch history are in `checkpoint`.
"""
