/* Conduit dashboard: the helpers every page script uses (window.Dash). No dependencies.
 *
 * Dash.api(method, path, body)      -> Promise of the JSON answer; path '/topics' means /dashboard/api/topics.
 *                                      Adds the CSRF header; a failed call rejects with an Error whose message
 *                                      is the server's (error.status holds the HTTP status). A 401 (the session
 *                                      ended) goes to the sign-in form.
 * Dash.table(el, rows, columns, {empty, caption}) renders a table into el; a column is
 *                                      {key, label, render(row) -> string | Node, num: bool}.
 * Dash.pager(el, {total, limit, offset, hasMore}, onPage(offset)) renders Previous/Next and the range shown.
 * Dash.poll(fn, ms)                 -> {stop()}: fn() now and every ms after it settles; paused while the tab is hidden.
 * Dash.latest(fn)                   -> load(...args): calls fn(fresh, ...args), for a part of a page loaded from more
 *                                      than one place (a poll and the user's actions). fn awaits each answer it draws
 *                                      through fresh(promise), which settles like promise only if no later load() has
 *                                      started meanwhile; an older answer or failure never settles, so the rest of fn
 *                                      does not run: it neither draws over the newer one nor shows an error. load()
 *                                      returns fn's Promise, or one resolved (undefined) once an answer is dropped
 *                                      (so Dash.poll and the actions awaiting it go on). Example:
 *                                        load = Dash.latest(async (fresh) => draw(await fresh(Dash.api('GET', '/x'))))
 * Dash.confirm(text, {ok, danger}) -> Promise<boolean>, in a real <dialog>.
 * Dash.notify(text, kind)           shows a banner ('info', 'ok', 'error') in the aria-live region.
 * Dash.fmt.time / age / size / number / json   formatting.
 * Dash.el(tag, attrs, ...children)  builds an element (text children are never parsed as HTML).
 * Dash.text(tag, value, cls), Dash.button(label, onClick, cls)   an element holding text; a type=button button.
 * Dash.data(id)                     the JSON of a <script type="application/json" id=...> block.
 * Dash.canWrite, Dash.csrf          from the page's <body> (a viewer: canWrite false).
 */
