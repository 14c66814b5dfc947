/* /dashboard/topics: a page of topics by name, searchable, refreshed while the tab is visible. */
'use strict';
(function () {
  const PAGE = 50;
  const table = document.getElementById('topics-table');
  const pager = document.getElementById('topics-pager');
  const input = document.getElementById('topics-q');
  let offset = 0;
  let search = new URLSearchParams(location.search).get('q') || '';
  input.value = search;

  const columns = [
    { label: 'Topic', render: (t) => PubSub.link('/dashboard/topics/' + encodeURIComponent(t.name), t.name) },
    { label: 'Depth', render: (t) => String(t.depth.gd + t.depth.non_gd) },
    { label: 'Subscriptions', render: (t) => String(t.subscriptions) },
    { label: 'Last publication', render: (t) => (t.last_pub_time_iso ? PubSub.age(t.last_pub_time_iso) + ' ago' : 'none') },
    { label: 'Active', render: (t) => (t.is_active ? 'yes' : 'no') },
  ];

  const load = Dash.latest(async (fresh) => {
    const page = await fresh(PubSub.api('GET', '/topics' + PubSub.q({ q: search, limit: PAGE, offset })));
    Dash.table(table, page.topics, columns, { empty: search ? 'No topic name contains “' + search + '”.' : 'No topics yet.' });
    Dash.pager(pager, { offset, limit: PAGE, total: page.total }, (o) => { offset = o; show(); });
  });

  document.getElementById('topics-search').addEventListener('submit', (ev) => {
    ev.preventDefault();
    search = input.value.trim();
    offset = 0;
    show();
  });
  // A load the user asked for (a search, another page) says when it failed; the poll has its own notice.
  function show() {
    load().catch((e) => Dash.notify('Loading topics failed: ' + e.message, 'error'));
  }

  Dash.poll(load, 5000);
})();
