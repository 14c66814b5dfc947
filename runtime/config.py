"""Server configuration: ``config/server.toml`` plus ``CONDUIT_*`` environment overrides.

Every key of every section can be overridden by ``CONDUIT_<SECTION>_<KEY>`` (upper case), e.g.
``CONDUIT_DATABASE_URL`` or ``CONDUIT_SERVER_WORKERS``. The value is converted to the type of the
key's default. Unknown sections or keys in the file are an error naming them, and so are a
variable naming a known section but an unknown key and a config file named explicitly
(``--config``, $CONDUIT_CONFIG) that does not exist, so a typo never silently falls back to a
default. Any other ``CONDUIT_*`` variable that is not Conduit's (``CONDUIT_PORT``, a misspelling)
gets a warning naming the closest real one (``unknown_env_vars``). Relative paths are resolved
against the project directory (the parent of the ``config/`` folder holding server.toml); without
a named file, the project is the nearest directory, from the current one up, that has a
``config/server.toml``.

Services have configuration of their own: each ``[services."<service name>"]`` table is that
service's ``self.config``, any keys and TOML values. A key given in the file can be overridden by
``CONDUIT_SERVICES_<NAME>_<KEY>``, the name upper-cased with every other character than letters
and digits made ``_`` (``crm.customer.create`` -> ``CONDUIT_SERVICES_CRM_CUSTOMER_CREATE_API_URL``).
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from runtime.errors import ConfigError

#: Environment variable naming the server.toml to use.
CONFIG_ENV = 'CONDUIT_CONFIG'

#: Prefix of every environment override.
ENV_PREFIX = 'CONDUIT_'

#: Values of pubsub.rest_status_codes.
REST_STATUS_CODES = ('zato', 'http')

#: Environment variable giving the admin API's URL to the CLI (instead of the one server.toml implies).
URL_ENV = 'CONDUIT_URL'

#: The table of per-service configuration in server.toml.
SERVICES_SECTION = 'services'

#: CONDUIT_* variables that belong to something else than the server's configuration: secrets that
#: object files reference, and the variables of the test suite, benchmarks and Spark drivers.
_NOT_SETTINGS_PREFIXES = ('CONDUIT_SECRET_', 'CONDUIT_TEST_', 'CONDUIT_BENCH_', 'CONDUIT_FUZZ_',
                          'CONDUIT_CHAOS_', 'CONDUIT_SPARK_JOB_ID', 'CONDUIT_SPARK_OUTPUT',
                          'CONDUIT_SPARK_PIPELINE')

#: Names people guess for a setting, and the variable that really sets it.
_GUESSES = {'PORT': 'CONDUIT_SERVER_BIND', 'HOST': 'CONDUIT_SERVER_BIND', 'ADDRESS': 'CONDUIT_SERVER_BIND',
            'LISTEN': 'CONDUIT_SERVER_BIND', 'DB': 'CONDUIT_DATABASE_URL', 'DB_URL': 'CONDUIT_DATABASE_URL',
            'DSN': 'CONDUIT_DATABASE_URL', 'LOG_LEVEL': 'CONDUIT_LOGGING_LEVEL', 'CONFIG_FILE': CONFIG_ENV}


@dataclass
class ServerSection:
    """How gunicorn listens and runs."""

    bind: str = '127.0.0.1:17010'
    workers: int = 1
    graceful_timeout_secs: float = 10.0
    pidfile: str = 'var/conduit.pid'
    #: Where the workers write their counts so that /metrics adds them up
    #: (runtime.observability.metrics_share); emptied at start.
    metrics_dir: str = 'var/metrics'
    #: How often each worker writes them (what a worker killed with SIGKILL counted since is lost).
    metrics_interval_secs: float = 1.0
    certfile: str = ''
    keyfile: str = ''


@dataclass
class DatabaseSection:
    """Where the runtime stores its state."""

    url: str = 'sqlite:///var/conduit.db'
    pool_size: int = 10
    #: SQLite's PRAGMA synchronous; FULL keeps committed data across a power loss.
    sqlite_synchronous: str = 'FULL'
    #: How long a SQLite writer waits for the lock before giving up.
    sqlite_busy_timeout_ms: int = 10000
    #: PostgreSQL: a connection that gets no answer for this long is taken for dead, on both ends (TCP
    #: keepalives, tcp_user_timeout, connect_timeout), so that a server cut off from the database fails
    #: fast and lets its leases go, and the database drops the cut server's sessions and their locks.
    #: 0 (the default) leaves it to the operating system, which can wait for many minutes.
    dead_client_secs: float = 0.0


@dataclass
class HotDeploySection:
    """Where services come from."""

    dir: str = 'hot-deploy'
    services_dir: str = 'services'
    poll_interval_secs: float = 0.2
    #: A file is loaded once its size and mtime were the same on this many polls in a row.
    stable_polls: int = 2


@dataclass
class ObjectsSection:
    """Declarative objects (channels, security, topics, jobs)."""

    dir: str = 'config/objects'
    poll_interval_secs: float = 1.0


@dataclass
class HttpSection:
    """Limits of the HTTP layer: what a client may send, how slowly, and what is public."""

    max_body_size: int = 5 * 1024 * 1024
    #: Deepest nesting of arrays and objects a JSON body (or a published message) may have.
    max_json_depth: int = 64
    #: Most digits an integer in a JSON body may have.
    max_json_int_digits: int = 100
    #: Time to receive a request's line and headers (also how long an idle keep-alive connection waits).
    header_timeout_secs: float = 5.0
    #: A request body must arrive at body_min_rate_bytes per second once body_grace_secs have passed.
    body_grace_secs: float = 10.0
    body_min_rate_bytes: int = 10240
    #: Longest one write of an answer may take before the connection is closed (a client that never reads).
    send_timeout_secs: float = 60.0
    #: Open connections per worker; past it new ones are answered 503 at once and closed.
    max_connections: int = 10000
    #: Whether /metrics and /openapi.json answer without the admin credentials.
    metrics_public: bool = False
    openapi_public: bool = False
    #: Failed sign-ins of one user name from one client address within auth_failure_window_secs
    #: before that pair gets 429 (0: off); other names from the same address keep their own budget.
    auth_max_failures: int = 10
    #: Failed sign-ins of one user name from all addresses together in the window before it gets 429 (0: off).
    auth_max_failures_per_user: int = 100
    auth_failure_window_secs: float = 60.0
    #: Buckets of each of the throttle's two fixed-size tables (12 bytes each; more: fewer shared buckets).
    auth_throttle_buckets: int = 65536


@dataclass
class WebSocketSection:
    """[websocket]: WebSocket publishers and subscribers at GET /pubsub/ws (runtime.http.websocket)."""

    #: A client that did not authenticate on the upgrade must send its hello frame within this time.
    hello_timeout_secs: float = 5.0
    #: The server pings every client this often; a peer that sent nothing (not even a pong) for
    #: dead_peer_secs is closed.
    ping_interval_secs: float = 20.0
    dead_peer_secs: float = 60.0
    #: Largest message a client may send (a larger one closes the connection with 1009).
    max_frame_bytes: int = 6 * 1024 * 1024
    #: Before its hello succeeds a client may send a message (and a frame) of at most this size (else 1009),
    #: and this much is read from its socket at a time.
    hello_max_bytes: int = 4096
    #: Frames per second (continuation and control frames too) a client may send, a token bucket of this
    #: burst; more closes the connection with 1008. Before sign-in, and once signed in.
    hello_frames_per_sec: float = 10.0
    hello_frame_burst: int = 50
    frames_per_sec: float = 5000.0
    frame_burst: int = 10000
    #: Unacknowledged messages per subscription: the default and the most a client may ask for.
    default_window: int = 100
    max_window: int = 1000
    #: A message a connected client has not acknowledged within this time comes back later (a failed attempt).
    ack_deadline_secs: float = 30.0
    #: Subscriptions one connection may hold.
    max_subscriptions: int = 100
    #: WebSocket subscriptions one security definition may hold in all, attached or not (they outlive their
    #: connections; each is one more queue row per publication); past it subscribe answers 409 (0: no limit).
    max_subscriptions_per_definition: int = 200
    #: Origins (scheme://host[:port], comma-separated; '*' = any) whose browsers may authenticate with
    #: the Basic Auth header; a browser from any other origin must authenticate with the hello frame.
    allowed_origins: str = ''


@dataclass
class AdminSection:
    """Credentials of the admin API; an empty password is generated once into password_file."""

    username: str = 'admin'
    password: str = ''
    password_file: str = 'var/admin.password'


@dataclass
class DashboardSection:
    """[dashboard]: the web dashboard at /dashboard/ (runtime.http.dashboard) and its sessions."""

    enabled: bool = True
    #: The read-only user; an empty password is generated once into viewer_password_file.
    viewer_username: str = 'viewer'
    viewer_password: str = ''
    viewer_password_file: str = 'var/viewer.password'
    #: A session ends this long after sign-in, whatever its activity.
    session_ttl_secs: float = 28800.0
    #: A session unused for this long ends.
    idle_timeout_secs: float = 3600.0


@dataclass
class SyncSection:
    """How often a worker checks the database for changes made by other workers."""

    interval_secs: float = 0.5


@dataclass
class PubSubSection:
    """Broker defaults; each subscription may override the delivery options."""

    #: Publishing to an unknown topic creates it instead of failing.
    auto_create_topics: bool = False
    max_message_size: int = 5 * 1024 * 1024
    #: Expiration of a message that does not set one (one year, as in Zato).
    default_expiration_secs: int = 31536000
    delivery_batch_size: int = 100
    max_attempts: int = 25
    #: First wait after a socket-level error (connection refused, timeout); grows per attempt.
    wait_sock_err: float = 10.0
    #: First wait after any other error; grows per attempt.
    wait_non_sock_err: float = 3.0
    #: Cap of the growing wait between attempts.
    max_wait_secs: float = 600.0
    err_should_block: bool = True
    max_in_flight: int = 1
    #: A worker owns a subscription's delivery for this long unless it renews the lease.
    lease_ttl_secs: float = 10.0
    lease_renew_secs: float = 2.0
    #: How often a worker looks for messages other processes queued.
    poll_interval_secs: float = 0.05
    sweep_interval_secs: float = 30.0
    #: On PostgreSQL, how often a worker looks whether the queue table needs vacuuming (0: leave it to autovacuum).
    queue_vacuum_secs: float = 1.0
    #: Dead rows in the queue table past which it is vacuumed (each delivered message leaves one).
    queue_vacuum_dead_rows: int = 1000
    #: Publications past a topic's max depth are appended here (one JSON line each).
    overflow_dir: str = 'var/overflow'
    #: Cap of one topic's overflow log, in bytes; past it a publication is refused with 503.
    max_overflow_bytes: int = 100 * 1024 * 1024
    #: Cap of max_len of one REST pull: characters of data one answer may carry (at least max_message_size).
    max_pull_chars: int = 10_000_000
    #: Longest a REST pull may wait for a message to arrive (its ``wait``, in seconds); 0: pulls answer at once.
    max_pull_wait_secs: float = 30.0
    #: Most publications one group commit writes.
    group_commit_max: int = 1000
    #: PostgreSQL: send a commit of publications, takes and acks as one query (one round trip); off, one per statement.
    one_trip_commits: bool = True
    #: Hosts a REST push_url may target although the outbound policy refuses loopback, link-local
    #: (cloud metadata), unspecified and multicast addresses: names, addresses or CIDRs, comma-separated;
    #: '*': any. Private ranges (10/8, 172.16/12, 192.168/16) are always allowed.
    push_allow_hosts: str = ''
    #: Status codes of the REST pub/sub API: "zato" (Zato 4.1's: 401 for a missing permission or
    #: subscription, 200 for unsubscribing when not subscribed) or "http" (403, 404 and 404).
    rest_status_codes: str = 'zato'


@dataclass
class SchedulerSection:
    """The scheduler: how often a worker looks for due jobs, and what counts as missed or lost."""

    #: Whether this server's workers fire jobs (the admin API and run-now work either way).
    enabled: bool = True
    #: Longest sleep between looks at the jobs; a worker also wakes for the earliest next firing.
    poll_interval_secs: float = 0.5
    #: A firing later than this (e.g. after a restart) is skipped unless the job has catch_up.
    misfire_grace_secs: float = 30.0
    #: Time zone of jobs that do not name one.
    timezone: str = 'UTC'
    #: A running job's worker says it is alive this often; silent for stale_run_secs, the run is lost.
    heartbeat_secs: float = 5.0
    stale_run_secs: float = 30.0
    sweep_interval_secs: float = 60.0
    #: Runs kept per job in the history.
    history_per_job: int = 1000


@dataclass
class SparkSection:
    """Spark pipelines: where spark-submit sends them, and how their jobs are kept."""

    #: Any Spark master URL, passed through: local[*], local[2], spark://host:7077, yarn, k8s://...
    master: str = 'local[*]'
    #: Extra --conf settings for every job: key=value items separated by ';' or new lines.
    conf: str = 'spark.ui.showConsoleProgress=false'
    #: The pipeline modules (one per pipeline, each with main(args)).
    pipelines_dir: str = 'spark_pipeline'
    #: Per job: the driver's log and the pipeline's result file.
    jobs_dir: str = 'var/spark/jobs'
    #: Per job, <output_dir>/<pipeline>/<job_id>: where a pipeline writes its results.
    output_dir: str = 'var/spark/output'
    #: The spark-submit to run; empty: the one inside the installed pyspark package (the spark extra).
    spark_submit: str = ''
    #: A job running longer is killed and recorded as killed (0: no limit); each submission may override it.
    default_timeout_secs: float = 3600.0
    #: How long a job may take to exit after SIGTERM before it is sent SIGKILL.
    kill_grace_secs: float = 5.0
    #: How often the worker running a job reports it alive (and sees kill requests made elsewhere).
    heartbeat_secs: float = 2.0
    #: A running job whose worker was silent this long is recorded as failed (the worker died).
    stale_job_secs: float = 30.0
    #: Lines of the driver's log in the admin API's job details.
    log_tail_lines: int = 50
    #: Finished jobs kept in the history; older ones are removed with their logs (not their output).
    history_max_jobs: int = 1000


@dataclass
class ArchiveSection:
    """The message archive: delivered GD messages and dead letters, as JSON Lines per topic and day."""

    enabled: bool = True
    dir: str = 'var/archive'
    #: Whether records carry the message's data (pipelines such as the procurement demo read it).
    include_data: bool = True
    #: Buffered records are written at least this often.
    flush_interval_secs: float = 1.0
    #: A buffer of this many records is written at once, without waiting for the interval.
    max_buffer: int = 5000
    #: A part file larger than this is closed and the next one started.
    max_file_bytes: int = 128 * 1024 * 1024


@dataclass
class FileTransferSection:
    """[file_transfer]: inbound file channels (runtime.files): whether this server polls them, claims, history."""

    #: Whether this server's workers poll the file channels (the admin API works either way).
    enabled: bool = True
    #: A claimed file whose claim was not renewed for this long is taken over by another worker (its
    #: owner is taken for dead); a claim whose owner process is gone on this host is taken over at once.
    claim_timeout_secs: float = 300.0
    #: Runs (the record of each file processed) older than this are deleted; a file dropped again after
    #: that is processed again even if its content was seen before.
    history_days: float = 30.0


@dataclass
class StatsSection:
    """[stats]: the worker registry's heartbeat and the dashboard's rate and service statistics (insight.stats)."""

    #: Seconds between two heartbeats of a worker in the worker registry.
    heartbeat_secs: float = 5.0
    #: Seconds between two flushes of a worker's counts to the database (the rates' resolution is 10 s).
    flush_interval_secs: float = 10.0
    #: Statistics older than this are deleted (the dashboard shows the last hour).
    retention_secs: float = 3600.0


@dataclass
class LoggingSection:
    """Log level and format of the server: one format for Conduit's and gunicorn's own lines."""

    level: str = 'INFO'
    format: str = '%(asctime)s %(levelname)s %(process)d %(name)s: %(message)s'
    #: One line per HTTP request (gunicorn's access log, in the format above); off by default.
    access_log: bool = False
    #: What an access-log line says, in gunicorn's access_log_format atoms.
    access_log_format: str = '%(h)s "%(r)s" %(s)s %(b)s %(M)sms "%(a)s"'
    #: Failed sign-ins are logged (user name and client address, never the password), at most this many
    #: lines per minute per worker; the rest are counted in the next line (0: not logged).
    auth_failures_per_minute: int = 10


@dataclass
class Settings:
    """All configuration of one server."""

    base_dir: Path = field(default_factory=Path.cwd)
    server: ServerSection = field(default_factory=ServerSection)
    database: DatabaseSection = field(default_factory=DatabaseSection)
    hot_deploy: HotDeploySection = field(default_factory=HotDeploySection)
    objects: ObjectsSection = field(default_factory=ObjectsSection)
    http: HttpSection = field(default_factory=HttpSection)
    admin: AdminSection = field(default_factory=AdminSection)
    dashboard: DashboardSection = field(default_factory=DashboardSection)
    sync: SyncSection = field(default_factory=SyncSection)
    pubsub: PubSubSection = field(default_factory=PubSubSection)
    websocket: WebSocketSection = field(default_factory=WebSocketSection)
    scheduler: SchedulerSection = field(default_factory=SchedulerSection)
    spark: SparkSection = field(default_factory=SparkSection)
    archive: ArchiveSection = field(default_factory=ArchiveSection)
    file_transfer: FileTransferSection = field(default_factory=FileTransferSection)
    stats: StatsSection = field(default_factory=StatsSection)
    logging: LoggingSection = field(default_factory=LoggingSection)
    #: Per service name, its configuration (the service's ``self.config``).
    services: dict[str, dict[str, Any]] = field(default_factory=dict)

    def path(self, value: str) -> Path:
        """Resolve a configured path against the project directory."""
        p = Path(value)
        return p if p.is_absolute() else self.base_dir / p

    @property
    def database_url(self) -> str:
        """The database URL with a relative SQLite path made absolute."""
        url = self.database.url
        prefix = 'sqlite:///'
        if url.startswith(prefix) and not url.startswith(prefix + '/') and ':memory:' not in url:
            return prefix + str(self.path(url[len(prefix):]))
        return url


_SECTIONS = [f.name for f in dataclasses.fields(Settings) if f.name not in ('base_dir', SERVICES_SECTION)]


def _convert(raw: Any, default: Any, where: str) -> Any:
    """Convert a file or environment value to the type of the key's default."""
    kind = type(default)
    if isinstance(raw, kind) and not (kind is int and isinstance(raw, bool)):
        return raw
    if isinstance(raw, str):
        try:
            if kind is bool:
                lowered = raw.strip().lower()
                if lowered not in ('1', '0', 'true', 'false', 'yes', 'no', 'on', 'off'):
                    raise ValueError(raw)
                return lowered in ('1', 'true', 'yes', 'on')
            return kind(raw)
        except ValueError:
            raise ConfigError(where, f'expected {kind.__name__}, got {raw!r}') from None
    if kind is float and isinstance(raw, int) and not isinstance(raw, bool):
        return float(raw)
    raise ConfigError(where, f'expected {kind.__name__}, got {type(raw).__name__}')


