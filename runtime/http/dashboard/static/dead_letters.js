/* /dashboard/dead-letters: filter; open one (error, traceback), edit and re-drive it; re-drive or delete all matching. */
'use strict';
(function () {
  const PAGE = 50;
  const form = document.getElementById('dl-filter');
  let cursors = [null];
  let filter = {};
  let open = null;

  const params = new URLSearchParams(location.search);
  for (const key of ['topic', 'sub_id', 'error']) {
    if (params.get(key)) form.elements[key].value = params.get(key);
  }

  function readFilter() {
    const f = {};
    for (const key of ['topic', 'error']) {
      const v = form.elements[key].value.trim();
      if (v) f[key] = v;
    }
    const sub = form.elements.sub_id.value.trim();
    if (sub) f.sub_id = /^[0-9]+$/.test(sub) ? Number(sub) : sub;  // the server names what is wrong
    for (const key of ['since', 'until']) {
      const v = form.elements[key].value;
      if (v) f[key] = new Date(v).toISOString();
    }
    return f;
  }

  const columns = [
    { label: 'Message', render: (d) => PubSub.button(d.msg_id, () => openLetter(d.sub_id, d.msg_id), 'secondary') },
    { label: 'Topic', render: (d) => d.topic_name },
    { label: 'Queue', render: (d) => PubSub.link('/dashboard/queues/' + d.sub_id, '#' + d.sub_id) },
    { label: 'Last error', render: (d) => d.last_error },
    { label: 'Reason', render: (d) => d.reason },
    { label: 'Attempts', render: (d) => String(d.delivery_count) },
    { label: 'Dead for', render: (d) => PubSub.age(d.dead_time_iso) },
  ];

  const load = Dash.latest(async (fresh) => {
    const before = cursors[cursors.length - 1];
    const page = await fresh(PubSub.api('GET', '/dead-letters' + PubSub.q({ ...filter, limit: PAGE, before })));
    Dash.table(document.getElementById('dl-table'), page.dead_letters, columns,
      { empty: Object.keys(filter).length ? 'No dead letter matches this filter.' : 'No dead letters: every message was delivered.' });
    const index = cursors.length - 1;
    Dash.pager(document.getElementById('dl-pager'),
      { offset: index * PAGE, limit: PAGE, count: page.dead_letters.length, hasMore: page.next_before !== null },
      (o) => {
        if (o > index * PAGE) cursors.push(page.next_before); else if (cursors.length > 1) cursors.pop();
        load().catch((e) => Dash.notify('Loading dead letters failed: ' + e.message, 'error'));
      });
  });

  function letterPath() {
    return '/queues/' + open.subId + '/dead-letters/' + encodeURIComponent(open.msgId);
  }

  async function openLetter(subId, msgId) {
    open = { subId, msgId };
    const answer = await PubSub.act('Opening the dead letter', () => PubSub.api('GET', letterPath()));
    if (!answer) return;
    const d = answer.dead_letter;
    document.getElementById('letter-msg-id').textContent = msgId;
    PubSub.summary(document.getElementById('letter-meta'), [
      ['Topic', d.topic_name], ['Queue', PubSub.link('/dashboard/queues/' + subId, '#' + subId)],
      ['Reason', d.reason], ['Attempts', d.delivery_count], ['Dead-lettered', Dash.fmt.time(d.dead_time_iso)],
      ['Published', Dash.fmt.time(d.pub_time_iso)], ['Size', Dash.fmt.size(d.size)],
    ]);
    document.getElementById('letter-error').textContent = d.last_error || 'none';
    document.getElementById('letter-traceback').textContent = d.last_traceback || 'none recorded';
    document.getElementById('letter-data').value = PubSub.dataText(d.data);
    document.getElementById('dl-letter').hidden = false;
    document.getElementById('letter-data').focus();
  }

  function closeLetter() {
    document.getElementById('dl-letter').hidden = true;
    open = null;
  }

  /* The filter of the list shown (not what the form holds now, if it was changed without applying it). */
  async function bulk(action, verb) {
    const f = filter;
    const counted = await PubSub.act('Counting the matching dead letters', () => PubSub.api('POST', '/dead-letters/count', f));
    if (!counted) return;
    if (!counted.count) {
      Dash.notify('No dead letter matches this filter: nothing to ' + verb + '.', 'info');
      return;
    }
    const shown = counted.capped ? 'more than ' + counted.count : String(counted.count);
    const described = Object.entries(f).map(([k, v]) => k + ' ' + v).join(', ') || 'no filter: every dead letter';
    if (!(await Dash.confirm(verb[0].toUpperCase() + verb.slice(1) + ' ' + shown + ' dead letter(s) matching this filter (' +
      described + ')?', { ok: verb[0].toUpperCase() + verb.slice(1) + ' ' + shown }))) return;
    await PubSub.act(verb[0].toUpperCase() + verb.slice(1) + ' all matching', () => PubSub.api('POST', '/dead-letters/' + action,
      { ...f, expected: counted.count }), (r) => {
      Dash.notify((action === 'redrive' ? 'Re-driven: ' + r.redriven : 'Deleted: ' + r.deleted) + ' dead letter(s).', 'ok');
      closeLetter();
      cursors = [null];
      return load();
    });
  }

  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    filter = readFilter();
    cursors = [null];
    load().catch((e) => Dash.notify('Loading dead letters failed: ' + e.message, 'error'));
  });

  if (Dash.canWrite) {
    document.getElementById('dl-redrive-all').addEventListener('click', () => bulk('redrive', 're-drive'));
    document.getElementById('dl-delete-all').addEventListener('click', () => bulk('delete', 'delete'));
    document.getElementById('letter-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const data = PubSub.parseData(document.getElementById('letter-data').value);
      await PubSub.act('Saving the dead letter', () => PubSub.api('PATCH', letterPath(), { data }),
        () => { Dash.notify('Dead letter ' + open.msgId + ' saved.', 'ok'); return load(); });
    });
    document.getElementById('letter-redrive').addEventListener('click', async () => {
      await PubSub.act('Re-driving the dead letter', () => PubSub.api('POST', '/queues/' + open.subId + '/redrive', { msg_ids: [open.msgId] }),
        () => { Dash.notify('Dead letter ' + open.msgId + ' re-driven.', 'ok'); closeLetter(); return load(); });
    });
    document.getElementById('letter-delete').addEventListener('click', async () => {
      if (!(await Dash.confirm('Delete dead letter ' + open.msgId + '?'))) return;
      await PubSub.act('Deleting the dead letter', () => PubSub.api('DELETE', letterPath()),
        () => { Dash.notify('Dead letter ' + open.msgId + ' deleted.', 'ok'); closeLetter(); return load(); });
    });
  }
  filter = readFilter();
  Dash.poll(load, 5000);
})();
