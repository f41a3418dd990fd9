"""One readable line out of Spark's nested failure reports."""

from __future__ import annotations

from ethereal_kafka.eos.errors import TransactionError
from ethereal_kafka.runtime.failure import MAX_CHARS, cause_in_text, root_cause

STREAM_FAILED = """[STREAM_FAILED] Query [id = 3326, runId = 9f7a] terminated with exception: [FOREACH_BATCH_USER_FUNCTION_ERROR] An error occurred in the user provided function in foreach batch sink. Reason: An exception was raised by the Python Proxy. Return Message: Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/py4j/clientserver.py", line 644, in _call_proxy
    return_value = getattr(self.pool[obj_id], method)(*params)
  File "/work/ethereal_kafka/checkpoint/coordinator.py", line 451, in _exactly_once
    rows = frame.mapInArrow(lambda it: write_task(plan, it), RESULT_SCHEMA).collect()
  File "/venv/lib/python3.11/site-packages/pyspark/errors/exceptions/captured.py", line 262, in deco
    raise converted from None
pyspark.errors.exceptions.captured.SparkRuntimeException: [USER_RAISED_EXCEPTION] amount out of range SQLSTATE: P0001
 SQLSTATE: 39000 SQLSTATE: XXKST
=== Streaming Query ===
Identifier: job-out [id = 3326, runId = 9f7a]
Current Committed Offsets: {}
"""

TASK_FAILED = """Job aborted due to stage failure: Task 0 in stage 1.0 failed 4 times, most recent failure: Lost task 0.3 in stage 1.0 (TID 7) (127.0.0.1 executor 1): org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/work/ethereal_kafka/checkpoint/txn_task.py", line 120, in write_task
    commit()
ethereal_kafka.checkpoint.errors.TransactionError: sink out task 1: commit failed after 5 attempts: Broker: Coordinator not available
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:600)
"""

JVM_ONLY = """[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: Error while writing offsets
\tat org.apache.spark.sql.execution.streaming.HDFSMetadataLog.add(HDFSMetadataLog.scala:180)
Caused by: java.io.IOException: No space left on device
\tat java.base/java.io.FileOutputStream.writeBytes(Native Method)
"""

# Py4J's form: its own line, then the JVM exception after ": " (an epoch interrupted when its query was stopped).
PY4J_INTERRUPTED = """An error occurred while calling o1596.collectToPython.
: java.lang.InterruptedException
\tat java.base/java.util.concurrent.locks.AbstractQueuedSynchronizer.acquireSharedInterruptibly(Unknown Source)
\tat org.apache.spark.sql.Dataset.collectToPython(Dataset.scala:4141)
"""


def test_the_innermost_python_error_of_a_streaming_failure() -> None:
    assert (
        cause_in_text(STREAM_FAILED) == "SparkRuntimeException: [USER_RAISED_EXCEPTION] amount out of range"
    )


def test_an_executor_traceback_inside_a_stage_failure() -> None:
    assert cause_in_text(TASK_FAILED) == (
        "TransactionError: sink out task 1: commit failed after 5 attempts: Broker: Coordinator not available"
    )


def test_a_jvm_cause_chain() -> None:
    assert cause_in_text(JVM_ONLY) == "IOException: No space left on device"


def test_a_py4j_call_error_names_the_jvm_exception_not_the_call() -> None:
    assert cause_in_text(PY4J_INTERRUPTED) == "InterruptedException"


def test_plain_text_falls_back_to_its_first_line_without_spark_prefixes() -> None:
    assert (
        cause_in_text("[STREAM_FAILED] Query [id = 1, runId = 2] terminated with exception: boom\nmore")
        == "boom"
    )


def test_framework_errors_are_their_own_message_and_chains_are_followed() -> None:
    assert root_cause(TransactionError("commit failed\nsecond line")) == "commit failed"
    try:
        try:
            raise KeyError("x")
        except KeyError as exc:
            raise RuntimeError("outer") from exc
    except RuntimeError as outer:
        assert root_cause(outer) == "KeyError: 'x'"


def test_one_line_and_bounded() -> None:
    line = root_cause(ValueError("a\n" + "b" * 5000))
    assert "\n" not in line and len(line) <= MAX_CHARS


USER_CODE_FAILED = """Job aborted due to stage failure: Task 0 in stage 3.0 failed 1 times, most recent failure: Lost task 0.0 in stage 3.0 (TID 9) (127.0.0.1 executor driver): org.apache.spark.api.python.PythonException: Traceback (most recent call last):
  File "/jobs/fraud.py", line 57, in detect
    return amount / count
ZeroDivisionError: division by zero

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/venv/lib/python3.11/site-packages/ethereal_kafka/plan/pyfuncs.py", line 130, in _apply
ethereal_kafka.plan.errors.UserFunctionError: operator 'detect-fraud' (uid fraud-1) at fraud.py:57: ZeroDivisionError: division by zero; element from topic tx partition 0 offset 12
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.handlePythonException(PythonRunner.scala:600)
"""


def test_a_user_code_error_is_its_own_line() -> None:
    """Issue 24, item 7: the line names the operator, the user's file:line, the exception and the record."""
    assert cause_in_text(USER_CODE_FAILED) == (
        "operator 'detect-fraud' (uid fraud-1) at fraud.py:57: ZeroDivisionError: division by zero; element from "
        "topic tx partition 0 offset 12"
    )
