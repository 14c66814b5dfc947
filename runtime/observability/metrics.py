"""Prometheus metrics: each worker counts, ``GET /metrics`` serves the server's workers added up.

What is counted, and where:

- pub/sub: ``conduit_pubsub_published_total{topic}``, ``..._delivered_total``, ``..._failed_total``
  (failed attempts) and ``..._dead_lettered_total`` per topic and subscription, by a
  ``PubSubObserver`` on the broker;
- queue depths, read from the database at scrape time: ``conduit_pubsub_queue_depth`` and
  ``conduit_pubsub_dead_letters`` per subscription, ``conduit_pubsub_topic_depth`` per topic;
- HTTP: ``conduit_http_requests_total{method, route, status}`` and
  ``conduit_http_request_duration_seconds{method, route}`` by the falcon middleware of
  ``runtime.http.metrics``. Every label is bounded, so that no client can add series:
  ``method`` is one of the standard methods or ``OTHER``, ``route`` the URI template of the
  routed resource or ``channel`` for everything else (REST channels, unknown paths, requests
  refused before routing), ``status`` a status code;
- ``conduit_invoke_duration_seconds{service}``: every run of a service, whatever the channel;
- WebSockets: ``conduit_websocket_connections`` (open connections of this worker),
  ``conduit_websocket_frames_total{action}`` (client frames; the action label is bounded by
  ``runtime.observability.websocket_metrics.FRAME_ACTIONS``, anything else counts as ``invalid``), fed by the
  connections through the ``WebSocketMetrics`` methods below, and
  ``conduit_websocket_subscriptions_attached`` (subscriptions whose client is attached to this
  worker, asked of the attachments at scrape time);
- ``conduit_pubsub_subscriptions_expired_total{kind}``: subscriptions the sweeper deleted for
  inactivity (``limit_sub_inactivity``), by the observer event ``on_subscription_expired``;
- file transfer: ``conduit_file_transfer_files_total{channel, outcome}`` (processed, failed,
  skipped) and ``conduit_file_transfer_published_total{channel}``, counted by the file processors.

The hot paths (publish, deliver, invoke) only bump plain dicts: a histogram observation is a bisect
and two additions, well under a microsecond. prometheus_client is used at scrape time only, so
nothing here takes a lock. A scrape copies the dicts on the hub (greenlets change them, threads must
not read them) and reads the queue depths, then builds and formats the exposition in gevent's
thread pool from those copies alone, so that a large exposition does not stop the worker's hub.

Several gunicorn workers: each worker counts what it did, and every scrape shows the sums over the
server's workers, whichever worker answers it (``runtime.observability.metrics_share``: the workers write their
counts into ``server.metrics_dir``, and what exited workers counted is kept), with
``conduit_workers``, the number of live workers added up. No series has a ``pid`` label. For a
cluster, scrape every server: each shows its own workers only. prometheus_client's multiprocess mode
was left out on purpose: it writes every increment to a memory-mapped file under a lock, too slow
for the invoke path, and it cannot carry this collector's counters.
"""

from __future__ import annotations

import logging
import os
import uuid
from bisect import bisect_left
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import gevent
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.exposition import generate_latest

from runtime.db.blocking import run_transaction
from runtime.observability.metrics_share import MetricsDir, apply_record, record_of
from runtime.observability.websocket_metrics import FRAME_ACTIONS, frame_action
from runtime.pubsub import queue_statements
from runtime.pubsub.observers import PubSubObserver
from runtime.util.timefmt import iso

if TYPE_CHECKING:
    from sqlalchemy import Engine

    from runtime.pubsub.registry import Registry, SubInfo
    from runtime.pubsub.statements import Delivery, Publication

_log = logging.getLogger(__name__)

#: Upper bounds of the latency buckets, in seconds.
LATENCY_BUCKETS_SECS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                        2.5, 5.0, 10.0, 30.0)

#: Publications per topic each worker remembers for the admin API's topic details.
RECENT_PER_TOPIC = 20

#: Route label of requests no resource routed (REST channels, unknown paths, requests refused before routing).
CHANNEL_ROUTE = 'channel'

#: HTTP methods counted under their own name.
STANDARD_METHODS = frozenset(('GET', 'HEAD', 'POST', 'PUT', 'DELETE', 'PATCH', 'OPTIONS'))

