/* The channels page: REST channels (searched, paged, edited here), WebSocket subscribers, file channels. */
(function () {
  'use strict';
  var PAGE = 25;
  var SHOWN = 100;
  var $ = function (id) { return document.getElementById(id); };
  var state = {search: '', offset: 0};
  var form = $('channel-form');

  function path(name) { return '/channels/' + encodeURIComponent(name); }

  function actions(channel) {
    if (!Dash.canWrite) return null;
    var edit = Dash.el('button', {type: 'button', 'class': 'secondary', text: 'Edit',
                                  'aria-label': 'Edit ' + channel.name, onclick: function () { startEdit(channel); }});
    var remove = Dash.el('button', {type: 'button', 'class': 'danger', text: 'Delete',
                                    'aria-label': 'Delete ' + channel.name,
                                    onclick: function () { deleteChannel(channel.name); }});
    return Dash.el('span', {'class': 'toolbar'}, edit, remove);
  }

  var loadChannels = Dash.latest(function (fresh) {
    var query = new URLSearchParams({limit: String(PAGE), offset: String(state.offset)});
    if (state.search) query.set('search', state.search);
    return fresh(Dash.api('GET', '/channels?' + query)).then(function (answer) {
      var columns = [
        {label: 'Name', key: 'name'},
        {label: 'Path', render: function (c) { return Dash.el('code', {text: c.url_path}); }},
        {label: 'Methods', render: function (c) { return c.methods.length ? c.methods.join(', ') : 'any'; }},
        {label: 'Service', key: 'service'},
        {label: 'Format', key: 'data_format'},
        {label: 'Security', render: function (c) { return c.security || 'none'; }},
        {label: 'Active', render: function (c) {
          return Dash.el('span', {'class': 'badge ' + (c.is_active ? 'ok' : 'bad'), text: c.is_active ? 'active' : 'inactive'});
        }},
        {label: 'Declared by', key: 'origin'}
      ];
      if (Dash.canWrite) columns.push({label: 'Actions', render: actions});
      Dash.table($('channels-list'), answer.channels, columns,
                 {empty: state.search ? 'No channel matches “' + state.search + '”.' : 'No REST channels yet.'});
      Dash.pager($('channels-pager'), {total: answer.total, limit: PAGE, offset: state.offset,
                                       count: answer.channels.length},
                 function (offset) { state.offset = offset; loadChannels(); });
    }).catch(function (e) { Dash.notify('Loading the channels failed: ' + e.message, 'error'); });
  });

  function formBody() {
    var methods = Array.prototype.filter.call(form.elements.methods, function (box) { return box.checked; })
      .map(function (box) { return box.value; });
    return {name: form.elements.name.value.trim(), service: form.elements.service.value.trim(),
            url_path: form.elements.url_path.value.trim(), methods: methods,
            data_format: form.elements.data_format.value, security: form.elements.security.value.trim(),
            is_active: form.elements.is_active.checked};
  }

  function resetForm() {
    form.reset();
    form.elements.editing.value = '';
    $('channel-form-heading').textContent = 'New REST channel';
    $('channel-submit').textContent = 'Create';
    $('channel-cancel').hidden = true;
  }

  function startEdit(channel) {
    form.elements.editing.value = channel.name;
    form.elements.name.value = channel.name;
    form.elements.service.value = channel.service;
    form.elements.url_path.value = channel.url_path;
    Array.prototype.forEach.call(form.elements.methods, function (box) {
      box.checked = channel.methods.indexOf(box.value) >= 0;
    });
    form.elements.data_format.value = channel.data_format;
    form.elements.security.value = channel.security || '';
    form.elements.is_active.checked = channel.is_active;
    $('channel-form-heading').textContent = 'Edit REST channel ' + channel.name;
    $('channel-submit').textContent = 'Save';
    $('channel-cancel').hidden = false;
    form.elements.name.focus();
  }

  function deleteChannel(name) {
    Dash.confirm('Delete the REST channel ' + name + '? Its path stops answering at once.', {ok: 'Delete'})
      .then(function (yes) {
        if (!yes) return;
        return Dash.api('DELETE', path(name)).then(function () {
          Dash.notify('Channel ' + name + ' deleted.', 'ok');
          loadChannels();
        });
      }).catch(function (e) { Dash.notify('Deleting ' + name + ' failed: ' + e.message, 'error'); });
  }

  if (form) {
    form.addEventListener('submit', function (event) {
      event.preventDefault();
      var editing = form.elements.editing.value;
      var call = editing ? Dash.api('PATCH', path(editing), formBody()) : Dash.api('POST', '/channels', formBody());
      call.then(function (answer) {
        Dash.notify('Channel ' + answer.channel.name + (editing ? ' saved.' : ' created.'), 'ok');
        resetForm();
        loadChannels();
      }).catch(function (e) {
        Dash.notify((editing ? 'Saving ' + editing : 'Creating the channel') + ' failed: ' + e.message, 'error');
      });
    });
    $('channel-cancel').addEventListener('click', resetForm);
  }

  $('channels-search').addEventListener('submit', function (event) {
    event.preventDefault();
    state.search = event.target.elements.search.value.trim();
    state.offset = 0;
    loadChannels();
  });

  function loadWebSockets() {
    return Dash.api('GET', '/pubsub/websockets').then(function (answer) {
      var totals = answer.totals;
      $('ws-totals').textContent = Dash.fmt.number(totals.subscriptions) + ' subscription(s), ' +
        Dash.fmt.number(totals.connected) + ' with a client connected' +
        (answer.websockets.length > SHOWN ? ' (the first ' + SHOWN + ' shown)' : '') + '.';
      Dash.table($('ws-list'), answer.websockets.slice(0, SHOWN), [
        {label: 'Subscription', key: 'sub_id', num: true},
        {label: 'Topic or pattern', key: 'pattern'},
        {label: 'Security', key: 'security'},
        {label: 'Connected', render: function (w) {
          return Dash.el('span', {'class': 'badge ' + (w.connected ? 'ok' : ''), text: w.connected ? 'yes' : 'no'});
        }},
        {label: 'Peer', key: 'peer'},
        {label: 'Queued', key: 'queue_depth', num: true}
      ], {empty: 'No WebSocket subscriptions.'});
      // Per security definition: how close each is to the limit subscribe is refused at (409).
      var limit = answer.max_per_definition;
      Dash.table($('ws-definitions'), answer.definitions || [], [
        {label: 'Security', key: 'security'},
        {label: 'Subscriptions', render: function (d) {
          var text = Dash.fmt.number(d.subscriptions) + (limit ? ' of ' + Dash.fmt.number(limit) : '');
          return Dash.el('span', {'class': 'badge ' + (limit && d.subscriptions >= limit ? 'bad' : ''), text: text});
        }},
        {label: 'Connected', key: 'connected', num: true}
      ], {empty: 'No security definition holds a WebSocket subscription.'});
    }).catch(function (e) { Dash.notify('Loading the WebSocket subscribers failed: ' + e.message, 'error'); });
  }

  // A link to the channel's page (its runs); '.' and '..' stay text: a browser resolves them out of any URL.
  function fileChannelName(f) {
    if (f.name === '.' || f.name === '..') return f.name;
    return Dash.el('a', {href: '/dashboard/file-channels/' + encodeURIComponent(f.name), text: f.name});
  }

  function loadFileChannels() {
    return Dash.api('GET', '/file-channels').then(function (answer) {
      Dash.table($('files-list'), answer.file_channels.slice(0, SHOWN), [
        {label: 'Name', render: fileChannelName},
        {label: 'Source', render: function (f) { return f.sftp_host ? 'sftp://' + f.sftp_host + (f.directory || '') : (f.directory || ''); }},
        {label: 'Patterns', render: function (f) { return Array.isArray(f.patterns) ? f.patterns.join(', ') : (f.patterns || ''); }},
        {label: 'Active', render: function (f) {
          return Dash.el('span', {'class': 'badge ' + (f.is_active ? 'ok' : 'bad'), text: f.is_active ? 'active' : 'inactive'});
        }},
        {label: 'Problem', render: function (f) { return f.problem || ''; }}
      ], {empty: 'No file channels.'});
    }).catch(function (e) { Dash.notify('Loading the file channels failed: ' + e.message, 'error'); });
  }

  loadChannels();
  loadWebSockets();
  loadFileChannels();
}());
