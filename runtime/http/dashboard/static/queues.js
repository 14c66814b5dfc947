/* /dashboard/queues: a page of queues by subscription id, searchable, refreshed while the tab is visible. */
'use strict';
(function () {
  const PAGE = 50;
  const table = document.getElementById('queues-table');
  const pager = document.getElementById('queues-pager');
  const input = document.getElementById('queues-q');
  let offset = 0;
  let search = new URLSearchParams(location.search).get('q') || '';
  input.value = search;

  const columns = [
    { label: 'Queue', render: (s) => PubSub.link('/dashboard/queues/' + s.id, '#' + s.id) },
    { label: 'Topic or pattern', render: (s) => s.topic },
    { label: 'Kind', render: (s) => s.kind + (s.service ? ' → ' + s.service : s.security ? ' (' + s.security + ')' : '') },
    { label: 'Depth', render: (s) => String(s.queue_depth) },
    { label: 'Oldest message', render: (s) => (s.oldest_message ? PubSub.age(s.oldest_message.pub_time_iso) + ' old' : 'empty') },
    { label: 'Dead letters', render: (s) => (s.dead_letters ? PubSub.link('/dashboard/dead-letters?sub_id=' + s.id, String(s.dead_letters)) : '0') },
    { label: 'Active', render: (s) => (s.is_active ? 'yes' : 'paused') },
  ];

  const load = Dash.latest(async (fresh) => {
    const page = await fresh(PubSub.api('GET', '/queues' + PubSub.q({ q: search, limit: PAGE, offset })));
    Dash.table(table, page.queues, columns, { empty: search ? 'No queue matches “' + search + '”.' : 'No subscriptions yet.' });
    Dash.pager(pager, { offset, limit: PAGE, total: page.total }, (o) => { offset = o; show(); });
  });

  document.getElementById('queues-search').addEventListener('submit', (ev) => {
    ev.preventDefault();
    search = input.value.trim();
    offset = 0;
    show();
  });
  // A load the user asked for (a search, another page) says when it failed; the poll has its own notice.
  function show() {
    load().catch((e) => Dash.notify('Loading queues failed: ' + e.message, 'error'));
  }

  Dash.poll(load, 5000);
})();