#: Method label of every other method (a client may send any token as a method).
OTHER_METHOD = 'OTHER'

#: Status label of a response whose status is not a code from 100 to 599.
OTHER_STATUS = '0'


class Histogram:
    """Per-key bucket counts and sums; ``observe`` is cheap enough for the invoke path."""

    __slots__ = ('bounds', 'series')

    def __init__(self, bounds: tuple[float, ...] = LATENCY_BUCKETS_SECS) -> None:
        self.bounds = bounds
        #: key -> [count per bucket (the last is +Inf)..., sum]
        self.series: dict[Any, list[float]] = {}

    def observe(self, key: Any, value: float) -> None:
        """Record one value under key."""
        series = self.series.get(key)
        if series is None:
            series = self.series[key] = [0] * (len(self.bounds) + 2)
        series[bisect_left(self.bounds, value)] += 1
        series[-1] += value

    def snapshot(self) -> list[tuple[Any, list[float]]]:
        """A copy of every series, safe to read in another thread while observations go on."""
        return [(key, list(series)) for key, series in list(self.series.items())]

    def family(self, name: str, doc: str, labels: list[str]) -> HistogramMetricFamily:
        """The exposition of every key (a key is a tuple of label values, or one value)."""
        return _histogram_family(name, doc, labels, self.bounds, self.snapshot())


def _histogram_family(name: str, doc: str, labels: list[str], bounds: tuple[float, ...],
                      items: list[tuple[Any, list[float]]]) -> HistogramMetricFamily:
    family = HistogramMetricFamily(name, doc, labels=labels)
    for key, series in items:
        cumulative, buckets = 0.0, []
        for bound, count in zip((*map(str, bounds), '+Inf'), series[:-1], strict=True):
            cumulative += count
            buckets.append((bound, cumulative))
        values = key if isinstance(key, tuple) else (key,)
        family.add_metric([*map(str, values)], buckets, series[-1])
    return family


def _subscriber(sub: SubInfo) -> str:
    # Never the sub_key nor a push URL (it may carry credentials).
    return sub.service or sub.security or sub.kind


class PubSubMetrics(PubSubObserver):
    """Counts publications, deliveries, failures and dead letters; remembers recent publications."""

    def __init__(self) -> None:
        self.published: dict[str, int] = {}
        #: (topic, subscription id, subscriber) -> count
        self.delivered: dict[tuple[str, str, str], int] = {}
        self.failed: dict[tuple[str, str, str], int] = {}
        #: (topic, subscription id, subscriber, reason) -> count
        self.dead_lettered: dict[tuple[str, str, str, str], int] = {}
        #: kind -> subscriptions deleted for inactivity
        self.expired: dict[str, int] = {}
        self.recent: dict[int, deque[tuple[Any, ...]]] = {}

    def __repr__(self) -> str:
        return 'PubSubMetrics()'

    def after_publish(self, pub: Publication, overflowed: bool) -> None:
        """Count a publication and remember it for the topic's details."""
        self.published[pub.topic_name] = self.published.get(pub.topic_name, 0) + 1
        recent = self.recent.get(pub.topic_id)
        if recent is None:
            recent = self.recent[pub.topic_id] = deque(maxlen=RECENT_PER_TOPIC)
        recent.append((pub.msg_id, pub.topic_name, pub.pub_time, pub.priority, pub.size, pub.has_gd, pub.publisher,
                       pub.mime_type, overflowed))

    def after_deliver(self, sub: SubInfo, delivery: Delivery, ok: bool, error: BaseException | None,
                      duration_secs: float) -> None:
        """Count a delivery attempt."""
        counts = self.delivered if ok else self.failed
        key = (delivery.topic_name, str(sub.id), _subscriber(sub))
        counts[key] = counts.get(key, 0) + 1

    def after_dead_letter(self, sub: SubInfo, delivery: Delivery, reason: str, error: str) -> None:
        """Count a dead letter."""
        key = (delivery.topic_name, str(sub.id), _subscriber(sub), reason)
        self.dead_lettered[key] = self.dead_lettered.get(key, 0) + 1

    def on_subscription_expired(self, sub: SubInfo) -> None:
        """Count a subscription deleted for inactivity (by kind only: its id would be a series per deletion)."""
        self.expired[sub.kind] = self.expired.get(sub.kind, 0) + 1

    def recent_publications(self, topic_id: int) -> list[dict[str, Any]]:
        """Publications of a topic this worker saw, newest first (no data: it is not kept)."""
        return [{'msg_id': r[0], 'topic_name': r[1], 'pub_time_iso': iso(r[2]), 'priority': r[3],
                 'size': r[4], 'has_gd': r[5], 'publisher': r[6], 'mime_type': r[7], 'overflowed': r[8]}
                for r in reversed(self.recent.get(topic_id, ()))]


