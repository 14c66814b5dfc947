"""SQLAlchemy models of everything the runtime keeps in its database.

The schema itself is created and upgraded by the Alembic migrations in ``migrations/``; these
models must match them (a test compares the two).
"""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import BigInteger, Boolean, DateTime, Float, ForeignKey, Index, Integer, String, Text, text
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


class Base(DeclarativeBase):
    """Base of every model."""


class Deployment(Base):
    """One hot deployment or undeployment, in the order every worker applies them."""

    __tablename__ = 'conduit_deployment'

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: 'deploy' (a module's source) or 'undeploy' (one service name).
    kind: Mapped[str] = mapped_column(String(16))
    module_name: Mapped[str] = mapped_column(String(200))
    file_name: Mapped[str] = mapped_column(String(400), default='')
    source: Mapped[str] = mapped_column(Text, default='')
    source_hash: Mapped[str] = mapped_column(String(64), default='')
    #: JSON list of the service names the module defined (or the one undeployed).
    service_names: Mapped[str] = mapped_column(Text, default='[]')
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow)


class BasicAuthDef(Base):
    """A Basic Auth security definition; the password is stored only as a scrypt hash."""

    __tablename__ = 'conduit_sec_basic_auth'

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    username: Mapped[str] = mapped_column(String(200), unique=True)
    password_hash: Mapped[str] = mapped_column(String(400))
    realm: Mapped[str] = mapped_column(String(200), default='Conduit')
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    #: 'config' for objects from config/objects (re-applied from files), 'api' otherwise.
    origin: Mapped[str] = mapped_column(String(16), default='api')
    #: The object file that declared it ('' when made through the admin API or the CLI).
    owner: Mapped[str] = mapped_column(String(1000), default='', server_default='')


class RestChannel(Base):
    """A REST channel: URL path template and methods mapped to a service."""

    __tablename__ = 'conduit_channel_rest'

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    service: Mapped[str] = mapped_column(String(200))
    url_path: Mapped[str] = mapped_column(String(1000))
    #: Comma-separated upper-case methods; empty means any.
    methods: Mapped[str] = mapped_column(String(200), default='')
    data_format: Mapped[str] = mapped_column(String(16), default='json')
    #: Name of a BasicAuthDef, or empty for no security.
    security: Mapped[str] = mapped_column(String(200), default='')
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    origin: Mapped[str] = mapped_column(String(16), default='api')
    #: The object file that declared it ('' when made through the admin API or the CLI).
    owner: Mapped[str] = mapped_column(String(1000), default='', server_default='')


class SyncState(Base):
    """A version counter per kind of shared object; workers reload a kind when it changes."""

    __tablename__ = 'conduit_sync_state'

    key: Mapped[str] = mapped_column(String(100), primary_key=True)
    version: Mapped[int] = mapped_column(BigInteger, default=0)
    #: Free text, e.g. the hash of the config/objects files last applied.
    value: Mapped[str] = mapped_column(Text, default='')


# Publish/subscribe. Times are UNIX epoch seconds (floats): cheap to compare in SQL on both
# backends and free of time-zone conversions on the hot path.


