"""The cluster: keeping workers in step with the database, the worker registry, one server per configuration.
"""
