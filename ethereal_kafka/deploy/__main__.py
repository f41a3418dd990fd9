"""`python -m ethereal_kafka.deploy`: print the path of the script to give spark-submit (`spark_submit.py`)."""

from pathlib import Path

print(Path(__file__).with_name("spark_submit.py").resolve())