def default_config_path(env: dict[str, str] | None = None, cwd: Path | None = None) -> Path:
    """The server.toml to use: $CONDUIT_CONFIG, else config/server.toml here or in the nearest parent that has one.

    Without any, ./config/server.toml (which does not exist: the defaults apply).
    """
    env = os.environ if env is None else env
    if env.get(CONFIG_ENV):
        return Path(env[CONFIG_ENV])
    here = (cwd or Path.cwd()).resolve()
    for directory in (here, *here.parents):
        candidate = directory / 'config' / 'server.toml'
        if candidate.is_file():
            return candidate
    return here / 'config' / 'server.toml'


def _keys(section: Any) -> set[str]:
    return {f.name for f in dataclasses.fields(section)}


def service_env_var(service: str, key: str) -> str:
    """The environment variable overriding one key of a service's configuration."""
    return f'{ENV_PREFIX}SERVICES_{re.sub("[^A-Za-z0-9]", "_", service)}_{re.sub("[^A-Za-z0-9]", "_", key)}'.upper()


def known_env_vars(settings: Settings) -> list[str]:
    """Every environment variable Conduit reads for these settings."""
    names = [CONFIG_ENV, URL_ENV]
    for section_name in _SECTIONS:
        names += [f'{ENV_PREFIX}{section_name}_{key}'.upper() for key in _keys(getattr(settings, section_name))]
    for service, values in settings.services.items():
        names += [service_env_var(service, key) for key in values]
    return names


