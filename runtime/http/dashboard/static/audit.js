/* The audit page: the log a page at a time, filtered, with each entry's before and after side by side. */
(function () {
  'use strict';
  var PAGE = 50;
  var form = document.getElementById('audit-filter');
  var list = document.getElementById('audit-list');
  var pagers = [document.getElementById('audit-pager-top'), document.getElementById('audit-pager')];
  var offset = 0;

  function filters() {
    var query = new URLSearchParams();
    ['kind', 'actor', 'source'].forEach(function (key) {
      var value = form.elements[key].value.trim();
      if (value) query.set(key, value);
    });
    return query;
  }

  function lines(value) {
    if (value === null || value === undefined) return [];
    return Object.keys(value).sort().map(function (key) { return [key, JSON.stringify(value[key])]; });
  }

  function side(title, value, other) {
    var pre = Dash.el('pre', {'aria-label': title});
    if (value === null || value === undefined) {
      pre.appendChild(Dash.el('span', {'class': 'muted', text: '(none)'}));
    } else {
      lines(value).forEach(function (pair) {
        var changed = !other || JSON.stringify(other[pair[0]]) !== pair[1];
        pre.appendChild(Dash.el('div', {'class': changed ? 'changed' : null, text: pair[0] + ': ' + pair[1]}));
      });
    }
    return Dash.el('div', null, Dash.el('h3', {text: title}), pre);
  }

  function details(entry) {
    return Dash.el('div', {'class': 'diff'}, side('Before', entry.before, entry.after),
                   side('After', entry.after, entry.before));
  }

  function toggleButton(entry) {
    if (!entry.before && !entry.after) return Dash.el('span', {'class': 'muted', text: '—'});
    var button = Dash.el('button', {type: 'button', 'class': 'secondary', 'aria-expanded': 'false', text: 'Show'});
    button.addEventListener('click', function () {
      var row = button.closest('tr');
      var next = row.nextElementSibling;
      if (next && next.classList.contains('audit-details')) {
        next.remove();
        button.setAttribute('aria-expanded', 'false');
        button.textContent = 'Show';
        return;
      }
      var cell = Dash.el('td', {colspan: String(row.children.length)}, details(entry));
      row.after(Dash.el('tr', {'class': 'audit-details'}, cell));
      button.setAttribute('aria-expanded', 'true');
      button.textContent = 'Hide';
    });
    return button;
  }

  var columns = [
    {label: 'Time', render: function (e) { return Dash.fmt.time(e.at); }},
    {label: 'Actor', key: 'actor'},
    {label: 'Source', render: function (e) { return Dash.el('span', {'class': 'badge', text: e.source}); }},
    {label: 'Action', key: 'action'},
    {label: 'Kind', key: 'kind'},
    {label: 'Name', key: 'name'},
    {label: 'Status', key: 'status', num: true},
    {label: 'Before / after', render: toggleButton}
  ];

  var load = Dash.latest(function (fresh) {
    var query = filters();
    query.set('limit', String(PAGE));
    query.set('offset', String(offset));
    return fresh(Dash.api('GET', '/audit?' + query.toString())).then(function (answer) {
      Dash.table(list, answer.entries, columns, {empty: 'No change matches these filters.'});
      pagers.forEach(function (el) {
        Dash.pager(el, {total: answer.total, limit: PAGE, offset: offset, count: answer.entries.length},
                   function (next) { offset = next; load(); });
      });
    }).catch(function (e) { Dash.notify('Loading the audit log failed: ' + e.message, 'error'); });
  });

  form.addEventListener('submit', function (event) {
    event.preventDefault();
    offset = 0;
    load();
  });
  load();
}());
