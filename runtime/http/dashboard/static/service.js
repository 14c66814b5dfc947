/* One service's page: source, input/output, what uses it, usage, and (admins only) the invoke form. */
(function () {
  'use strict';

  const root = document.getElementById('service');
  if (!root) {
    return;
  }
  const name = root.dataset.name;
  const base = `/services/${encodeURIComponent(name)}`;
  const el = (id) => document.getElementById(id);
  const secs = (value) => (value === null || value === undefined ? '–' : `${(value * 1000).toFixed(1)} ms`);

  async function loadSource() {
    try {
      const answer = await Dash.api('GET', `${base}/source`);
      el('service-source').textContent = answer.source === null ? 'The source is not available.' : answer.source;
      el('service-source-note').textContent = answer.truncated ? `Cut at ${answer.source.length} of ${answer.chars} characters.` : '';
    } catch (e) {
      el('service-source').textContent = `Could not load the source: ${e.message}`;
    }
  }

  function list(target, items, describe, empty) {
    const ul = el(target);
    ul.replaceChildren();
    if (!items.length) {
      const li = document.createElement('li');
      li.textContent = empty;
      li.className = 'empty';
      ul.append(li);
      return;
    }
    for (const item of items) {
      const li = document.createElement('li');
      li.textContent = describe(item);
      ul.append(li);
    }
  }

  async function loadUsage() {
    let answer;
    try {
      answer = await Dash.api('GET', `${base}/usage`);
    } catch (e) {
      el('service-usage-error').textContent = `Could not load what uses it: ${e.message}`;
      return;
    }
    el('service-usage-error').textContent = '';
    const u = answer.users;
    list('service-channels', u.channels, (c) => `${c.name} (${c.url_path})${c.is_active ? '' : ', inactive'}`, 'No channel.');
    list('service-jobs', u.jobs, (j) => `${j.name} (${j.roles.join(', ')})`, 'No job.');
    list('service-subscriptions', [...u.subscriptions, ...u.topic_hooks.map((t) => ({hook: t.name})),
      ...u.file_channels.map((f) => ({file: f.name}))],
    (s) => (s.hook ? `hook of topic ${s.hook}` : s.file ? `file channel ${s.file}` : `#${s.id} to ${s.pattern} (${s.kind})`),
    'No subscription, topic hook or file channel.');
    const st = answer.stats;
    el('stat-invocations').textContent = st.invocations;
    el('stat-errors').textContent = st.errors;
    el('stat-mean').textContent = secs(st.mean_secs);
    el('stat-p99').textContent = secs(st.p99_secs);
  }

  const form = el('invoke-form');
  if (form) {
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      const text = el('invoke-payload').value.trim();
      let payload = null;
      if (text) {
        try {
          payload = JSON.parse(text);
        } catch (e) {
          Dash.notify(`The payload is not JSON: ${e.message}`, 'error');
          return;
        }
      }
      const button = form.querySelector('button[type=submit]');
      button.disabled = true;
      const started = performance.now();
      try {
        const answer = await Dash.api('POST', `${base}/invoke`, payload);
        el('invoke-status').textContent = 'OK';
        el('invoke-response').textContent = JSON.stringify(answer.response, null, 2);
      } catch (e) {
        el('invoke-status').textContent = `Failed${e.status ? ` (${e.status})` : ''}`;
        el('invoke-response').textContent = e.message;
      } finally {
        el('invoke-time').textContent = `${(performance.now() - started).toFixed(1)} ms`;
        button.disabled = false;
      }
    });
  }

  loadSource();
  Dash.poll(loadUsage, 10000);
})();
