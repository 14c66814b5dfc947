/* Overview page: workers, totals, live rates of the last hour (plotly.js) and the deepest queues.
   Everything comes from the API mirror and is refreshed by Dash.poll, without reloading the page. */
(function () {
  'use strict';

  const POLL_MS = 5000;
  const SERIES = [
    ['published', 'Published'],
    ['delivered', 'Delivered'],
    ['failed', 'Failed'],
    ['dead_lettered', 'Dead-lettered'],
  ];
  const root = document.getElementById('overview');
  if (!root) {
    return;
  }
  const el = (id) => document.getElementById(id);

  function showError(where, error) {
    el(where).textContent = `Could not load: ${error.message}`;
  }

  async function loadWorkers() {
    const answer = await Dash.api('GET', '/workers');
    const rows = answer.workers.map((w) => ({
      server: w.server,
      worker: `${w.host}:${w.pid}`,
      heartbeat: w.stale ? `${Dash.fmt.age(w.heartbeat_age_secs)} (stale)` : Dash.fmt.age(w.heartbeat_age_secs),
      leases: w.leases,
      lease_names: w.lease_names.join(', ') + (w.leases > w.lease_names.length ? ', …' : ''),
    }));
    Dash.table(el('workers'), rows, [
      {key: 'server', label: 'Server'},
      {key: 'worker', label: 'Worker'},
      {key: 'heartbeat', label: 'Heartbeat age'},
      {key: 'leases', label: 'Leases', num: true},
      {key: 'lease_names', label: 'Held'},
    ], {empty: 'No worker has registered yet.'});
    el('workers-error').textContent = '';
  }

  async function loadTotals() {
    const t = await Dash.api('GET', '/stats/totals');
    const approx = (n, estimated) => (estimated ? `~${Dash.fmt.number(n)}` : Dash.fmt.number(n));
    el('total-services').textContent = Dash.fmt.number(t.services);
    el('total-topics').textContent = Dash.fmt.number(t.topics);
    el('total-subscriptions').textContent = Dash.fmt.number(t.subscriptions);
    el('total-waiting').textContent = approx(t.messages_waiting, t.messages_waiting_estimated);
    el('total-dead').textContent = approx(t.dead_letters, t.dead_letters_estimated);
    el('totals-error').textContent = '';
  }

  async function loadRates() {
    const answer = await Dash.api('GET', '/stats/rates');
    const x = answer.buckets.map((b) => new Date(b.bucket * 1000));
    const traces = SERIES.map(([key, name]) => ({
      x, y: answer.buckets.map((b) => b[`${key}_per_sec`]), name, type: 'scatter', mode: 'lines',
    }));
    const layout = {
      margin: {t: 10, r: 10, b: 40, l: 50}, height: 300, legend: {orientation: 'h'},
      yaxis: {title: {text: 'per second'}, rangemode: 'tozero'}, xaxis: {type: 'date'},
    };
    Plotly.react(el('rates-chart'), traces, layout, {displaylogo: false, responsive: true});
    el('rates-error').textContent = '';
  }

  async function loadDeepest() {
    const answer = await Dash.api('GET', '/queues/deepest?limit=10');
    const rows = answer.queues.map((q) => ({
      sub_id: q.sub_id,
      pattern: q.pattern,
      subscriber: q.subscriber || q.kind,
      depth: q.depth,
      oldest: q.oldest_message ? Dash.fmt.age(q.oldest_message.age_secs) : '',
      dead_letters: q.dead_letters,
      state: q.is_active ? 'active' : 'paused',
    }));
    Dash.table(el('deepest'), rows, [
      {key: 'sub_id', label: 'Subscription', render: (r) => Dash.el('a', {href: `/dashboard/queues/${r.sub_id}`}, `#${r.sub_id}`)},
      {key: 'pattern', label: 'Topic'},
      {key: 'subscriber', label: 'Subscriber'},
      {key: 'depth', label: 'Depth', num: true, render: (r) => Dash.fmt.number(r.depth)},
      {key: 'oldest', label: 'Oldest message'},
      {key: 'dead_letters', label: 'Dead letters', num: true},
      {key: 'state', label: 'State'},
    ], {empty: 'Every queue is empty.'});
    el('deepest-error').textContent = '';
  }

  function refresh() {
    return Promise.all([
      loadWorkers().catch((e) => showError('workers-error', e)),
      loadTotals().catch((e) => showError('totals-error', e)),
      loadRates().catch((e) => showError('rates-error', e)),
      loadDeepest().catch((e) => showError('deepest-error', e)),
    ]);
  }

  Dash.poll(refresh, POLL_MS);
})();
