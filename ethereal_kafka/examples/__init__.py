"""Runnable example pipelines (named by `pipeline=module:function` in job files)."""
