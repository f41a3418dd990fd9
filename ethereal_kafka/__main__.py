"""`python -m ethereal_kafka`: the same as the `ethereal-kafka` console script."""

import sys

from ethereal_kafka.cli import main

sys.exit(main())
