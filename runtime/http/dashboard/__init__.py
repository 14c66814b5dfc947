"""The web dashboard at /dashboard/: server-rendered pages over the admin API, mirrored at /dashboard/api.

``routes.add_routes`` mounts it; ``gate.SessionGate`` checks every request of a resource whose
``auth`` is ``DASHBOARD``; ``page.DashboardPage`` is the base of every page.
"""