(function () {
  'use strict';

  var API = '/dashboard/api';
  var body = document.body;
  var Dash = {};

  Dash.csrf = body ? body.getAttribute('data-csrf') || '' : '';
  Dash.canWrite = body ? body.getAttribute('data-can-write') === 'true' : false;

  Dash.el = function (tag, attrs) {
    var node = document.createElement(tag);
    if (attrs) {
      Object.keys(attrs).forEach(function (key) {
        var value = attrs[key];
        if (value === null || value === undefined || value === false) return;
        if (key === 'text') node.textContent = value;
        else if (key === 'class') node.className = value;
        else if (key.slice(0, 2) === 'on' && typeof value === 'function') node.addEventListener(key.slice(2), value);
        else node.setAttribute(key, value === true ? '' : String(value));
      });
    }
    for (var i = 2; i < arguments.length; i++) append(node, arguments[i]);
    return node;
  };

  // An element holding value as text (never as HTML), with an optional class.
  Dash.text = function (tag, value, cls) {
    var node = document.createElement(tag);
    node.textContent = value === null || value === undefined ? '' : String(value);
    if (cls) node.className = cls;
    return node;
  };

  Dash.button = function (label, onClick, cls) {
    var node = Dash.text('button', label, cls);
    node.type = 'button';
    node.addEventListener('click', onClick);
    return node;
  };

  function append(node, child) {
    if (child === null || child === undefined || child === false) return;
    if (Array.isArray(child)) { child.forEach(function (c) { append(node, c); }); return; }
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }

  Dash.data = function (id) {
    var node = document.getElementById(id);
    return node ? JSON.parse(node.textContent || 'null') : null;
  };

  Dash.api = function (method, path, bodyValue) {
    var url = path.indexOf('/dashboard/') === 0 ? path : API + path;
    var options = {method: method, credentials: 'same-origin', headers: {'Accept': 'application/json'}};
    if (method !== 'GET' && method !== 'HEAD') options.headers['X-CSRF-Token'] = Dash.csrf;
    if (bodyValue !== undefined) {
      options.headers['Content-Type'] = 'application/json';
      options.body = JSON.stringify(bodyValue);
    }
    return fetch(url, options).then(function (resp) {
      return resp.text().then(function (text) {
        var answer = null;
        try { answer = text ? JSON.parse(text) : {}; } catch (e) { answer = null; }
        if (resp.status === 401) {
          window.location.assign('/dashboard/sign-in?next=' + encodeURIComponent(location.pathname + location.search));
        }
        if (!resp.ok) {
          var details = answer && answer.details ? answer.details : (resp.status + ' ' + resp.statusText);
          var error = new Error(details);
          error.status = resp.status;
          error.answer = answer;
          throw error;
        }
        if (answer === null) throw new Error('the server answered something that is not JSON');
        return answer;
      });
    }, function () {
      throw new Error('the server cannot be reached');
    });
  };

  Dash.table = function (el, rows, columns, options) {
    options = options || {};
    el.textContent = '';
    if (!rows || rows.length === 0) {
      el.appendChild(Dash.el('p', {'class': 'empty', text: options.empty || 'Nothing to show.'}));
      return null;
    }
    var head = Dash.el('tr', null, columns.map(function (c) {
      return Dash.el('th', {scope: 'col', 'class': c.num ? 'num' : null, text: c.label});
    }));
    var bodyRows = rows.map(function (row) {
      return Dash.el('tr', null, columns.map(function (c) {
        var value = c.render ? c.render(row) : row[c.key];
        return Dash.el('td', {'class': c.num ? 'num' : null}, value === null || value === undefined ? '' : value);
      }));
    });
    var table = Dash.el('table', null, options.caption ? Dash.el('caption', {text: options.caption}) : null,
                        Dash.el('thead', null, head), Dash.el('tbody', null, bodyRows));
    var wrap = Dash.el('div', {'class': 'table-wrap'}, table);
    el.appendChild(wrap);
    return table;
  };

  Dash.pager = function (el, page, onPage) {
    el.textContent = '';
    var limit = page.limit || 50, offset = page.offset || 0, count = page.count;
    var total = page.total === undefined ? null : page.total;
    var shownTo = offset + (count === undefined ? limit : count);
    if (total !== null) shownTo = Math.min(shownTo, total);
    var hasMore = page.hasMore !== undefined ? page.hasMore : (total !== null && offset + limit < total);
    if (total === 0 || (total === null && offset === 0 && !hasMore && count === 0)) return;
    var range = total !== null ? (offset + 1) + '–' + shownTo + ' of ' + Dash.fmt.number(total)
                               : (offset + 1) + '–' + shownTo;
    var prev = Dash.el('button', {type: 'button', 'class': 'secondary', disabled: offset <= 0, text: 'Previous',
                                  onclick: function () { onPage(Math.max(0, offset - limit)); }});
    var next = Dash.el('button', {type: 'button', 'class': 'secondary', disabled: !hasMore, text: 'Next',
                                  onclick: function () { onPage(offset + limit); }});
    el.appendChild(Dash.el('nav', {'class': 'pager', 'aria-label': 'Pages'}, prev,
                           Dash.el('span', {'class': 'range', text: range}), next));
  };

  Dash.poll = function (fn, ms) {
    var timer = null, stopped = false, running = false;
    function run() {
      timer = null;
      if (stopped) return;
      if (document.hidden) return;  // resumed by visibilitychange
      running = true;
      Promise.resolve().then(fn).catch(function (e) { Dash.notify(e.message || String(e), 'error'); })
        .then(function () { running = false; if (!stopped && !document.hidden) timer = setTimeout(run, ms); });
    }
    function onVisibility() {
      if (!document.hidden && !timer && !running && !stopped) run();
    }
    document.addEventListener('visibilitychange', onVisibility);
    run();
    return {stop: function () {
      stopped = true;
      if (timer) clearTimeout(timer);
      document.removeEventListener('visibilitychange', onVisibility);
    }};
  };

  Dash.latest = function (fn) {
    var started = 0;
    return function () {
      var call = ++started;
      var dropped;
      var outrun = new Promise(function (resolve) { dropped = resolve; });
      function fresh(promise) {
        return new Promise(function (resolve, reject) {
          Promise.resolve(promise).then(function (value) {
            if (call === started) resolve(value); else dropped();
          }, function (error) {
            if (call === started) reject(error); else dropped();
          });
        });
      }
      var args = [fresh].concat(Array.prototype.slice.call(arguments));
      var run;
      try { run = Promise.resolve(fn.apply(this, args)); } catch (e) { run = Promise.reject(e); }
      return Promise.race([run, outrun]);
    };
  };

  Dash.confirm = function (text, options) {
    options = options || {};
    return new Promise(function (resolve) {
      var ok = Dash.el('button', {type: 'button', 'class': options.danger === false ? null : 'danger',
                                  text: options.ok || 'Confirm'});
      var cancel = Dash.el('button', {type: 'button', 'class': 'secondary', text: 'Cancel'});
      var dialog = Dash.el('dialog', {'aria-label': options.title || 'Please confirm'},
                           Dash.el('p', {text: text}), Dash.el('div', {'class': 'actions'}, cancel, ok));
      var answered = false;
      function close(value) {
        if (answered) return;
        answered = true;
        if (dialog.open) dialog.close();
        dialog.remove();
        resolve(value);
      }
      ok.addEventListener('click', function () { close(true); });
      cancel.addEventListener('click', function () { close(false); });
      dialog.addEventListener('cancel', function () { close(false); });
      dialog.addEventListener('close', function () { close(false); });
      document.body.appendChild(dialog);
      dialog.showModal();
      cancel.focus();
    });
  };

  Dash.notify = function (text, kind) {
    kind = kind || 'info';
    var region = document.getElementById('notify');
    if (!region) { region = Dash.el('div', {id: 'notify', 'class': 'notify', role: 'status', 'aria-live': 'polite'});
                   document.body.insertBefore(region, document.body.firstChild); }
    var close = Dash.el('button', {type: 'button', 'aria-label': 'Dismiss', text: '×'});
    var notice = Dash.el('div', {'class': 'notice ' + kind, role: kind === 'error' ? 'alert' : null},
                         Dash.el('span', {text: text}), close);
    close.addEventListener('click', function () { notice.remove(); });
    region.appendChild(notice);
    while (region.children.length > 3) region.removeChild(region.firstChild);
    if (kind !== 'error') setTimeout(function () { notice.remove(); }, 8000);
    return notice;
  };

  function toDate(value) {
    if (value === null || value === undefined || value === '') return null;
    if (value instanceof Date) return value;
    var d = typeof value === 'number' ? new Date(value * 1000) : new Date(value);
    return isNaN(d.getTime()) ? null : d;
  }
  function pad(n) { return n < 10 ? '0' + n : String(n); }

  Dash.fmt = {
    /* An ISO time or UNIX seconds as local 'YYYY-MM-DD HH:MM:SS'. */
    time: function (value) {
      var d = toDate(value);
      if (!d) return '—';
      return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
             pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds());
    },
    /* Seconds (a number), or the time since an ISO time, as '12 s', '5 min', '3 h', '2 d'. */
    age: function (value) {
      var secs = typeof value === 'number' ? value : null;
      if (secs === null) { var d = toDate(value); if (!d) return '—'; secs = (Date.now() - d.getTime()) / 1000; }
      if (secs < 0) secs = 0;
      if (secs < 90) return Math.round(secs) + ' s';
      if (secs < 5400) return Math.round(secs / 60) + ' min';
      if (secs < 172800) return Math.round(secs / 3600) + ' h';
      return Math.round(secs / 86400) + ' d';
    },
    /* Bytes as '512 B', '1.5 kB', '3.2 MB'. */
    size: function (bytes) {
      if (bytes === null || bytes === undefined) return '—';
      var units = ['B', 'kB', 'MB', 'GB', 'TB'], i = 0, n = Number(bytes);
      while (n >= 1000 && i < units.length - 1) { n /= 1000; i++; }
      return (i === 0 ? String(n) : n.toFixed(n < 10 ? 1 : 0)) + ' ' + units[i];
    },
    number: function (n) {
      if (n === null || n === undefined) return '—';
      return Number(n).toLocaleString('en-US');
    },
    json: function (value) { return JSON.stringify(value, null, 2); }
  };

  function setUpNav() {
    var toggle = document.querySelector('.nav-toggle');
    var nav = document.getElementById('nav');
    if (!toggle || !nav) return;
    toggle.addEventListener('click', function () {
      var open = nav.classList.toggle('open');
      toggle.setAttribute('aria-expanded', open ? 'true' : 'false');
    });
  }
  setUpNav();

  window.Dash = Dash;
}());
