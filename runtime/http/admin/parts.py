"""What the admin API works with: the collaborators its resources and its write middleware are given.

``AdminParts`` names each of them; ``runtime.http.admin.routes`` hands it to every resource, and
each family keeps only what it uses. No admin module sees the runtime as a whole: the composition
root (``runtime.core``) builds the parts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from runtime.channels.admin import ChannelAdmin
    from runtime.cluster.sync import Synchronizer
    from runtime.config import Settings
    from runtime.deploy.history import DeployHistory
    from runtime.deploy.hot_deploy import HotDeployer
    from runtime.files.admin import FileChannelAdmin
    from runtime.insight.overview import Insight
    from runtime.observability.audit import AuditLog
    from runtime.pubsub.broker import Broker
    from runtime.pubsub.catalog import Catalog
    from runtime.pubsub.permission_admin import PermissionAdmin
    from runtime.pubsub.queue_admin import QueueAdmin
    from runtime.pubsub.subscription_admin import SubscriptionAdmin
    from runtime.pubsub.topic_admin import TopicAdmin
    from runtime.scheduler import JobAdmin, Scheduler
    from runtime.security.admin import SecurityAdmin
    from runtime.security.basic_auth import SecurityRegistry
    from runtime.security.dashboard_sessions import SessionStore
    from runtime.service.invoke import Invoker
    from runtime.service.store import ServiceStore
    from runtime.spark.admin import SparkJobAdmin
    from runtime.spark.manager import SparkManager


@dataclass(frozen=True)
class AdminParts:
    """The collaborators of the admin API, each named for what the resources use it for."""

    settings: Settings
    #: The database backend's name, as /admin/status shows it.
    database: str
    #: The service names recorded as deployed (through the admin API or by another server).
    recorded_services: Callable[[], set[str]]
    #: Creates topics; subscribes, unsubscribes, pauses and resumes subscriptions.
    catalog: Catalog
    #: Publishes on behalf of an endpoint and resolves a publication's target topic.
    broker: Broker
    #: Finds, creates, changes and deletes topics.
    topic_admin: TopicAdmin
    #: Finds, changes and deletes subscriptions (subscribing, pausing and resuming are the catalog's).
    subscription_admin: SubscriptionAdmin
    queue_admin: QueueAdmin
    #: Reads and changes the pub/sub permissions of security definitions.
    permission_admin: PermissionAdmin
    #: Reads and changes the Basic Auth security definitions.
    security_admin: SecurityAdmin
    #: Reads and changes the REST channels; tells who names a service.
    channel_admin: ChannelAdmin
    #: Reads and changes the inbound file-transfer channels; reads their run history.
    file_channel_admin: FileChannelAdmin
    #: The services deployed in this worker.
    store: ServiceStore
    invoker: Invoker
    hot_deployer: HotDeployer
    #: Runs a job now, in this worker.
    scheduler: Scheduler
    #: Reads and changes the scheduler's jobs; reads their run history.
    job_admin: JobAdmin
    #: Submits a Spark job and waits for one, in this worker.
    spark: SparkManager
    #: Reads and kills the Spark jobs of the cluster; lists the pipelines.
    spark_admin: SparkJobAdmin
    #: This worker's copy of the security definitions.
    security: SecurityRegistry
    #: The audit log, and the stored objects it snapshots.
    audit: AuditLog
    #: Reloads a sync key's objects in this worker at once, after a change.
    synchronizer: Synchronizer
    #: The last publications of a topic this worker saw (some may be delivered and swept since), by topic id.
    recent_publications: Callable[[int], list[dict[str, Any]]]
    #: How many REST channels this worker serves (a reload replaces its router).
    channel_count: Callable[[], int]
    #: Whether the server runs the demo.
    demo: bool
    #: Workers, statistics, totals, deepest queues and who uses a service (None: not available).
    insight: Insight | None = None
    #: The deployment history and the sources of deployed services (None: not available).
    deploy_history: DeployHistory | None = None
    #: The dashboard's sessions, to list and end them (None: not available).
    dashboard_sessions: SessionStore | None = None
