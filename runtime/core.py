"""One runtime instance: what a gunicorn worker (a "server" in Zato's terms) runs.

``Runtime`` is the composition root: it builds every part (service store, invoker, hot deployer,
broker, metrics, scheduler, Spark jobs, file transfer, ...) with the collaborators that part needs, passed to its
constructor, and owns the in-memory copies of channels and security definitions and the background
greenlets that keep them current (hot-deploy watcher, object-file watcher, sync poller). No part
receives the runtime, and nothing but the server, the CLI and the test kit imports this module.
Where two parts need each other, the root passes a small callable rather than the part. The falcon
app (``runtime.http``) is built over the parts by ``Runtime.make_app``.

Lifecycle (as Nameko's extensions): ``start()`` once, ``stop()`` once; ``stop`` never raises.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gevent
from sqlalchemy import Engine, select

from runtime.channels.admin import ChannelAdmin
from runtime.channels.objects import section_handler as channels_section
from runtime.channels.rest import Channel, ChannelRouter, parse_methods
from runtime.cluster.sync import Synchronizer, one_reload_at_a_time
from runtime.cluster.workers import WorkerIdentity, WorkerRegistry
from runtime.config import Settings
from runtime.db.engine import database_answers, make_engine, make_psycopg_cooperative
from runtime.db.migrate import upgrade
from runtime.db.models import BasicAuthDef, RestChannel
from runtime.deploy.history import DeployHistory
from runtime.deploy.hot_deploy import SYNC_KEY as DEPLOYMENTS_KEY
from runtime.deploy.hot_deploy import HotDeployer, services_directories
from runtime.errors import ConfigError
from runtime.files.admin import FileChannelAdmin
from runtime.files.claims import owner_of as claim_owner
from runtime.files.definition import FILE_CHANNELS_KEY
from runtime.files.manager import FileTransfer
from runtime.files.objects import section_handler as file_channel_section
from runtime.http.admin.parts import AdminParts
from runtime.http.app import AppParts, make_app
from runtime.http.pubsub_access import PubSubParts
from runtime.insight.overview import Insight
from runtime.insight.stats import StatsFlusher
from runtime.objects.applier import CHANNELS_KEY, SECURITY_KEY, ObjectsApplier
from runtime.observability.audit import AuditLog
from runtime.observability.metrics import Metrics
from runtime.pubsub.api import PubSubAPI
from runtime.pubsub.archive import MessageArchive
from runtime.pubsub.broker import Broker
from runtime.pubsub.catalog import SYNC_KEY as PUBSUB_KEY
from runtime.pubsub.objects import section_handlers as pubsub_sections
from runtime.pubsub.observers import Observers
from runtime.pubsub.permission_admin import PermissionAdmin
from runtime.pubsub.permissions import SYNC_KEY as PERMISSIONS_KEY
from runtime.pubsub.permissions import Permissions
from runtime.pubsub.queue_admin import QueueAdmin
from runtime.pubsub.subscribers import SUBSCRIBER_KINDS, KindTools, standard_subscribers
from runtime.pubsub.subscribers.websocket import Attachments, WebSocketHub
from runtime.pubsub.subscribers.websocket import clients as ws_clients
from runtime.pubsub.subscription_admin import SubscriptionAdmin
from runtime.pubsub.topic_admin import TopicAdmin
from runtime.scheduler import SYNC_KEY as SCHEDULER_KEY
from runtime.scheduler import JobAdmin, Scheduler
from runtime.scheduler.objects import section_handler as scheduler_section
from runtime.security.admin import SecurityAdmin
from runtime.security.basic_auth import BasicAuth, SecurityRegistry
from runtime.security.dashboard_sessions import SessionStore
from runtime.security.objects import section_handler as security_section
from runtime.security.user_names import reserved_usernames
from runtime.service.catalog import catalog, recorded_names
from runtime.service.invoke import Invoker
from runtime.service.store import ServiceStore
from runtime.spark.admin import SparkJobAdmin
from runtime.spark.manager import SparkManager
from runtime.util.json_limits import JsonLimits
from runtime.util.spawn import Spawner

if TYPE_CHECKING:
    import falcon

_log = logging.getLogger(__name__)

#: Where the demo's extra objects live, relative to the project directory.
DEMO_OBJECTS_DIR = 'config/demo'

#: The channel of services run for inbound file channels (``self.channel`` in the service).
FILE_TRANSFER_CHANNEL = 'file-transfer'


def idle_in_transaction_secs(settings: Settings) -> float:
    """How long PostgreSQL lets a session of this server sit inside a transaction: the lease time.

    A worker stuck that long has stopped trusting its leases anyway (they lapse after
    ``lease_ttl_secs``); past it, the database ends the session, so that the rows it locked do not
    keep another worker from taking its leases over (``runtime.db.engine.idle_transaction_options``).
    """
    return settings.pubsub.lease_ttl_secs


def prepare_database(settings: Settings, demo: bool = False) -> None:
    """Migrate the schema and apply object files once, before workers start."""
    engine = make_engine(settings.database_url, pool_size=1, dead_client_secs=settings.database.dead_client_secs)
    try:
        upgrade(engine)
        make_objects_applier(settings, engine, demo).apply()
    finally:
        engine.dispose()


def make_objects_applier(settings: Settings, engine: Engine, demo: bool, files: list[Path] | None = None,
                         loaded: Callable[[str], bool] | None = None) -> ObjectsApplier:
    """The applier of object files with every section this server understands.

    files: apply exactly these instead of the configured directories. loaded: services this process
    runs, beside those the service modules define and those recorded as deployed.
    """
    service_dirs = [*services_directories(settings, demo), settings.path(settings.hot_deploy.dir)]
    applier = ObjectsApplier(engine, objects_dirs(settings, demo), files,
                             service_catalog=lambda: catalog(engine, service_dirs, loaded),
                             reserved_usernames=reserved_usernames(settings.admin, settings.dashboard))
    applier.add_handler(security_section())
    applier.add_handler(channels_section())  # after 'security': channels name definitions
    for handler in pubsub_sections(settings.pubsub, SUBSCRIBER_KINDS):
        applier.add_handler(handler)
    applier.add_handler(scheduler_section(settings.scheduler))
    applier.add_handler(file_channel_section(settings.pubsub.auto_create_topics))  # after pubsub_topic
    return applier


def objects_dirs(settings: Settings, demo: bool) -> list[Path]:
    """Directories of object files: config/objects, plus config/demo in demo mode."""
    dirs = [settings.path(settings.objects.dir)]
    if demo:
        dirs.append(settings.path(DEMO_OBJECTS_DIR))
    return dirs


class Runtime:
    """Everything one worker runs, HTTP aside: the composition root of its parts."""

    def __init__(self, settings: Settings, demo: bool = False, engine: Engine | None = None) -> None:
        self.settings = settings
        self.demo = demo
        db = settings.database
        make_psycopg_cooperative()
        self.engine = engine or make_engine(settings.database_url, pool_size=db.pool_size,
                                            sqlite_synchronous=db.sqlite_synchronous,
                                            sqlite_busy_timeout_ms=db.sqlite_busy_timeout_ms,
                                            dead_client_secs=db.dead_client_secs,
                                            idle_in_transaction_secs=idle_in_transaction_secs(settings))
        self.spawner = Spawner()
        spawn = self.spawner.spawn
        #: Who this worker is: every part that names its worker (leases, firings, Spark jobs, file
        #: claims, statistics, the worker registry) is given this one identity.
        self.identity = WorkerIdentity.new(settings.server.bind)
        self.store = ServiceStore()
        #: Prometheus metrics of this worker: fed by the broker's observers, the invoker and the HTTP middleware.
        #: The broker is built later (it runs services): metrics read its registry when asked.
        self.metrics = Metrics(self.engine, lambda: self.broker.registry,
                               websocket_attached=lambda: len(self.ws_attachments))
        #: Rate and service statistics of this worker, flushed to the database for the dashboard. Its worker
        #: id is this worker's.
        self.stats = StatsFlusher(self.engine, lambda: self.identity.id,
                                  flush_interval_secs=settings.stats.flush_interval_secs,
                                  retention_secs=settings.stats.retention_secs)
        # Services reach the pub/sub API and the Spark jobs built after the invoker through these getters.
        self.invoker = Invoker(self.store, spawn, pubsub=self.pubsub_api, config=settings.services,
                               observe=self.metrics.invoke.observe, spark=lambda: self.spark,
                               spark_admin=lambda: self.spark_admin,
                               outcome=self.stats.service_ran)
        self.hot_deployer = HotDeployer(self.store, self.engine)
        self.security = SecurityRegistry()
        self.router = ChannelRouter()
        self.objects = make_objects_applier(settings, self.engine, demo, loaded=self.store.has)
        self.synchronizer = Synchronizer(self.engine)
        self.synchronizer.register(DEPLOYMENTS_KEY, self.hot_deployer.apply_recorded)
        self.synchronizer.register(CHANNELS_KEY, self.reload_channels)
        self.synchronizer.register(SECURITY_KEY, self.reload_security)
        #: Pub/sub permissions of REST clients; the broker asks them about every REST subscriber.
        self.permissions = Permissions(self.engine)
        #: Delivered GD messages and dead letters, written for Spark pipelines (None when [archive] is off).
        self.archive: MessageArchive | None = None
        if settings.archive.enabled:
            self.archive = MessageArchive(settings.archive, settings.path(settings.archive.dir), spawn)
        # Every publication, delivery and dead letter of the broker reaches the metrics and the archive.
        observers = Observers([self.metrics.pubsub, self.stats, *([self.archive] if self.archive else [])])
        #: The WebSocket subscriptions attached to this worker's connections (the WebSocket plug-in delivers them).
        self.ws_attachments = Attachments()
        self.broker = Broker(self.engine, settings.pubsub,
                             subscribers=standard_subscribers(KindTools(self._run_service, self.ws_attachments,
                                                                        settings.pubsub.push_allow_hosts)),
                             spawn=spawn, has_service=self.store.has,
                             overflow_dir=settings.path(settings.pubsub.overflow_dir), observers=observers,
                             json_limits=JsonLimits.from_settings(settings.http),
                             sub_allowed=self.permissions.sub_allowed, owner=self.identity.id)
        #: Topic and subscription administration: making them (catalog), changing them and their queues.
        self.catalog = self.broker.catalog
        #: What the HTTP side's WebSocket connections call: subscribe, attach, resume, detach; the heartbeat.
        self.ws_hub = WebSocketHub(self.engine, self.ws_attachments, catalog=self.catalog,
                                   registry=lambda: self.broker.registry, reload=self.broker.reload,
                                   owner=self.identity.id, want_delivery=self.broker.want_delivery,
                                   release_delivery=self.broker.release_delivery,
                                   heartbeat_secs=settings.pubsub.lease_renew_secs,
                                   max_per_definition=settings.websocket.max_subscriptions_per_definition)
        # The broker's registry is replaced by every reload: the layers read it afresh each time.
        self.topic_admin = TopicAdmin(self.engine, lambda: self.broker.registry, self.broker.reload, self.catalog)
        self.subscription_admin = SubscriptionAdmin(self.engine, lambda: self.broker.registry, self.broker.reload,
                                                    self.catalog)
        self.queue_admin = QueueAdmin(self.engine, lambda: self.broker.registry, self.broker.reload,
                                      websocket_clients=ws_clients.websocket_clients)
        self.permission_admin = PermissionAdmin(self.engine, lambda: self.synchronizer.changed(PERMISSIONS_KEY))
        self.security_admin = SecurityAdmin(self.engine, lambda: self.synchronizer.changed(SECURITY_KEY),
                                            lambda: self.synchronizer.changed(PERMISSIONS_KEY),
                                            reserved_usernames(settings.admin, settings.dashboard))
        self.channel_admin = ChannelAdmin(self.engine, lambda: self.synchronizer.changed(CHANNELS_KEY))
        self.file_channel_admin = FileChannelAdmin(
            self.engine, lambda: self.synchronizer.changed(FILE_CHANNELS_KEY),
            topics_auto_created=lambda: settings.pubsub.auto_create_topics)
        #: Who changed what through the admin API and the CLI.
        self.audit_log = AuditLog(self.engine)
        self.synchronizer.register(PUBSUB_KEY, self.broker.reload)
        self.synchronizer.register(PERMISSIONS_KEY, self.permissions.reload)
        self.scheduler = Scheduler(self.engine, settings.scheduler, spawn, self.store, self.invoker,
                                   owner=self.identity.id)
        #: Reading and changing the jobs; a change wakes this worker's scheduler at once.
        self.job_admin = JobAdmin(self.engine, settings.scheduler.timezone, self.store.has, self.scheduler.wake)
        self.spark = SparkManager(settings, self.engine, spawn, has_service=self.store.has, broker=self.broker,
                                  catalog=self.catalog, archive=self.archive, owner=self.identity.id)
        #: Reading and killing any Spark job; a kill of a job this worker runs stops it at once.
        self.spark_admin = SparkJobAdmin(self.engine, settings.spark, self.spark.pipelines_dir, self.spark.kill_here)
        self.synchronizer.register(SCHEDULER_KEY, self.scheduler.wake)
        #: Inbound file channels: this worker's pollers of their directories (runtime.files).
        self.file_transfer = FileTransfer(
            self.engine, settings.file_transfer, spawn, prepare=self.broker.prepare,
            store_prepared=self.broker.store_prepared, run_service=self._run_file_service,
            json_limits=JsonLimits.from_settings(settings.http), max_message_size=settings.pubsub.max_message_size,
            owner=claim_owner(self.identity.host, self.identity.pid), count=self.metrics.files.count)
        self.synchronizer.register(FILE_CHANNELS_KEY, self.file_transfer.reload)
        #: This worker's row and heartbeat in the worker registry.
        self.workers = WorkerRegistry(self.engine, self.identity, interval_secs=settings.stats.heartbeat_secs)
        #: What the dashboard reads of the running system: workers, statistics, totals, deepest queues.
        self.insight = Insight(self.engine, self.store.names, heartbeat_secs=self.workers.interval_secs,
                               retention_secs=self.stats.retention_secs)
        self.deploy_history = DeployHistory(self.engine)
        self.started = False

    # Lifecycle

    def start(self, migrate: bool = True, watch: bool = True) -> None:
        """Load everything and start the background greenlets."""
        if migrate:
            upgrade(self.engine)
        self.objects.apply()
        self.reload_security()
        self.permissions.reload()  # before the broker: publications filter REST subscribers with them
        self.reload_channels()
        hd = self.settings.hot_deploy
        self.hot_deployer.load_directories(services_directories(self.settings, self.demo))
        self.hot_deployer.apply_recorded()
        pickup = self.settings.path(hd.dir)
        self.hot_deployer.deploy_directory_now(pickup)
        self.broker.start(background=True)
        self.spawner.spawn(self.ws_hub.run, name='ws-heartbeat')  # with the broker's own greenlets
        self.spawner.spawn(self.workers.run, name='worker-heartbeat')
        self.spawner.spawn(self.stats.run, name='stats-flusher')
        self.synchronizer.poll()
        self.scheduler.start()
        self.spark.start()
        self.file_transfer.start()  # after the broker: files are published through it
        if watch:
            self.spawner.spawn(self.hot_deployer.watch, pickup, hd.poll_interval_secs, hd.stable_polls,
                               name='hot-deploy-watcher')
            self.spawner.spawn(self._watch_objects, name='objects-watcher')
            self.spawner.spawn(self.synchronizer.run, self.settings.sync.interval_secs, name='sync')
        self.started = True
        _log.info('runtime started: %d services', len(self.store.names()))

    def stop(self, timeout: float = 5.0) -> None:
        """Stop background work and release the database; never raises."""
        try:
            self.scheduler.stop()  # first: jobs still running may publish
        except Exception:
            _log.exception('stopping the scheduler failed')
        try:
            self.spark.stop()  # before the broker: killed jobs publish spark.job.failed
        except Exception:
            _log.exception('stopping Spark jobs failed')
        try:
            self.file_transfer.stop()  # before the broker: files in progress commit their batch or are put back
        except Exception:
            _log.exception('stopping the file transfer failed')
        try:
            self.ws_hub.stop()  # before the broker hands its leases back: the clients' rows first
        except Exception:
            _log.exception('stopping the WebSocket hub failed')
        try:
            self.broker.stop()
        except Exception:
            _log.exception('stopping the broker failed')
        try:
            self.spawner.stop(timeout)
        except Exception:
            _log.exception('stopping greenlets failed')
        self.stats.flush_quietly()  # what was counted since the broker's stop flushed
        self.workers.stop()  # a clean stop: this worker leaves the registry
        try:
            self.engine.dispose()
        except Exception:
            _log.exception('disposing of the database engine failed')
        self.started = False

    def _watch_objects(self) -> None:
        interval = self.settings.objects.poll_interval_secs
        while True:
            gevent.sleep(interval)
            try:
                if self.objects.changed_on_disk():
                    for key in set(self.objects.apply()):
                        self.synchronizer.changed(key)
            except ConfigError as e:
                _log.error('object files rejected, previous configuration stays: %s', e)
            except Exception:
                _log.exception('applying object files failed')

    # Shared objects

    @one_reload_at_a_time
    def reload_channels(self) -> None:
        """Rebuild the channel router from the database."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(RestChannel)).all()
        channels = []
        for r in rows:
            try:
                channels.append(Channel(name=r.name, service=r.service, url_path=r.url_path,
                                        methods=parse_methods(r.methods), data_format=r.data_format,
                                        security=r.security, is_active=r.is_active))
            except ConfigError as e:
                _log.error('channel %r skipped: %s', r.name, e)
        self.router = ChannelRouter(channels)

    @one_reload_at_a_time
    def reload_security(self) -> None:
        """Reload Basic Auth definitions from the database."""
        with self.engine.connect() as conn:
            rows = conn.execute(select(BasicAuthDef)).all()
        self.security.replace_all([BasicAuth(r.name, r.username, r.password_hash, r.realm, r.is_active)
                                   for r in rows])

    # HTTP

    def make_app(self, **kwargs: Any) -> falcon.App:
        """The falcon WSGI app over this runtime's parts (kwargs go to falcon.App)."""
        sessions = SessionStore(self.engine, self.settings.dashboard.session_ttl_secs,
                                self.settings.dashboard.idle_timeout_secs)
        admin = AdminParts(
            settings=self.settings, database=self.engine.url.get_backend_name(),
            recorded_services=partial(recorded_names, self.engine), catalog=self.catalog, broker=self.broker,
            topic_admin=self.topic_admin, subscription_admin=self.subscription_admin,
            queue_admin=self.queue_admin, permission_admin=self.permission_admin,
            security_admin=self.security_admin, channel_admin=self.channel_admin,
            file_channel_admin=self.file_channel_admin,
            store=self.store, invoker=self.invoker, hot_deployer=self.hot_deployer, scheduler=self.scheduler,
            job_admin=self.job_admin,
            spark=self.spark, spark_admin=self.spark_admin,
            security=self.security, audit=self.audit_log, synchronizer=self.synchronizer,
            recent_publications=self.metrics.recent_publications, channel_count=lambda: len(self.router.channels),
            demo=self.demo, insight=self.insight, deploy_history=self.deploy_history, dashboard_sessions=sessions)
        rest = PubSubParts(settings=self.settings, security=self.security, permissions=self.permissions,
                         broker=self.broker, catalog=self.catalog, store=self.store)
        parts = AppParts(settings=self.settings, database_answers=partial(database_answers, self.engine),
                         store=self.store, invoker=self.invoker,
                         security=self.security, router=lambda: self.router, metrics=self.metrics, admin=admin,
                         pubsub_rest=rest, ws_hub=self.ws_hub, sessions=sessions)
        return make_app(parts, **kwargs)

    # Pub/sub

    def pubsub_api(self, service: Any) -> PubSubAPI:
        """The pub/sub API bound to a service."""
        return PubSubAPI(self.broker, self.catalog, service, self.store.get)

    def _run_file_service(self, name: str, data: Any, raw_request: dict[str, Any]) -> Any:
        """Run a deployed service for a file channel (channel 'file-transfer'); returns its response payload."""
        return self._run_service(name, data, FILE_TRANSFER_CHANNEL, raw_request)

    def _run_service(self, name: str, data: Any, channel: str, raw_request: dict[str, Any] | None) -> Any:
        """Run a deployed service for pub/sub (a subscriber, a hook); returns its response payload."""
        return self.invoker.run(self.store.get(name), data, channel=channel, raw_request=raw_request).response.payload
