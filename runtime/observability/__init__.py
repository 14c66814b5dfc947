"""Observability: Prometheus metrics (per worker, added up per server), the log line format, the audit log.
"""
