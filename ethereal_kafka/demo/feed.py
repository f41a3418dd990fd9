"""Create the demo job's topics and feed its input on a broker that already runs (the Docker compose `feed` service).

    python -m ethereal_kafka.demo.feed --bootstrap kafka:9092 --records 2000

The job file is the one the package ships (`demo_job_file()`), read with this process's environment, so the topic
names are the ones `ethereal-kafka run` of that file uses (`DEMO_INPUT_TOPIC`, ... override them). Topics that
exist already are kept; the orders are produced on every call (a second `up` feeds the job again).
"""

from __future__ import annotations

import argparse
import os
import sys

from ethereal_kafka.config import load_job
from ethereal_kafka.connectors.kafka.topics import produce
from ethereal_kafka.demo import create_demo_topics, demo_job_file, demo_orders, demo_topics
from ethereal_kafka.errors import EtherealKafkaError


def main(argv: list[str] | None = None) -> int:
    """Create the topics, produce `--records` demo orders; one `error:` line and exit 1 on failure."""
    parser = argparse.ArgumentParser(
        prog="python -m ethereal_kafka.demo.feed",
        description="create the demo topics and feed the demo input",
    )
    parser.add_argument("--bootstrap", default=os.environ.get("ETHEREAL_KAFKA_BOOTSTRAP", "127.0.0.1:9092"))
    parser.add_argument("--records", type=int, default=2000, help="orders to produce into the input topic")
    args = parser.parse_args(argv)
    os.environ["ETHEREAL_KAFKA_BOOTSTRAP"] = args.bootstrap
    try:
        loaded = load_job(demo_job_file())
        created = create_demo_topics(args.bootstrap, loaded)
        source = demo_topics(loaded)[0]
        count = produce(args.bootstrap, source, demo_orders(args.records))
    except EtherealKafkaError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"created topics: {', '.join(created) or 'none (all existed)'}")
    print(f"fed {count} orders into {source} at {args.bootstrap}")
    return 0


if __name__ == "__main__":  # pragma: no cover - run as a module
    sys.exit(main())
