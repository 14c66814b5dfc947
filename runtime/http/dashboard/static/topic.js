/* /dashboard/topics/{name}: attributes (editable), publish, subscriptions, last messages, messages waiting. */
'use strict';
(function () {
  const root = document.getElementById('topic');
  const name = root.dataset.topic;
  const path = '/topics/' + encodeURIComponent(name);
  const PAGE = 20;
  const ATTRS = [
    ['is_active', 'bool'], ['has_gd', 'bool'], ['is_api_sub_allowed', 'bool'],
    ['on_no_subs', ['accept', 'drop']], ['on_max_depth', ['overflow', 'reject']],
    ['max_depth_gd', 'int'], ['max_depth_non_gd', 'int'], ['depth_check_freq', 'int'],
    ['limit_retention', 'int'], ['limit_message_expiry', 'int'], ['limit_sub_inactivity', 'int'],
    ['hook_service', 'text'],
  ];
  let waitingCursors = [null];
  let open = null;
  let attrsShown = false;

  function attrField(key, kind, value) {
    const wrap = document.createElement('div');
    wrap.className = kind === 'bool' ? 'field bool' : 'field';
    const id = 'attr-' + key;
    const label = document.createElement('label');
    label.htmlFor = id;
    label.textContent = key;
    let input;
    if (Array.isArray(kind)) {
      input = document.createElement('select');
      for (const option of kind) input.append(new Option(option, option, false, option === value));
    } else {
      input = document.createElement('input');
      if (kind === 'bool') { input.type = 'checkbox'; input.checked = !!value; }
      else if (kind === 'int') { input.type = 'number'; input.min = '0'; input.value = value; }
      else { input.maxLength = 200; input.value = value || ''; }
    }
    input.id = id;
    input.name = key;
    input.dataset.kind = Array.isArray(kind) ? 'choice' : kind;
    input.disabled = !Dash.canWrite;
    wrap.append(label, input);
    return wrap;
  }

  function showAttrs(topic) {
    if (attrsShown) return;  // never overwrite what the user is editing
    attrsShown = true;
    const fields = document.getElementById('topic-attrs-fields');
    fields.replaceChildren(...ATTRS.filter(([k]) => k in topic).map(([k, kind]) => attrField(k, kind, topic[k])));
  }

  const subColumns = [
    { label: 'Queue', render: (s) => PubSub.link('/dashboard/queues/' + s.id, '#' + s.id) },
    { label: 'Pattern', render: (s) => s.topic },
    { label: 'Kind', render: (s) => s.kind + (s.service ? ' → ' + s.service : '') },
    { label: 'Depth', render: (s) => String(s.queue_depth) },
    { label: 'Oldest message', render: (s) => (s.oldest_message ? PubSub.age(s.oldest_message.pub_time_iso) + ' old' : 'empty') },
    { label: 'Dead letters', render: (s) => (s.dead_letters ? PubSub.link('/dashboard/dead-letters?sub_id=' + s.id, String(s.dead_letters)) : '0') },
    { label: 'Active', render: (s) => (s.is_active ? 'yes' : 'paused') },
  ];
  const lastColumns = [
    { label: 'Message', render: (m) => m.msg_id },
    { label: 'Published', render: (m) => PubSub.age(m.pub_time_iso) + ' ago' },
    { label: 'Priority', render: (m) => String(m.priority) },
    { label: 'Size', render: (m) => Dash.fmt.size(m.size) },
    { label: 'Where', render: (m) => (m.in_topic ? 'waiting in topic' : m.stored ? 'queued or dead' : 'delivered') },
  ];
  const waitingColumns = [
    { label: 'Message', render: (m) => PubSub.button(m.msg_id, () => openWaiting(m.msg_id), 'secondary') },
    { label: 'Published', render: (m) => PubSub.age(m.pub_time_iso) + ' ago' },
    { label: 'Priority', render: (m) => String(m.priority) },
    { label: 'Size', render: (m) => Dash.fmt.size(m.size) },
    { label: 'Data', render: (m) => m.data_preview },
  ];

  const load = Dash.latest(async (fresh) => {
    const details = await fresh(PubSub.api('GET', path + '?last=10'));
    const t = details.topic;
    PubSub.summary(document.getElementById('topic-summary'), [
      ['Depth (waiting in topic)', details.depth.gd + details.depth.non_gd],
      ['Subscriptions', details.subscriptions.length],
      ['Last publication', details.last_pub_time_iso ? PubSub.age(details.last_pub_time_iso) + ' ago' : 'none'],
      ['Origin', t.origin],
    ]);
    showAttrs(t);
    Dash.table(document.getElementById('topic-subs'), details.subscriptions, subColumns, { empty: 'No subscription receives this topic.' });
    Dash.table(document.getElementById('topic-last'), details.last_publications, lastColumns, { empty: 'Nothing published yet.' });
    await loadWaiting();
  });

  const loadWaiting = Dash.latest(async (fresh) => {
    const after = waitingCursors[waitingCursors.length - 1];
    const page = await fresh(PubSub.api('GET', '/topic-messages' + PubSub.q({ topic: name, limit: PAGE, after })));
    Dash.table(document.getElementById('topic-waiting'), page.messages, waitingColumns, { empty: 'No message waits in this topic.' });
    const index = waitingCursors.length - 1;
    Dash.pager(document.getElementById('topic-waiting-pager'),
      { offset: index * PAGE, limit: PAGE, total: page.waiting, count: page.messages.length, hasMore: page.next_after !== null },
      (o) => {
        if (o > index * PAGE) waitingCursors.push(page.next_after); else if (waitingCursors.length > 1) waitingCursors.pop();
        loadWaiting().catch((e) => Dash.notify('Loading the waiting messages failed: ' + e.message, 'error'));
      });
  });

  async function openWaiting(msgId) {
    const answer = await PubSub.act('Opening the message', () => PubSub.api('GET', '/topic-messages/' + encodeURIComponent(msgId)));
    if (!answer) return;
    open = msgId;
    document.getElementById('waiting-msg-id').textContent = msgId;
    document.getElementById('waiting-data').value = PubSub.dataText(answer.message.data);
    const box = document.getElementById('waiting-message');
    box.hidden = false;
    document.getElementById('waiting-data').focus();
  }

  if (Dash.canWrite) {
    document.getElementById('topic-attrs').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const body = {};
      for (const input of document.querySelectorAll('#topic-attrs-fields [name]')) {
        const kind = input.dataset.kind;
        body[input.name] = kind === 'bool' ? input.checked : kind === 'int' ? Number(input.value) : input.value;
      }
      await PubSub.act('Saving the attributes', () => PubSub.api('PATCH', path, body), () => {
        Dash.notify('Attributes saved.', 'ok');
        attrsShown = false;
        return load();
      });
    });
    document.getElementById('publish-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const body = {
        topic: name, data: PubSub.parseData(document.getElementById('publish-data').value),
        priority: Number(document.getElementById('publish-priority').value),
        has_gd: document.getElementById('publish-gd').checked,
      };
      await PubSub.act('Publishing', () => PubSub.api('POST', '/publish', body), (r) => {
        Dash.notify('Published ' + r.msg_id + '.', 'ok');
        return load();
      });
    });
    document.getElementById('waiting-form').addEventListener('submit', async (ev) => {
      ev.preventDefault();
      const data = PubSub.parseData(document.getElementById('waiting-data').value);
      await PubSub.act('Saving the message', () => PubSub.api('PATCH', '/topic-messages/' + encodeURIComponent(open), { data }),
        () => { Dash.notify('Message ' + open + ' saved.', 'ok'); return loadWaiting(); });
    });
    document.getElementById('waiting-delete').addEventListener('click', async () => {
      if (!(await Dash.confirm('Delete message ' + open + ' from the topic? No subscription will receive it.'))) return;
      await PubSub.act('Deleting the message', () => PubSub.api('DELETE', '/topic-messages/' + encodeURIComponent(open)), () => {
        Dash.notify('Message ' + open + ' deleted.', 'ok');
        document.getElementById('waiting-message').hidden = true;
        return loadWaiting();
      });
    });
  }
  Dash.poll(load, 5000);
})();