class FileTransferMetrics:
    """Counts of inbound file channels: files processed, failed and skipped, records published, per channel."""

    #: What is counted per channel.
    FILE_OUTCOMES = ('processed', 'failed', 'skipped')

    def __init__(self) -> None:
        #: (channel, outcome) -> files
        self.files: dict[tuple[str, str], int] = {}
        #: channel -> messages published
        self.published: dict[str, int] = {}

    def count(self, channel: str, what: str, n: int = 1) -> None:
        """Count n files of an outcome, or n messages published ('published') by a channel."""
        if what == 'published':
            if n:
                self.published[channel] = self.published.get(channel, 0) + n
        else:
            key = (channel, what)
            self.files[key] = self.files.get(key, 0) + n


class Metrics:
    """The metrics of one runtime: counters fed by the broker, the invoker and the HTTP layer.

    It is also the ``WebSocketMetrics`` (``observability.websocket_metrics``) the WebSocket connections report to.
    """

    def __init__(self, engine: Engine, registry: Callable[[], Registry],
                 websocket_attached: Callable[[], int] | None = None) -> None:
        """engine: the database whose queue depths are read; registry: the broker's topics and subscriptions now;
        websocket_attached: how many subscriptions have their WebSocket client attached to this worker now."""
        self._engine = engine
        self._registry = registry
        self._websocket_attached = websocket_attached or (lambda: 0)
        self.pubsub = PubSubMetrics()
        self.files = FileTransferMetrics()
        self.invoke = Histogram()
        self.http_requests: dict[tuple[str, str, str], int] = {}
        self.http_latency = Histogram()
        #: Open WebSocket connections of this worker.
        self.websocket_connections = 0
        #: action -> client frames received; every known action is shown from the start, at 0.
        self.websocket_frames: dict[str, int] = dict.fromkeys(sorted(FRAME_ACTIONS), 0)
        #: The server's directory of worker counts when this worker's are added up with others' (share()).
        self._shared: MetricsDir | None = None
        #: This worker run's id in that directory (a pid can be reused, a run id not).
        self._run_id = uuid.uuid4().hex

    # WebSocketMetrics

    def websocket_opened(self) -> None:
        """A WebSocket connection was accepted by this worker."""
        self.websocket_connections += 1

    def websocket_closed(self) -> None:
        """A WebSocket connection of this worker ended."""
        self.websocket_connections -= 1

    def websocket_frame(self, action: str) -> None:
        """A client frame was received (an action the protocol does not know counts as 'invalid')."""
        label = frame_action(action)
        self.websocket_frames[label] += 1

    def recent_publications(self, topic_id: int) -> list[dict[str, Any]]:
        """Publications of a topic this worker saw, newest first."""
        return self.pubsub.recent_publications(topic_id)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric, formatted in gevent's thread pool."""
        snapshot = self.snapshot()
        return gevent.get_hub().threadpool.apply(generate_latest, (snapshot,))

    def collect(self) -> Iterator[Metric]:
        """Every metric family, the database gauges read now."""
        return self.snapshot().collect()

    def snapshot(self) -> MetricsSnapshot:
        """Copies of every counter (the server's workers added up when shared), and the queue depths read now;
        call it on the hub."""
        counters = self._counters()
        if self._shared is not None:
            own = record_of(counters, self._run_id)
            try:
                # Written first: once every worker has written since the last change, all scrapes agree.
                total, counters.workers = gevent.get_hub().threadpool.apply(self._shared.combined,
                                                                            (os.getpid(), own, True))
                apply_record(counters, total)
            except OSError as e:
                _log.warning('metrics: the other workers\' counts not read from %s (%s: %s); this worker\'s only',
                             self._shared.path, type(e).__name__, e)
        counters.queues, counters.topics = self._depths()
        return counters

    def _counters(self) -> MetricsSnapshot:
        """Copies of this worker's counters, no database read; call it on the hub."""
        pubsub = self.pubsub
        # Copied before anything yields (files, database): other greenlets change the dicts meanwhile.
        counters = MetricsSnapshot(
            published=list(pubsub.published.items()),
            delivered=list(pubsub.delivered.items()), failed=list(pubsub.failed.items()),
            dead_lettered=list(pubsub.dead_lettered.items()), http_requests=list(self.http_requests.items()),
            invoke=(self.invoke.bounds, self.invoke.snapshot()),
            http_latency=(self.http_latency.bounds, self.http_latency.snapshot()),
            expired=list(pubsub.expired.items()), websocket_connections=self.websocket_connections,
            websocket_frames=list(self.websocket_frames.items()), websocket_attached=self._websocket_attached(),
            files=list(self.files.files.items()), files_published=list(self.files.published.items()))
        return counters

    def share(self, directory: MetricsDir, interval_secs: float, spawn: Callable[..., Any]) -> None:
        """Add up this worker's counts with the other workers' of the server in directory (metrics_share):
        write them there now and every interval_secs (in a greenlet made by spawn)."""
        self._shared = directory
        self.flush()
        spawn(self._flush_every, max(interval_secs, 0.05), name='metrics-share')

    def flush(self) -> None:
        """Write this worker's counts to the shared directory now (a worker that stops calls it last)."""
        if self._shared is not None:
            self._shared.write(os.getpid(), record_of(self._counters(), self._run_id))

    def _flush_every(self, interval_secs: float) -> None:
        while True:
            gevent.sleep(interval_secs)
            record = record_of(self._counters(), self._run_id)  # copied on the hub, written in a thread
            try:
                gevent.get_hub().threadpool.apply(self._shared.write, (os.getpid(), record))
            except OSError as e:
                _log.warning('metrics: counts not written to %s (%s: %s)', self._shared.path, type(e).__name__, e)

    def _depths(self) -> tuple[list[tuple[list[str], int, int]] | None, list[tuple[str, int, int]] | None]:
        """Per subscription (labels, depth, dead letters) and per topic (name, GD, non-GD); None if unread."""
        registry = self._registry()
        try:
            stats, topic_depths = run_transaction(
                self._engine, lambda c: (queue_statements.queue_stats(c), queue_statements.topic_depths(c)),
                write=False)
        except Exception as e:
            _log.warning('metrics: queue depths not read (%s: %s)', type(e).__name__, e)
            return None, None
        queues = []
        for sub in sorted(registry.subs.values(), key=lambda s: s.id):
            row = stats.get(sub.id, {})
            queues.append(([str(sub.id), sub.kind, _subscriber(sub), sub.pattern], row.get('depth', 0),
                           row.get('dead_letters', 0)))
        topics = []
        for topic in sorted(registry.topics.values(), key=lambda t: t.id):
            depth = topic_depths.get(topic.id, {'gd': 0, 'non_gd': 0})
            topics.append((topic.name, depth['gd'], depth['non_gd']))
        return queues, topics


