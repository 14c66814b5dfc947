"""Every admin route, in one list: the only module that knows all the admin resource families.

``ROUTES`` lists every admin path with its resource class; ``add_routes`` mounts them (an
``AdminNotFound`` answers the rest of /admin), and ``declare_writes`` says, in one table, what each
resource writes, for the guard and the audit log of ``runtime.http.admin.audit``.
"""

from __future__ import annotations

from typing import Any

import falcon

from runtime.db.models import BasicAuthDef, FileChannelRow, Job, PubSubPermission, RestChannel, Subscription, Topic
from runtime.http.admin import (
    audit,
    dashboard_sessions,
    dead_letters,
    definitions,
    file_channels,
    insight,
    jobs,
    permissions,
    pubsub,
    queues,
    services,
    spark,
    topic_matches,
    topic_messages,
    websockets,
)
from runtime.http.admin.audit import DETACHABLE, Managed
from runtime.http.admin.base import ADMIN_PREFIX, AdminParts, AdminResource
from runtime.http.admin.input import MAX_DB_INT
from runtime.http.auth import AdminNotFound
from runtime.pubsub.topics import normalize

#: Every admin route and the resource class serving it, in the order they are mounted (and documented).
ROUTES: tuple[tuple[str, type[AdminResource]], ...] = (
    ('/admin/status', services.StatusResource),
    ('/admin/services', services.ServicesResource),
    ('/admin/services/{name}', services.ServiceResource),
    ('/admin/services/{name}/invoke', services.InvokeResource),
    ('/admin/services/{name}/source', insight.ServiceSourceResource),
    ('/admin/services/{name}/usage', insight.ServiceUsageResource),
    ('/admin/deploy', services.DeployResource),
    ('/admin/deployments', insight.DeploymentsResource),
    ('/admin/workers', insight.WorkersResource),
    ('/admin/stats/rates', insight.RatesResource),
    ('/admin/stats/services', insight.ServiceStatsResource),
    ('/admin/stats/totals', insight.TotalsResource),
    ('/admin/queues/deepest', insight.DeepestQueuesResource),
    ('/admin/jobs', jobs.JobsResource),
    ('/admin/jobs/{name}', jobs.JobResource),
    ('/admin/jobs/{name}/pause', jobs.JobPauseResource),
    ('/admin/jobs/{name}/resume', jobs.JobResumeResource),
    ('/admin/jobs/{name}/run', jobs.JobRunResource),
    ('/admin/jobs/{name}/runs', jobs.JobRunsResource),
    ('/admin/spark/jobs', spark.SparkJobsResource),
    ('/admin/spark/jobs/{job_id}', spark.SparkJobResource),
    ('/admin/spark/jobs/{job_id}/log', spark.SparkJobLogResource),
    ('/admin/spark/jobs/{job_id}/kill', spark.SparkJobKillResource),
    ('/admin/spark/jobs/{job_id}/wait', spark.SparkJobWaitResource),
    ('/admin/spark/pipelines', spark.SparkPipelinesResource),
    ('/admin/security/{name}/permissions', permissions.PermissionsResource),
    ('/admin/topics', pubsub.TopicsResource),
    ('/admin/topics/{name:path}', pubsub.TopicResource),
    ('/admin/topic-messages', topic_messages.TopicMessagesResource),
    ('/admin/topic-messages/{msg_id}', topic_messages.TopicMessageResource),
    ('/admin/subscriptions', pubsub.SubscriptionsResource),
    ('/admin/subscriptions/{sub_id:int}', pubsub.SubscriptionResource),
    ('/admin/subscriptions/{sub_id:int}/pause', pubsub.PauseResource),
    ('/admin/subscriptions/{sub_id:int}/resume', pubsub.ResumeResource),
    ('/admin/publish', pubsub.PublishResource),
    ('/admin/pubsub/websockets', websockets.WebSocketsResource),
    ('/admin/pubsub/topic-matches', topic_matches.TopicMatchesResource),
    ('/admin/queues', queues.QueuesResource),
    ('/admin/queues/{sub_id:int}', queues.QueueResource),
    ('/admin/queues/{sub_id:int}/messages', queues.QueueMessagesResource),
    ('/admin/queues/{sub_id:int}/messages/{msg_id}', queues.QueueMessageResource),
    ('/admin/queues/{sub_id:int}/messages/{msg_id}/dead-letter', queues.QueueMessageDeadLetterResource),
    ('/admin/queues/{sub_id:int}/dead-letters', queues.DeadLettersResource),
    ('/admin/queues/{sub_id:int}/dead-letters/{msg_id}', queues.DeadLetterResource),
    ('/admin/queues/{sub_id:int}/redrive', queues.RedriveResource),
    ('/admin/dead-letters', dead_letters.DeadLettersSearchResource),
    ('/admin/dead-letters/count', dead_letters.DeadLettersCountResource),
    ('/admin/dead-letters/redrive', dead_letters.DeadLettersRedriveResource),
    ('/admin/dead-letters/delete', dead_letters.DeadLettersDeleteResource),
    ('/admin/security', definitions.SecurityDefsResource),
    ('/admin/security/{name}', definitions.SecurityDefResource),
    ('/admin/security/{name}/password', definitions.SecurityPasswordResource),
    ('/admin/channels', definitions.ChannelsResource),
    ('/admin/channels/{name}', definitions.ChannelResource),
    ('/admin/file-channels', file_channels.FileChannelsResource),
    ('/admin/file-channels/{name}', file_channels.FileChannelResource),
    ('/admin/file-channels/{name}/runs', file_channels.FileChannelRunsResource),
    ('/admin/audit', audit.AuditResource),
    ('/admin/dashboard/sessions', dashboard_sessions.DashboardSessionsResource),
    ('/admin/detach', audit.DetachResource),
)