def unknown_env_vars(settings: Settings, env: dict[str, str] | None = None) -> list[tuple[str, str | None]]:
    """CONDUIT_* variables Conduit does not read, each with the closest one it does (or None)."""
    env = os.environ if env is None else env
    known = known_env_vars(settings)
    result: list[tuple[str, str | None]] = []
    for var in sorted(env):
        if not var.startswith(ENV_PREFIX) or var in known or var.startswith(_NOT_SETTINGS_PREFIXES):
            continue
        rest = var[len(ENV_PREFIX):]
        # A bare key name (CONDUIT_WORKERS) is the key of a section: name that section's variable.
        by_key = [k for k in known if k.endswith(f'_{rest}')]
        guess = _GUESSES.get(rest) or (by_key[0] if len(by_key) == 1 else None)
        if guess is None:
            # Compared without the prefix every name shares, which would make any two look alike.
            close = difflib.get_close_matches(rest, [k[len(ENV_PREFIX):] for k in known], n=1, cutoff=0.75)
            guess = ENV_PREFIX + close[0] if close else None
        result.append((var, guess))
    return result


def _check_env_names(settings: Settings, env: dict[str, str]) -> None:
    """A CONDUIT_<SECTION>_<KEY> variable whose section exists but key does not is a typo: say so."""
    # Longest section names first, so that a section named like another's prefix gets its own variables.
    prefixes = sorted(((f'{ENV_PREFIX}{name}_'.upper(), name) for name in _SECTIONS), key=lambda p: -len(p[0]))
    for var in env:
        for prefix, name in prefixes:
            if var.startswith(prefix):
                if var[len(prefix):].lower() not in _keys(getattr(settings, name)):
                    raise ConfigError(var, f'[{name}] has no key {var[len(prefix):].lower()!r}')
                break