class Topic(Base):
    """A pub/sub topic and its attributes."""

    __tablename__ = 'conduit_topic'

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    #: Lower-cased name: topics compare case-insensitively.
    name_key: Mapped[str] = mapped_column(String(200), unique=True)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    has_gd: Mapped[bool] = mapped_column(Boolean, default=True)
    is_api_sub_allowed: Mapped[bool] = mapped_column(Boolean, default=True)
    on_no_subs: Mapped[str] = mapped_column(String(16), default='accept')
    max_depth_gd: Mapped[int] = mapped_column(Integer, default=10000)
    max_depth_non_gd: Mapped[int] = mapped_column(Integer, default=1000)
    on_max_depth: Mapped[str] = mapped_column(String(16), default='overflow')
    depth_check_freq: Mapped[int] = mapped_column(Integer, default=100)
    limit_retention: Mapped[int] = mapped_column(Integer, default=31536000)
    limit_message_expiry: Mapped[int] = mapped_column(Integer, default=31536000)
    #: Seconds a WebSocket subscription may have no client and no activity before the sweeper deletes it; 0: never.
    limit_sub_inactivity: Mapped[int] = mapped_column(Integer, default=86400, server_default='86400')
    hook_service: Mapped[str] = mapped_column(String(200), default='')
    #: A topic made implicitly for publications to a service (/zato/s/to/...).
    is_service_topic: Mapped[bool] = mapped_column(Boolean, default=False)
    origin: Mapped[str] = mapped_column(String(16), default='api')
    #: The object file that declared it ('' when made through the admin API or the CLI).
    owner: Mapped[str] = mapped_column(String(1000), default='', server_default='')
    created_at: Mapped[float] = mapped_column(Float)


#: Which subscriptions are a service's implicit one to its own topic (made by Catalog.ensure_service_topic).
IMPLICIT_SUBSCRIPTION = "kind = 'service' AND origin = 'service'"


class Subscription(Base):
    """A subscriber's subscription to a topic or a pattern, owning one queue."""

    __tablename__ = 'conduit_subscription'
    # One implicit subscription per service (to its own topic), however many publishers make it at once.
    __table_args__ = (Index('ix_conduit_subscription_implicit', 'service', unique=True,
                            postgresql_where=text(IMPLICIT_SUBSCRIPTION), sqlite_where=text(IMPLICIT_SUBSCRIPTION)),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    sub_key: Mapped[str] = mapped_column(String(64), unique=True)
    #: A topic name or a pattern with * / ** wildcards, as given.
    pattern: Mapped[str] = mapped_column(String(200))
    #: 'service' (pushed to a service), 'rest_push' (POSTed to a URL), 'pull' (fetched by the client),
    #: 'websocket' (sent over a client's WebSocket, see WsClient), 'file' (written as files into push_url).
    kind: Mapped[str] = mapped_column(String(16))
    #: The service invoked (kind service), or the service that owns a pull subscription.
    service: Mapped[str] = mapped_column(String(200), default='')
    #: The security definition of a REST subscriber.
    security: Mapped[str] = mapped_column(String(200), default='')
    #: Where a REST push subscription POSTs, or where a file subscription writes (file:///dir, sftp://user@host/dir).
    push_url: Mapped[str] = mapped_column(String(1000), default='')
    #: JSON object of delivery options overriding the server's [pubsub] defaults.
    options: Mapped[str] = mapped_column(Text, default='{}')
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    origin: Mapped[str] = mapped_column(String(16), default='api')
    #: The object file that declared it ('' when made through the admin API or the CLI).
    owner: Mapped[str] = mapped_column(String(1000), default='', server_default='')
    created_at: Mapped[float] = mapped_column(Float)


#: Which messages wait in their topic, as SQLAlchemy renders ``Message.in_topic.is_(True)`` on each
#: database: SQLite uses a partial index only for a query with the same term as the index's.
WAITING_IN_TOPIC = 'in_topic IS true'
WAITING_IN_TOPIC_SQLITE = 'in_topic IS 1'


class Message(Base):
    """A published message; kept while a queue, the topic or a dead-letter queue holds it."""

    __tablename__ = 'conduit_message'
    # AUTOINCREMENT: ids are never reused, so "everything after id N" is a reliable change feed.
    # (topic_id, id): a topic's messages in publication order, newest or oldest first, without a sort.
    # The messages waiting in a topic have an index of their own, partial: nearly every message goes
    # straight to a queue, and so costs no entry in it when it is stored and none when it is swept.
    __table_args__ = (Index('ix_conduit_message_topic_order', 'topic_id', 'id'),
                      Index('ix_conduit_message_waiting', 'topic_id', 'id', postgresql_where=text(WAITING_IN_TOPIC),
                            sqlite_where=text(WAITING_IN_TOPIC_SQLITE)),
                      {'sqlite_autoincrement': True})

    #: Publication order.
    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, 'sqlite'), primary_key=True,
                                    autoincrement=True)
    msg_id: Mapped[str] = mapped_column(String(64), unique=True)
    topic_id: Mapped[int] = mapped_column(Integer)
    topic_name: Mapped[str] = mapped_column(String(200))
    data: Mapped[str] = mapped_column(Text)
    mime_type: Mapped[str] = mapped_column(String(100))
    priority: Mapped[int] = mapped_column(Integer)
    pub_time: Mapped[float] = mapped_column(Float)
    expiration_time: Mapped[float] = mapped_column(Float)
    publisher: Mapped[str] = mapped_column(String(200), default='')
    correl_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    in_reply_to: Mapped[str | None] = mapped_column(String(200), nullable=True)
    ext_client_id: Mapped[str | None] = mapped_column(String(200), nullable=True)
    has_gd: Mapped[bool] = mapped_column(Boolean)
    size: Mapped[int] = mapped_column(Integer)
    #: Accepted by a topic with no subscribers; handed to the next subscription that appears.
    in_topic: Mapped[bool] = mapped_column(Boolean, default=False)
    #: The publisher's own pub_time, as it sent it (returned as pub_time_iso; pub_time orders and expires).
    ext_pub_time: Mapped[str | None] = mapped_column(String(64), nullable=True)


