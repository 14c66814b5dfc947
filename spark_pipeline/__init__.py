"""Conduit's PySpark pipelines: one module per pipeline, each with ``main(args)``.

A ``SparkService`` (or ``conduit spark submit``) runs a pipeline with spark-submit; its
``main(args)`` gets the argument strings and may return a small JSON-able summary, which the
job's event carries as ``result`` (an ``output`` key there names where the results went).
Modules whose names start with ``_`` are helpers, not pipelines.
"""