def load_settings(path: Path | str | None = None, env: dict[str, str] | None = None) -> Settings:
    """Read server.toml and apply environment overrides.

    A file named explicitly (path, or $CONDUIT_CONFIG) must exist; without a name, a project with
    no config/server.toml runs on the defaults.
    """
    env = dict(os.environ if env is None else env)
    named = bool(path) or bool(env.get(CONFIG_ENV))
    path = Path(path) if path else default_config_path(env)
    data: dict[str, Any] = {}
    if path.exists():
        try:
            data = tomllib.loads(path.read_text(encoding='utf-8'))
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(str(path), f'not valid TOML: {e}') from None
        resolved = path.resolve()
        base_dir = resolved.parent.parent if resolved.parent.name == 'config' else resolved.parent
    elif named:
        raise ConfigError(str(path), 'no such file')
    else:
        base_dir = Path.cwd()
    settings = Settings(base_dir=base_dir)

    services = data.pop(SERVICES_SECTION, {})
    if not isinstance(services, dict) or not all(isinstance(v, dict) for v in services.values()):
        raise ConfigError(str(path), f'[{SERVICES_SECTION}] must hold one table per service, '
                                     f'e.g. [{SERVICES_SECTION}."crm.customer.create"]')
    settings.services = {name: dict(values) for name, values in services.items()}
    for section_name, values in data.items():
        if section_name not in _SECTIONS:
            raise ConfigError(str(path), f'unknown section [{section_name}]')
        if not isinstance(values, dict):
            raise ConfigError(str(path), f'[{section_name}] must be a table')
        section = getattr(settings, section_name)
        for key, raw in values.items():
            if key not in _keys(section):
                raise ConfigError(str(path), f'unknown key {key!r} in [{section_name}]')
            setattr(section, key, _convert(raw, getattr(section, key), f'{path} [{section_name}] {key}'))

    _check_env_names(settings, env)
    for section_name in _SECTIONS:
        section = getattr(settings, section_name)
        for f in dataclasses.fields(section):
            var = f'{ENV_PREFIX}{section_name}_{f.name}'.upper()
            if var in env:
                setattr(section, f.name, _convert(env[var], getattr(section, f.name), var))
    if settings.pubsub.rest_status_codes not in REST_STATUS_CODES:
        raise ConfigError('[pubsub] rest_status_codes', f'must be one of {", ".join(REST_STATUS_CODES)}, '
                                                         f'not {settings.pubsub.rest_status_codes!r}')
    if not 0 <= settings.database.dead_client_secs <= 3600:
        raise ConfigError('[database] dead_client_secs', f'must be 0 (off) or up to 3600 seconds, '
                                                         f'not {settings.database.dead_client_secs!r}')
    if not (settings.pubsub.queue_vacuum_secs == 0 or 0.1 <= settings.pubsub.queue_vacuum_secs <= 3600):
        raise ConfigError('[pubsub] queue_vacuum_secs', f'must be 0 (off) or 0.1 to 3600 seconds, '
                                                        f'not {settings.pubsub.queue_vacuum_secs!r}')
    if not settings.pubsub.queue_vacuum_dead_rows >= 1:
        raise ConfigError('[pubsub] queue_vacuum_dead_rows',
                          f'must be at least 1, not {settings.pubsub.queue_vacuum_dead_rows!r}')
    _check_websocket(settings.websocket)
    ft = settings.file_transfer
    if not ft.claim_timeout_secs >= 1:
        raise ConfigError('[file_transfer] claim_timeout_secs', f'must be at least 1, not {ft.claim_timeout_secs!r}')
    if not ft.history_days > 0:
        raise ConfigError('[file_transfer] history_days', f'must be more than 0, not {ft.history_days!r}')
    _check_dashboard(settings)
    for service, values in settings.services.items():
        for key, value in values.items():
            var = service_env_var(service, key)
            if var in env:
                values[key] = _convert_service_value(env[var], value, var)
    return settings


