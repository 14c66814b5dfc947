"""The dashboard's pub/sub pages: topics, a topic, queues, a queue, and dead letters across subscriptions.

Each page is a server-rendered shell; its script reads and changes everything through the API
mirror (``/dashboard/api/...``, the admin API's own resources), so these pages own no queries: the
shell carries only what names the object (a topic's name, a subscription's id) in ``data-*``
attributes, and whether the user may change anything.
"""

from __future__ import annotations

from typing import Any

import falcon

from runtime.http.dashboard.page import DashboardPage
from runtime.http.dashboard.static import register_static


class TopicsPage(DashboardPage):
    """/dashboard/topics: topics with depth, last publication and subscriber count; searchable and paged."""

    template = 'topics.html'
    title = 'Topics'
    nav = 'topics'
    scripts = ('pubsub.js', 'topics.js')


class TopicPage(DashboardPage):
    """/dashboard/topics/{name}: attributes, last messages, subscriptions, messages waiting, publish."""

    template = 'topic.html'
    title = 'Topic'
    nav = 'topics'
    scripts = ('pubsub.js', 'topic.js')

    def context(self, req: falcon.Request, **params: Any) -> dict[str, Any]:
        topic = self.parts.admin.topic_admin.get(params['name'])  # TopicNotFound: a 404 page naming it
        return {'topic_name': topic.name, 'title': f'Topic {topic.name}'}


class QueuesPage(DashboardPage):
    """/dashboard/queues: every subscription's queue with depth, oldest message and dead letters; paged."""

    template = 'queues.html'
    title = 'Queues'
    nav = 'queues'
    scripts = ('pubsub.js', 'queues.js')


class QueuePage(DashboardPage):
    """/dashboard/queues/{sub_id}: a queue page by page; open, edit, delete, dead-letter messages; purge."""

    template = 'queue.html'
    title = 'Queue'
    nav = 'queues'
    scripts = ('pubsub.js', 'queue.js')

    def context(self, req: falcon.Request, **params: Any) -> dict[str, Any]:
        sub = self.parts.admin.subscription_admin.get(params['sub_id'])  # a 404 page naming it
        return {'sub_id': sub.id, 'title': f'Queue of subscription #{sub.id} ({sub.pattern})'}


class DeadLettersPage(DashboardPage):
    """/dashboard/dead-letters: filter, inspect, edit and re-drive one; re-drive or delete all that match."""

    template = 'dead_letters.html'
    title = 'Dead letters'
    nav = 'dead-letters'
    scripts = ('pubsub.js', 'dead_letters.js')


for _name in ('pubsub.css', 'pubsub.js', 'topics.js', 'topic.js', 'queues.js', 'queue.js', 'dead_letters.js'):
    register_static(_name)
