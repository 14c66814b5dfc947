"""The former home of ``runtime.pubsub.queue_admin``'s statements, for the importers that still name it.

Only ``runtime.metrics`` does; once it imports ``runtime.pubsub.queue_admin``, this module goes.
"""

from runtime.pubsub.queue_admin import iso, queue_stats, topic_depths

__all__ = ['iso', 'queue_stats', 'topic_depths']