@dataclass
class MetricsSnapshot:
    """Copies of the metrics at one moment: a collector that reads nothing else, so any thread may run it."""

    published: list[tuple[str, int]]
    delivered: list[tuple[tuple[str, str, str], int]]
    failed: list[tuple[tuple[str, str, str], int]]
    dead_lettered: list[tuple[tuple[str, str, str, str], int]]
    http_requests: list[tuple[tuple[str, str, str], int]]
    #: (bucket bounds, series) of a Histogram.
    invoke: tuple[tuple[float, ...], list[tuple[Any, list[float]]]]
    http_latency: tuple[tuple[float, ...], list[tuple[Any, list[float]]]]
    #: (kind, subscriptions deleted for inactivity)
    expired: list[tuple[str, int]] = field(default_factory=list)
    websocket_connections: int = 0
    #: (action, client frames received)
    websocket_frames: list[tuple[str, int]] = field(default_factory=list)
    websocket_attached: int = 0
    #: ((channel, outcome), files) and (channel, messages published) of inbound file channels
    files: list[tuple[tuple[str, str], int]] = field(default_factory=list)
    files_published: list[tuple[str, int]] = field(default_factory=list)
    #: Live workers whose counts are in this snapshot.
    workers: int = 1
    #: None when the database could not be read.
    queues: list[tuple[list[str], int, int]] | None = None
    topics: list[tuple[str, int, int]] | None = None

    def collect(self) -> Iterator[Metric]:
        """Every metric family (prometheus_client's collector protocol)."""
        family = CounterMetricFamily('conduit_pubsub_published', 'Messages published', labels=['topic'])
        for topic, count in self.published:
            family.add_metric([topic], count)
        yield family
        for name, doc, items in (('delivered', 'Messages delivered successfully', self.delivered),
                                 ('failed', 'Delivery attempts that failed (retried or dead-lettered)', self.failed)):
            family = CounterMetricFamily(f'conduit_pubsub_{name}', doc,
                                         labels=['topic', 'subscription', 'subscriber'])
            for key, count in items:
                family.add_metric([*key], count)
            yield family
        family = CounterMetricFamily('conduit_pubsub_dead_lettered', 'Messages moved to a dead-letter queue',
                                     labels=['topic', 'subscription', 'subscriber', 'reason'])
        for key, count in self.dead_lettered:
            family.add_metric([*key], count)
        yield family
        family = CounterMetricFamily('conduit_http_requests', 'HTTP requests answered',
                                     labels=['method', 'route', 'status'])
        for key, count in self.http_requests:
            family.add_metric([*key], count)
        yield family
        yield _histogram_family('conduit_http_request_duration_seconds', 'HTTP request time', ['method', 'route'],
                                *self.http_latency)
        yield _histogram_family('conduit_invoke_duration_seconds', 'Service run time, any channel', ['service'],
                                *self.invoke)
        family = CounterMetricFamily('conduit_pubsub_subscriptions_expired',
                                     'Subscriptions deleted with their queue for inactivity (limit_sub_inactivity)',
                                     labels=['kind'])
        for kind, count in self.expired:
            family.add_metric([kind], count)
        yield family
        yield GaugeMetricFamily('conduit_workers', "Live workers of this server (their counts are added up)",
                                value=self.workers)
        yield GaugeMetricFamily('conduit_websocket_connections', "Open WebSocket connections of this server's workers",
                                value=self.websocket_connections)
        yield GaugeMetricFamily('conduit_websocket_subscriptions_attached',
                                "Subscriptions whose WebSocket client is attached to one of this server's workers",
                                value=self.websocket_attached)
        family = CounterMetricFamily('conduit_websocket_frames', 'WebSocket frames received from clients, by action '
                                     "('invalid': not a frame of the protocol)", labels=['action'])
        for action, count in self.websocket_frames:
            family.add_metric([action], count)
        yield family
        family = CounterMetricFamily('conduit_file_transfer_files', 'Files of inbound file channels, by outcome '
                                     '(processed, failed, skipped: same content as a file processed before)',
                                     labels=['channel', 'outcome'])
        for key, count in self.files:
            family.add_metric([*key], count)
        yield family
        family = CounterMetricFamily('conduit_file_transfer_published', 'Messages published from the records of '
                                     'files', labels=['channel'])
        for channel, count in self.files_published:
            family.add_metric([channel], count)
        yield family
        if self.queues is not None:
            labels = ['subscription', 'kind', 'subscriber', 'topic']
            queue = GaugeMetricFamily('conduit_pubsub_queue_depth', 'Messages waiting in a subscription queue '
                                      '(stored ones; non-GD messages held in memory are not counted)', labels=labels)
            dead = GaugeMetricFamily('conduit_pubsub_dead_letters', 'Messages in a dead-letter queue', labels=labels)
            for values, depth, dead_letters in self.queues:
                queue.add_metric(values, depth)
                dead.add_metric(values, dead_letters)
            yield queue
            yield dead
        if self.topics is not None:
            topics = GaugeMetricFamily('conduit_pubsub_topic_depth', 'Messages waiting in a topic for a subscriber',
                                       labels=['topic', 'gd'])
            for name, gd, non_gd in self.topics:
                topics.add_metric([name, 'true'], gd)
                topics.add_metric([name, 'false'], non_gd)
            yield topics
