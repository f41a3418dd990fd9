"""Job lifecycle: the SparkSession, running a job, signals and metrics."""