#: The bounds of each [websocket] number (low, high, what the error says): a bucket of rate 0 or
#: NaN would refuse every frame, a hello limit below a hello frame refuses every client.
_WEBSOCKET_BOUNDS: dict[str, tuple[float, float, str]] = {
    'hello_timeout_secs': (0.1, 3600, '0.1 to 3600 seconds'),
    'ping_interval_secs': (0.1, 86400, '0.1 to 86400 seconds'),
    'dead_peer_secs': (0.1, 86400, '0.1 to 86400 seconds'),
    'max_frame_bytes': (1024, 1 << 31, '1024 to 2^31 bytes'),
    'hello_max_bytes': (256, 1 << 20, '256 to 1048576 bytes (a hello frame must fit)'),
    'hello_frames_per_sec': (0.01, 1e6, '0.01 to 1000000 frames per second'),
    'hello_frame_burst': (1, 1e6, '1 to 1000000 frames'),
    'frames_per_sec': (0.01, 1e7, '0.01 to 10000000 frames per second'),
    'frame_burst': (1, 1e7, '1 to 10000000 frames'),
    'default_window': (1, 1e6, '1 to 1000000 messages'),
    'max_window': (1, 1e6, '1 to 1000000 messages'),
    'ack_deadline_secs': (0.001, 12 * 3600, '0.001 to 43200 seconds'),
    'max_subscriptions': (1, 1e6, '1 to 1000000'),
    'max_subscriptions_per_definition': (0, 1e9, '0 (no limit) or up to 1000000000'),
}


