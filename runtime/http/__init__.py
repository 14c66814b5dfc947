"""The HTTP layer: a falcon WSGI app over one runtime (channels, admin API, health)."""

from runtime.http.app import make_app

__all__ = ['make_app']