class QueueEntry(Base):
    """One message waiting in one subscription's queue."""

    __tablename__ = 'conduit_queue'
    __table_args__ = (Index('ix_conduit_queue_order', 'sub_id', 'priority', 'message_id'),
                      {'sqlite_autoincrement': True})

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, 'sqlite'), primary_key=True,
                                    autoincrement=True)
    sub_id: Mapped[int] = mapped_column(Integer)
    message_id: Mapped[int] = mapped_column(BigInteger, index=True)
    #: Negated message priority, so that an ascending index gives high priority first.
    priority: Mapped[int] = mapped_column(Integer)
    delivery_count: Mapped[int] = mapped_column(Integer, default=0)
    next_attempt_at: Mapped[float] = mapped_column(Float, default=0.0)
    last_error: Mapped[str] = mapped_column(Text, default='')
    #: Traceback of the last failed attempt (bounded), for whoever debugs the subscriber.
    last_traceback: Mapped[str | None] = mapped_column(Text, nullable=True)
    #: For manual-ack pulls: the lease id and until when the client holds it.
    ack_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    recv_time: Mapped[float] = mapped_column(Float)


class DeadLetter(Base):
    """A message a subscription gave up on, with its last error; can be edited and re-driven."""

    __tablename__ = 'conduit_dead_letter'

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, 'sqlite'), primary_key=True,
                                    autoincrement=True)
    sub_id: Mapped[int] = mapped_column(Integer, index=True)
    message_id: Mapped[int] = mapped_column(BigInteger, index=True)
    delivery_count: Mapped[int] = mapped_column(Integer)
    last_error: Mapped[str] = mapped_column(Text)
    #: Traceback of the last failed attempt (bounded), for whoever debugs the subscriber.
    last_traceback: Mapped[str | None] = mapped_column(Text, nullable=True)
    reason: Mapped[str] = mapped_column(String(32))
    dead_at: Mapped[float] = mapped_column(Float)


