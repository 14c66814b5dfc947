"""Security: Basic Auth definitions and their administration, the admin and viewer credentials,
secret references, dashboard sessions and which user names a definition may take.
"""
