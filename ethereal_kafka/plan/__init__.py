"""Turns the job graph into Spark plans and classifies them for the exactly-once protocol."""