class WsClient(Base):
    """The client of one WebSocket subscription: which worker holds its connection, and its last activity."""

    __tablename__ = 'conduit_ws_client'

    sub_id: Mapped[int] = mapped_column(Integer, ForeignKey('conduit_subscription.id'), primary_key=True,
                                        autoincrement=False)
    #: The lease-owner id of the worker holding the client's connection; '' when no client is attached.
    owner: Mapped[str] = mapped_column(String(200), default='', server_default='')
    #: The client's address, as the worker saw it ('' when none is attached).
    peer: Mapped[str] = mapped_column(String(100), default='', server_default='')
    connected_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: Attach, ack, or a heartbeat of the worker while a client is attached (the sweeper's measure).
    last_active_at: Mapped[float] = mapped_column(Float)
    #: Messages the client held unacknowledged at the last heartbeat.
    in_flight: Mapped[int] = mapped_column(Integer, default=0, server_default='0')


class Lease(Base):
    """Who does a once-only job (delivering one subscription, sweeping) until when."""

    __tablename__ = 'conduit_lease'

    name: Mapped[str] = mapped_column(String(200), primary_key=True)
    owner: Mapped[str] = mapped_column(String(200))
    expires_at: Mapped[float] = mapped_column(Float)
    #: Bumped whenever the lease changes hands: a fencing token (writes of an older holder are refused).
    version: Mapped[int] = mapped_column(BigInteger, default=0, server_default='0')


# Scheduler. Times are UNIX epoch seconds, as in pub/sub.


class Job(Base):
    """A scheduled job: its definition and how far its schedule has got."""

    __tablename__ = 'conduit_job'

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    service: Mapped[str] = mapped_column(String(200))
    #: 'one_time', 'interval_based' or 'cron_style'.
    job_type: Mapped[str] = mapped_column(String(16))
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    start_date: Mapped[float | None] = mapped_column(Float, nullable=True)
    weeks: Mapped[float] = mapped_column(Float, default=0.0)
    days: Mapped[float] = mapped_column(Float, default=0.0)
    hours: Mapped[float] = mapped_column(Float, default=0.0)
    minutes: Mapped[float] = mapped_column(Float, default=0.0)
    seconds: Mapped[float] = mapped_column(Float, default=0.0)
    #: Most scheduled runs; None runs forever.
    repeats: Mapped[int | None] = mapped_column(Integer, nullable=True)
    cron_definition: Mapped[str] = mapped_column(String(200), default='')
    #: IANA time zone of the crontab line and of a start date given without an offset.
    timezone: Mapped[str] = mapped_column(String(64), default='UTC')
    #: JSON of the payload each run receives.
    extra: Mapped[str] = mapped_column(Text, default='null')
    jitter_secs: Mapped[float] = mapped_column(Float, default=0.0)
    #: 0 means no limit.
    max_execution_time_secs: Mapped[float] = mapped_column(Float, default=0.0)
    on_success: Mapped[str] = mapped_column(String(200), default='')
    on_error: Mapped[str] = mapped_column(String(200), default='')
    skip_if_running: Mapped[bool] = mapped_column(Boolean, default=False)
    catch_up: Mapped[bool] = mapped_column(Boolean, default=False)
    origin: Mapped[str] = mapped_column(String(16), default='api')
    #: The object file that declared it ('' when made through the admin API or the CLI).
    owner: Mapped[str] = mapped_column(String(1000), default='', server_default='')
    created_at: Mapped[float] = mapped_column(Float)
    #: The next firing; None when the job is paused or will not fire again.
    next_run_time: Mapped[float | None] = mapped_column(Float, nullable=True, index=True)
    #: Scheduled runs so far (skipped firings and manual runs do not count), for repeats.
    run_count: Mapped[int] = mapped_column(Integer, default=0)
    last_fire_time: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: Bumped by every claim and edit: a claim is a compare-and-set on it.
    version: Mapped[int] = mapped_column(Integer, default=1)


class JobRun(Base):
    """One firing of a job: claimed by one worker, with its outcome once it ended."""

    __tablename__ = 'conduit_job_run'
    __table_args__ = (Index('ix_conduit_job_run_fire', 'job_id', 'fire_time', unique=True),
                      {'sqlite_autoincrement': True})

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, 'sqlite'), primary_key=True,
                                    autoincrement=True)
    job_id: Mapped[int] = mapped_column(Integer)
    #: 'schedule' or 'manual' (run now).
    kind: Mapped[str] = mapped_column(String(16))
    fire_time: Mapped[float] = mapped_column(Float)
    #: The worker that ran it.
    owner: Mapped[str] = mapped_column(String(200), default='')
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    heartbeat_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: 'running', 'ok', 'error', 'timeout' or 'skipped'.
    outcome: Mapped[str] = mapped_column(String(16), index=True)
    error: Mapped[str] = mapped_column(Text, default='')
    cid: Mapped[str] = mapped_column(String(64), default='')


