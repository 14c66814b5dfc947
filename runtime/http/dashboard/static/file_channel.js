/* /dashboard/file-channels/{name}: an inbound file channel's definition and its runs (paged, filtered by state),
 * each with why its file failed. Everything a partner system chose (file names, error texts) is drawn as text. */
'use strict';
(function () {
  const root = document.getElementById('file-channel');
  if (!root) return;
  const name = root.dataset.channel;
  const base = '/file-channels/' + encodeURIComponent(name);
  const PAGE = 25;
  const $ = (id) => document.getElementById(id);
  const stateSelect = $('runs-state');
  const known = Array.from(stateSelect.options, (o) => o.value);
  const initial = new URLSearchParams(location.search).get('state') || '';
  const view = { offset: 0, state: known.includes(initial) ? initial : '' };
  stateSelect.value = view.state;
  let poller = null;

  // The definition: what matters most first, then every other field the API gives, by name.
  const FIRST = ['problem', 'is_active', 'origin', 'directory', 'sftp_host', 'sftp_port', 'sftp_username',
    'patterns', 'recursive', 'format', 'records', 'topics', 'service', 'invoke_per', 'after', 'move_to', 'error_dir'];
  const HIDDEN = new Set(['name', 'updated_at', 'updated_at_iso']);

  function shown(value) {
    if (value === null || value === undefined || value === '') return null;
    if (typeof value === 'boolean') return value ? 'yes' : 'no';
    if (Array.isArray(value)) return value.length ? value.join(', ') : null;
    if (typeof value === 'object') return JSON.stringify(value);
    return String(value);
  }

  function definition(channel) {
    const sftp = !!channel.sftp_host;
    const keys = FIRST.filter((k) => k in channel)
      .concat(Object.keys(channel).filter((k) => !FIRST.includes(k)).sort())
      // SFTP fields mean nothing for a local directory.
      .filter((k) => !HIDDEN.has(k) && (sftp || !k.startsWith('sftp_')));
    const pairs = keys.map((k) => [k, k === 'records' && !channel.records ? "the format's default" : shown(channel[k])]);
    pairs.push(['updated', channel.updated_at_iso ? Dash.fmt.time(channel.updated_at_iso) : null]);
    PubSub.summary($('file-channel-definition'), pairs);
  }

  function state(run) {
    const cls = run.state === 'done' ? 'badge ok' : run.state === 'failed' ? 'badge bad' : 'badge';
    return Dash.text('span', run.state, cls);
  }

  const columns = [
    { label: 'File', render: (r) => Dash.text('code', r.file_name) },
    { label: 'State', render: state },
    { label: 'Started', render: (r) => Dash.fmt.time(r.started_at_iso) },
    { label: 'Finished', render: (r) => (r.finished_at_iso ? Dash.fmt.time(r.finished_at_iso)
                                                             : r.state === 'running' ? 'not yet' : '—') },
    { label: 'Size', render: (r) => Dash.fmt.size(r.size), num: true },
    { label: 'Records', render: (r) => Dash.fmt.number(r.records_done), num: true },
    { label: 'Published', render: (r) => Dash.fmt.number(r.published), num: true },
    { label: 'Invoked', render: (r) => Dash.fmt.number(r.invoked), num: true },
    { label: 'Why it failed', render: (r) => (r.error ? Dash.text('span', r.error, 'error-text') : '') },
  ];

  const load = Dash.latest(async (fresh) => {
    const query = PubSub.q({ limit: PAGE, offset: view.offset, state: view.state });
    let channel, page;
    try {
      [channel, page] = await fresh(Promise.all([Dash.api('GET', base), Dash.api('GET', base + '/runs' + query)]));
    } catch (e) {
      if (e.status === 404) {
        // Deleted or renamed meanwhile: say so once instead of at every poll.
        if (poller) poller.stop();
        Dash.notify('File channel ' + name + ' no longer exists: ' + e.message, 'error');
        return;
      }
      throw new Error('Loading the file channel failed: ' + e.message);
    }
    definition(channel.file_channel);
    if (!page.runs.length && view.offset > 0) {  // the history was swept meanwhile: to the last page left
      view.offset = page.total > 0 ? Math.floor((page.total - 1) / PAGE) * PAGE : 0;
      return load();
    }
    $('runs-total').textContent = Dash.fmt.number(page.total) + ' run(s)' +
      (view.state ? ' in state ' + view.state : '') + '.';
    Dash.table($('runs-list'), page.runs, columns, {
      empty: view.state ? 'No run of this channel is in state ' + view.state + '.'
                        : 'This channel has not processed any file yet.' });
    Dash.pager($('runs-pager'), { total: page.total, limit: PAGE, offset: view.offset, count: page.runs.length },
      (offset) => { view.offset = offset; load().catch((e) => Dash.notify(e.message, 'error')); });
  });

  stateSelect.addEventListener('change', () => {
    view.state = stateSelect.value;
    view.offset = 0;
    const url = new URL(location.href);
    if (view.state) url.searchParams.set('state', view.state); else url.searchParams.delete('state');
    history.replaceState(null, '', url);
    load().catch((e) => Dash.notify(e.message, 'error'));
  });
  $('runs-filter').addEventListener('submit', (event) => event.preventDefault());

  // A poll that redrew the pager would take the keyboard focus away from its buttons.
  poller = Dash.poll(() => ($('runs-pager').contains(document.activeElement) ? null : load()), 5000);
})();