def _check_websocket(ws: WebSocketSection) -> None:
    """Every [websocket] number within its bounds (NaN never is); ConfigError naming the key."""
    for key, (low, high, what) in _WEBSOCKET_BOUNDS.items():
        value = getattr(ws, key)
        if isinstance(value, bool) or not low <= value <= high:
            raise ConfigError(f'[websocket] {key}', f'must be {what}, not {value!r}')
    if ws.default_window > ws.max_window:
        raise ConfigError('[websocket] default_window',
                          f'must be at most max_window ({ws.max_window}), not {ws.default_window!r}')
    if ws.hello_max_bytes > ws.max_frame_bytes:
        raise ConfigError('[websocket] hello_max_bytes',
                          f'must be at most max_frame_bytes ({ws.max_frame_bytes}), not {ws.hello_max_bytes!r}')


def _check_dashboard(settings: Settings) -> None:
    """The [dashboard] values that cannot work: a ConfigError naming the key."""
    dash = settings.dashboard
    for key in ('session_ttl_secs', 'idle_timeout_secs'):
        if not getattr(dash, key) >= 60:
            raise ConfigError(f'[dashboard] {key}', f'must be at least 60, not {getattr(dash, key)!r}')
    name = dash.viewer_username
    if not name or ':' in name or not name.isprintable() or len(name) > 200:
        raise ConfigError('[dashboard] viewer_username', 'must be 1 to 200 printable characters without ":"')
    if name == settings.admin.username:
        raise ConfigError('[dashboard] viewer_username', f'must differ from [admin] username ({name!r})')
    if '\x00' in dash.viewer_password:
        raise ConfigError('[dashboard] viewer_password', 'must not contain a NUL character')


def _convert_service_value(raw: str, current: Any, where: str) -> Any:
    """An environment value for a service key: of the file value's type when that is a scalar, else JSON."""
    if isinstance(current, bool | int | float | str):
        return _convert(raw, current, where)
    try:
        return json.loads(raw)
    except ValueError:
        raise ConfigError(where, f'expected JSON (the file gives a {type(current).__name__}), got {raw!r}') from None