class PubSubPermission(Base):
    """What one security definition may publish to and subscribe to (Zato's pub=/sub= lines)."""

    __tablename__ = 'conduit_pubsub_permission'

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: Name of a BasicAuthDef.
    security: Mapped[str] = mapped_column(String(200), unique=True)
    #: JSON list of topic names or patterns, in the order they are tried.
    pub: Mapped[str] = mapped_column(Text, default='[]')
    sub: Mapped[str] = mapped_column(Text, default='[]')
    origin: Mapped[str] = mapped_column(String(16), default='api')
    #: The object file that declared it ('' when made through the admin API or the CLI).
    owner: Mapped[str] = mapped_column(String(1000), default='', server_default='')


# Spark pipelines. Times are UNIX epoch seconds, as in pub/sub.


class SparkJob(Base):
    """One submission of a Spark pipeline: what ran where, and how it ended."""

    __tablename__ = 'conduit_spark_job'

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    #: The id returned to the submitter (12 hex characters).
    job_id: Mapped[str] = mapped_column(String(64), unique=True)
    pipeline: Mapped[str] = mapped_column(String(200), index=True)
    #: JSON list of the argument strings main(args) receives.
    arguments: Mapped[str] = mapped_column(Text, default='[]')
    master: Mapped[str] = mapped_column(String(400))
    #: JSON object of this job's own --conf settings (the server's [spark] conf comes on top).
    conf: Mapped[str] = mapped_column(Text, default='{}')
    #: 'submitted', 'running', 'succeeded', 'failed' or 'killed'.
    status: Mapped[str] = mapped_column(String(16), index=True)
    submitted_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: Last sign of life from the worker running the job.
    heartbeat_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    #: 0 means no limit.
    timeout_secs: Mapped[float] = mapped_column(Float, default=0.0)
    #: The service that submitted it, and the service its event is also published to.
    service: Mapped[str] = mapped_column(String(200), default='')
    callback: Mapped[str] = mapped_column(String(200), default='')
    cid: Mapped[str] = mapped_column(String(64), default='')
    #: The worker running it, and spark-submit's pid there.
    owner: Mapped[str] = mapped_column(String(200), default='')
    pid: Mapped[int | None] = mapped_column(Integer, nullable=True)
    exit_code: Mapped[int | None] = mapped_column(Integer, nullable=True)
    log_path: Mapped[str] = mapped_column(String(1000), default='')
    output_location: Mapped[str] = mapped_column(String(1000), default='')
    #: JSON of what the pipeline's main(args) returned.
    result: Mapped[str] = mapped_column(Text, default='null')
    error: Mapped[str] = mapped_column(Text, default='')
    #: Why a kill was asked for (by any worker); empty when none was.
    kill_requested: Mapped[str] = mapped_column(String(200), default='')


