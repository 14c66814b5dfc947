/* Shared by the pub/sub pages (topics, queues, dead letters): paths of the API mirror, data as text, pages. */
'use strict';
(function () {
  /* The API mirror: '/topics' is /dashboard/api/topics. */
  function api(method, path, body) {
    return Dash.api(method, path, body);
  }

  function q(params) {
    const parts = [];
    for (const [k, v] of Object.entries(params)) {
      if (v !== undefined && v !== null && v !== '') parts.push(encodeURIComponent(k) + '=' + encodeURIComponent(v));
    }
    return parts.length ? '?' + parts.join('&') : '';
  }

  /* A message's data as the text an operator edits: JSON pretty-printed, text as it is. */
  function dataText(data) {
    return typeof data === 'string' ? data : JSON.stringify(data, null, 2);
  }

  /* What an edit sends back: JSON when the text parses as JSON, else the text itself. */
  function parseData(text) {
    try {
      return JSON.parse(text);
    } catch (e) {
      return text;
    }
  }

  function link(href, text) {
    const a = document.createElement('a');
    a.href = href;
    a.textContent = text;
    return a;
  }

  function button(text, onClick, cls) {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = text;
    if (cls) b.className = cls;
    b.addEventListener('click', onClick);
    return b;
  }

  /* Key figures as small cards: each dt/dd pair of the <dl> in a div of its own. */
  function summary(el, pairs) {
    el.replaceChildren();
    for (const [k, v] of pairs) {
      const value = v instanceof Node ? v : v === null || v === undefined ? '—' : String(v);
      el.append(Dash.el('div', { 'class': 'summary-item' }, Dash.el('dt', { 'class': 'k', text: k }),
        Dash.el('dd', { 'class': 'v' }, value)));
    }
  }

  function age(iso) {
    return iso ? Dash.fmt.age(iso) : '—';
  }

  /* Runs an action, tells the user it worked or what failed (the server's message), then refreshes. */
  async function act(what, fn, then) {
    try {
      const result = await fn();
      if (then) await then(result);
      return result;
    } catch (e) {
      Dash.notify(what + ' failed: ' + e.message, 'error');
      return undefined;
    }
  }

  window.PubSub = { api, q, dataText, parseData, link, button, summary, age, act };
})();
