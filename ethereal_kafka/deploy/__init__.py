"""Deployment entry points: `spark_submit.py` is the file spark-submit runs (`ethereal-kafka run` on a cluster)."""