class AuditEntry(Base):
    """One change made through the admin API: who, what, when, and the object before and after it."""

    __tablename__ = 'conduit_audit'
    __table_args__ = (Index('ix_conduit_audit_at', 'at'), Index('ix_conduit_audit_object', 'kind', 'name'),
                      {'sqlite_autoincrement': True})

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, 'sqlite'), primary_key=True,
                                    autoincrement=True)
    #: UNIX epoch seconds.
    at: Mapped[float] = mapped_column(Float)
    #: The admin user name, or what applied object files ('objects apply').
    actor: Mapped[str] = mapped_column(String(200))
    #: The client's address.
    client: Mapped[str] = mapped_column(String(100), default='')
    #: Where the change came from: 'api', 'cli', 'dashboard' or 'files'.
    source: Mapped[str] = mapped_column(String(16), default='api', server_default='api')
    method: Mapped[str] = mapped_column(String(16))
    path: Mapped[str] = mapped_column(String(1000))
    #: 'channel', 'security', 'topic', 'subscription', 'permission', 'job', 'service', ... or ''.
    kind: Mapped[str] = mapped_column(String(32), default='')
    name: Mapped[str] = mapped_column(String(400), default='')
    #: 'create', 'update', 'delete', 'detach', or what was done ('publish', 'undeploy', ...).
    action: Mapped[str] = mapped_column(String(16))
    status: Mapped[int] = mapped_column(Integer)
    #: JSON of the object before and after, secrets masked; None when there was none.
    before: Mapped[str | None] = mapped_column(Text, nullable=True)
    after: Mapped[str | None] = mapped_column(Text, nullable=True)


# File transfer. Times are UNIX epoch seconds, as in pub/sub.


class FileChannelRow(Base):
    """An inbound file channel: a directory (local or SFTP) whose files become messages or invocations."""

    __tablename__ = 'conduit_file_channel'

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200), unique=True)
    #: JSON of FileChannelDef.as_values() without the name; secrets only as ${CONDUIT_SECRET_...} references.
    definition: Mapped[str] = mapped_column(Text)
    is_active: Mapped[bool] = mapped_column(Boolean, default=True)
    origin: Mapped[str] = mapped_column(String(16), default='api')
    #: The object file that declared it ('' when made through the admin API or the CLI).
    owner: Mapped[str] = mapped_column(String(1000), default='', server_default='')
    updated_at: Mapped[float] = mapped_column(Float, default=0.0)


class FileRun(Base):
    """One processing of one file by one channel: how far it got, so that a crash resumes exactly there."""

    __tablename__ = 'conduit_file_run'
    __table_args__ = (Index('ix_file_run_hash', 'channel', 'content_hash'),
                      Index('ix_file_run_name', 'channel', 'file_name'))

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(String(200), index=True)
    #: The file's original path, relative to the channel's directory.
    file_name: Mapped[str] = mapped_column(String(1000))
    size: Mapped[int] = mapped_column(BigInteger)
    mtime: Mapped[float] = mapped_column(Float)
    #: Hex sha256 of the file's content.
    content_hash: Mapped[str] = mapped_column(String(64))
    #: 'running', 'done', 'failed', 'skipped' or 'superseded'.
    state: Mapped[str] = mapped_column(String(16))
    #: Records committed so far (published and/or invoked): a resumed run skips that many.
    records_done: Mapped[int] = mapped_column(BigInteger, default=0)
    published: Mapped[int] = mapped_column(BigInteger, default=0)
    invoked: Mapped[int] = mapped_column(BigInteger, default=0)
    #: The claim owner (host and pid) of the worker that processed it last.
    owner: Mapped[str] = mapped_column(String(200))
    started_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str] = mapped_column(Text, default='')


class FileDigest(Base):
    """How many records with one digest a failed run published: a fixed file dropped again skips them."""

    __tablename__ = 'conduit_file_digest'

    run_id: Mapped[int] = mapped_column(Integer, ForeignKey('conduit_file_run.id', ondelete='CASCADE'),
                                        primary_key=True, autoincrement=False)
    digest: Mapped[str] = mapped_column(String(32), primary_key=True)
    count: Mapped[int] = mapped_column(Integer)


# Dashboard, workers and statistics. Times are UNIX epoch seconds.


