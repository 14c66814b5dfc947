/* Services page: deployed services with their usage in the last hour, searched and paged on the server. */
(function () {
  'use strict';

  const PAGE = 25;
  const root = document.getElementById('services');
  if (!root) {
    return;
  }
  const form = document.getElementById('services-search');
  const input = document.getElementById('services-q');
  const error = document.getElementById('services-error');
  let offset = 0;

  const secs = (value) => (value === null || value === undefined ? '' : `${(value * 1000).toFixed(1)} ms`);

  const load = Dash.latest(async (fresh) => {
    const query = new URLSearchParams({search: input.value, limit: String(PAGE), offset: String(offset)});
    let answer;
    try {
      answer = await fresh(Dash.api('GET', `/stats/services?${query}`));
    } catch (e) {
      error.textContent = `Could not load the services: ${e.message}`;
      return;
    }
    error.textContent = '';
    const rows = answer.services.map((s) => ({
      name: s.name,
      invocations: s.invocations, errors: s.errors, mean: secs(s.mean_secs), p99: secs(s.p99_secs),
    }));
    Dash.table(document.getElementById('services-table'), rows, [
      {key: 'name', label: 'Service',
        render: (r) => Dash.el('a', {href: `/dashboard/services/${encodeURIComponent(r.name)}`}, r.name)},
      {key: 'invocations', label: 'Invocations (1 h)', num: true},
      {key: 'errors', label: 'Errors', num: true},
      {key: 'mean', label: 'Mean', num: true},
      {key: 'p99', label: 'p99', num: true},
    ], {empty: input.value ? 'No deployed service matches.' : 'No service is deployed.'});
    Dash.pager(document.getElementById('services-pager'),
      {total: answer.total, limit: PAGE, offset, count: answer.services.length},
      (next) => { offset = next; load(); });
  });

  form.addEventListener('submit', (event) => {
    event.preventDefault();
    offset = 0;
    load();
  });
  Dash.poll(load, 10000);
})();
