/* /dashboard/queues/{id}: a queue page by page; open a message, edit it in place, delete it, dead-letter it; purge. */
'use strict';
(function () {
  const root = document.getElementById('queue');
  const subId = root.dataset.subId;
  const base = '/queues/' + subId;
  const PAGE = 50;
  let cursors = [null];  // the cursor each page shown so far starts after (keyset pages: same cost at any depth)
  let open = null;

  const columns = [
    { label: 'Message', render: (m) => PubSub.button(m.msg_id, () => openMessage(m.msg_id), 'secondary') },
    { label: 'Priority', render: (m) => String(m.priority) },
    { label: 'Age', render: (m) => PubSub.age(m.pub_time_iso) },
    { label: 'Attempts', render: (m) => String(m.delivery_count) },
    { label: 'Next attempt', render: (m) => Dash.fmt.time(m.next_attempt_time_iso) },
    { label: 'Size', render: (m) => Dash.fmt.size(m.size) },
    { label: 'Data', render: (m) => m.data_preview },
  ];

  const load = Dash.latest(async (fresh) => {
    const index = cursors.length - 1;
    const [queue, page] = await fresh(Promise.all([
      PubSub.api('GET', base), PubSub.api('GET', base + '/messages' + PubSub.q({ limit: PAGE, after: cursors[index] }))]));
    const s = queue.queue;
    PubSub.summary(document.getElementById('queue-summary'), [
      ['Topic or pattern', PubSub.link('/dashboard/topics/' + encodeURIComponent(s.topic), s.topic)],
      ['Kind', s.kind + (s.service ? ' → ' + s.service : '')],
      ['Depth', s.queue_depth],
      ['Oldest message', s.oldest_message ? PubSub.age(s.oldest_message.pub_time_iso) + ' old' : 'empty'],
      ['Dead letters', s.dead_letters],
      ['Active', s.is_active ? 'yes' : 'paused'],
    ]);
    Dash.table(document.getElementById('queue-messages'), page.messages, columns, { empty: 'The queue is empty.' });
    if (!page.messages.length && index > 0) {  // the page emptied (delivered meanwhile): back to the one before
      cursors.pop();
      return load();
    }
    Dash.pager(document.getElementById('queue-pager'),
      { offset: index * PAGE, limit: PAGE, total: page.depth, count: page.messages.length, hasMore: page.next_after !== null },
      (o) => {
        if (o > index * PAGE) cursors.push(page.next_after); else if (cursors.length > 1) cursors.pop();
        load().catch((e) => Dash.notify('Loading the queue failed: ' + e.message, 'error'));
      });
  });

  async function openMessage(msgId) {
    const answer = await PubSub.act('Opening the message', () => PubSub.api('GET', base + '/messages/' + encodeURIComponent(msgId)));
    if (!answer) return;
    const m = answer.message;
    open = msgId;
    document.getElementById('message-msg-id').textContent = msgId;
    PubSub.summary(document.getElementById('message-meta'), [
      ['Topic', m.topic_name], ['Published', Dash.fmt.time(m.pub_time_iso)], ['Attempts', m.delivery_count],
      ['Next attempt', Dash.fmt.time(m.next_attempt_time_iso)], ['Expires', Dash.fmt.time(m.expiration_time_iso)],
      ['Size', Dash.fmt.size(m.size)], ['MIME type', m.mime_type], ['Publisher', m.publisher],
      ['Correlation id', m.correl_id], ['Leased to a client', m.leased ? 'yes' : 'no'],
    ]);
    document.getElementById('message-data').value = PubSub.dataText(m.data);
    document.getElementById('message-priority').value = m.priority;
    document.getElementById('message-error').textContent = (m.last_error || 'none') + (m.last_traceback ? '\n\n' + m.last_traceback : '');
    document.getElementById('queue-message').hidden = false;
    document.getElementById('message-data').focus();
  }

  function closeMessage() {
    document.getElementById('queue-message').hidden = true;
    open = null;
  }

  if (Dash.canWrite) {
    const item = () => base + '/messages/' + encodeURIComponent(open);
    document.getElementById('message-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const body = {
        data: PubSub.parseData(document.getElementById('message-data').value),
        priority: Number(document.getElementById('message-priority').value),
      };
      await PubSub.act('Saving the message', () => PubSub.api('PATCH', item(), body), (r) => {
        Dash.notify('Message ' + open + ' saved' + (r.held_by > 1 ? ' (held by ' + r.held_by + ' queues)' : '') + '.', 'ok');
        return load();
      });
    });
    document.getElementById('message-delete').addEventListener('click', async () => {
      if (!(await Dash.confirm('Delete message ' + open + ' from this queue?'))) return;
      await PubSub.act('Deleting the message', () => PubSub.api('DELETE', item()), () => {
        Dash.notify('Message ' + open + ' deleted.', 'ok');
        closeMessage();
        return load();
      });
    });
    document.getElementById('message-dead-letter').addEventListener('click', async () => {
      if (!(await Dash.confirm('Move message ' + open + ' to the dead letters? It will not be delivered until re-driven.'))) return;
      await PubSub.act('Moving the message', () => PubSub.api('POST', item() + '/dead-letter', {}), () => {
        Dash.notify('Message ' + open + ' moved to the dead letters.', 'ok');
        closeMessage();
        return load();
      });
    });
    document.getElementById('queue-purge').addEventListener('click', async () => {
      const queue = await PubSub.act('Counting the queue', () => PubSub.api('GET', base));
      if (!queue) return;
      const depth = queue.queue.queue_depth;
      if (!(await Dash.confirm('Purge the queue of subscription #' + subId + '? ' + depth + ' message(s) will be deleted.'))) return;
      await PubSub.act('Purging the queue', () => PubSub.api('DELETE', base + '/messages'), (r) => {
        Dash.notify('Purged: ' + r.deleted + ' message(s) deleted.', 'ok');
        closeMessage();
        cursors = [null];
        return load();
      });
    });
  }
  Dash.poll(load, 5000);
})();