class DashboardSession(Base):
    """A signed-in dashboard user: the cookie holds a random token, only its hash is stored."""

    __tablename__ = 'conduit_dashboard_session'

    #: Hex sha256 of the cookie's token.
    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    actor: Mapped[str] = mapped_column(String(200))
    #: 'admin' or 'viewer'.
    role: Mapped[str] = mapped_column(String(16))
    #: The session's CSRF token (sent back in a header or form field with every change).
    csrf_token: Mapped[str] = mapped_column(String(64))
    #: The client's address at sign-in.
    client: Mapped[str] = mapped_column(String(100), default='')
    created_at: Mapped[float] = mapped_column(Float)
    #: Absolute end of the session, whatever its activity.
    expires_at: Mapped[float] = mapped_column(Float, index=True)
    last_seen_at: Mapped[float] = mapped_column(Float)
    #: The ``DashboardCredential.generation`` of its role at sign-in: a session of an older one has ended.
    credential: Mapped[str] = mapped_column(String(64), default='', server_default='')


class DashboardCredential(Base):
    """The password the dashboard's admin or viewer signs in with now, as a hash, and its generation.

    Each worker checks its configured password against ``password_hash`` when it starts; when it no
    longer matches (or the user name changed), the row gets a new hash and a new random
    ``generation``, which ends every session signed in with the one before.
    """

    __tablename__ = 'conduit_dashboard_credential'

    #: 'admin' or 'viewer'.
    role: Mapped[str] = mapped_column(String(16), primary_key=True)
    username: Mapped[str] = mapped_column(String(200))
    #: scrypt hash with a random salt (runtime.security.basic_auth.hash_password): never the password.
    password_hash: Mapped[str] = mapped_column(String(400))
    #: Random; new at every change of the password or user name.
    generation: Mapped[str] = mapped_column(String(64))
    changed_at: Mapped[float] = mapped_column(Float)


class WorkerRow(Base):
    """A running worker (one runtime instance) and its heartbeat: the dashboard's servers and workers."""

    __tablename__ = 'conduit_worker'

    #: The worker's lease-owner id (host:pid:random).
    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    #: The server it belongs to (host and the gunicorn arbiter's pid), shared by a server's workers.
    server: Mapped[str] = mapped_column(String(200), index=True)
    host: Mapped[str] = mapped_column(String(200))
    pid: Mapped[int] = mapped_column(Integer)
    #: The address the server listens on.
    bind: Mapped[str] = mapped_column(String(200), default='')
    started_at: Mapped[float] = mapped_column(Float)
    heartbeat_at: Mapped[float] = mapped_column(Float, index=True)


class RateStat(Base):
    """What one worker did in one time bucket: the dashboard's live rates, summed over workers."""

    __tablename__ = 'conduit_stats_rate'

    worker: Mapped[str] = mapped_column(String(200), primary_key=True)
    #: The bucket's start, in UNIX seconds (a multiple of the bucket length).
    bucket: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False, index=True)
    published: Mapped[int] = mapped_column(BigInteger, default=0)
    delivered: Mapped[int] = mapped_column(BigInteger, default=0)
    failed: Mapped[int] = mapped_column(BigInteger, default=0)
    dead_lettered: Mapped[int] = mapped_column(BigInteger, default=0)


class ServiceStat(Base):
    """One service's invocations by one worker in one time bucket (count, errors, time, latency histogram)."""

    __tablename__ = 'conduit_stats_service'

    worker: Mapped[str] = mapped_column(String(200), primary_key=True)
    service: Mapped[str] = mapped_column(String(200), primary_key=True)
    bucket: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False, index=True)
    invocations: Mapped[int] = mapped_column(BigInteger, default=0)
    errors: Mapped[int] = mapped_column(BigInteger, default=0)
    total_secs: Mapped[float] = mapped_column(Float, default=0.0)
    #: JSON list of counts per latency bucket (runtime.observability.metrics' bounds), for percentiles.
    histogram: Mapped[str] = mapped_column(Text, default='[]')