def add_routes(app: falcon.App, parts: AdminParts) -> None:
    """Mount the admin resources, each made with the parts, and AdminNotFound under every other admin path."""
    declare_writes()
    for path, resource_class in ROUTES:
        if not path.startswith(ADMIN_PREFIX + '/') or not issubclass(resource_class, AdminResource):
            raise ValueError(f'admin route {path} must be an AdminResource under {ADMIN_PREFIX}/')
        app.add_route(path, resource_class(parts))
    # Unknown admin paths answer 404 only after the admin credentials, like known ones.
    not_found = AdminNotFound()
    app.add_route(ADMIN_PREFIX, not_found)
    app.add_route(ADMIN_PREFIX + '/{rest:path}', not_found)


def _sub_id(value: Any) -> int:
    number = int(value)
    if not 0 < number <= MAX_DB_INT:
        raise ValueError(value)
    return number


def declare_writes() -> None:
    """What each admin resource writes: the objects the guard and the audit log read, and action names.

    Kept here, in one table beside the routes, so that a reader sees every admin write at once.
    """
    security = Managed('security', BasicAuthDef, 'name', answer='security')
    channel = Managed('channel', RestChannel, 'name', answer='channel')
    topic = Managed('topic', Topic, 'name_key', to_key=normalize)
    subscription = Managed('subscription', Subscription, 'id', param='sub_id', answer='subscription')
    job = Managed('job', Job, 'name', answer='job')
    file_channel = Managed('file_channel', FileChannelRow, 'name', answer='file_channel')
    managed = {
        definitions.SecurityDefsResource: Managed('security', BasicAuthDef, 'name', param=None, answer='security'),
        definitions.SecurityDefResource: security,
        definitions.SecurityPasswordResource: security,
        permissions.PermissionsResource: Managed('permission', PubSubPermission, 'security'),
        definitions.ChannelsResource: Managed('channel', RestChannel, 'name', param=None, answer='channel'),
        definitions.ChannelResource: channel,
        pubsub.TopicsResource: Managed('topic', Topic, 'name_key', param=None, answer='topic', to_key=normalize,
                                             answer_field='name'),
        pubsub.TopicResource: topic,
        pubsub.SubscriptionsResource: Managed('subscription', Subscription, 'id', param=None,
                                                    answer='subscription'),
        pubsub.SubscriptionResource: subscription,
        pubsub.PauseResource: subscription,
        pubsub.ResumeResource: subscription,
        jobs.JobsResource: Managed('job', Job, 'name', param=None, answer='job'),
        jobs.JobResource: job,
        jobs.JobPauseResource: job,
        jobs.JobResumeResource: job,
        jobs.JobRunResource: Managed('job', Job, 'name', changes_object=False),
        file_channels.FileChannelsResource: Managed('file_channel', FileChannelRow, 'name', param=None,
                                                    answer='file_channel'),
        file_channels.FileChannelResource: file_channel,
    }
    for cls, what in managed.items():
        cls.managed = what
    DETACHABLE.update({'security': security, 'channel': channel, 'topic': topic,
                       'subscription': Managed('subscription', Subscription, 'id', param='sub_id', to_key=_sub_id),
                       'permission': Managed('permission', PubSubPermission, 'security'), 'job': job,
                       'file_channel': file_channel})
    actions = {
        definitions.SecurityPasswordResource: 'password', pubsub.PauseResource: 'pause',
        pubsub.ResumeResource: 'resume', jobs.JobPauseResource: 'pause',
        jobs.JobResumeResource: 'resume', jobs.JobRunResource: 'run',
        services.ServiceResource: 'undeploy', services.InvokeResource: 'invoke', services.DeployResource: 'deploy',
        pubsub.PublishResource: 'publish', queues.RedriveResource: 'redrive',
        queues.QueueMessageDeadLetterResource: 'dead-letter', dead_letters.DeadLettersRedriveResource: 'redrive',
        dead_letters.DeadLettersDeleteResource: 'delete',
        spark.SparkJobsResource: 'submit', spark.SparkJobKillResource: 'kill',
        dashboard_sessions.DashboardSessionsResource: 'end-sessions',
    }
    for cls, action in actions.items():
        cls.audit_action = action
    spark.SparkJobWaitResource.audited = False
    dead_letters.DeadLettersCountResource.audited = False  # a read: POST only to carry the bulk actions' body
