/* The security page: definitions (searched, paged), one definition's permissions and password, the pattern tester. */
(function () {
  'use strict';
  var PAGE = 25;
  var $ = function (id) { return document.getElementById(id); };
  var state = {search: '', offset: 0, current: null, pattern: '', patternOffset: 0};

  function path(name) { return '/security/' + encodeURIComponent(name); }

  var loadDefinitions = Dash.latest(function (fresh) {
    var query = new URLSearchParams({limit: String(PAGE), offset: String(state.offset)});
    if (state.search) query.set('search', state.search);
    return fresh(Dash.api('GET', '/security?' + query)).then(function (answer) {
      Dash.table($('defs-list'), answer.security, [
        {label: 'Name', render: function (d) {
          return Dash.el('button', {type: 'button', 'class': 'secondary', text: d.name,
                                    'aria-label': 'Open ' + d.name, onclick: function () { openDefinition(d.name); }});
        }},
        {label: 'User name', key: 'username'},
        {label: 'Realm', key: 'realm'},
        {label: 'Active', render: function (d) {
          return Dash.el('span', {'class': 'badge ' + (d.is_active ? 'ok' : 'bad'), text: d.is_active ? 'active' : 'inactive'});
        }},
        {label: 'Declared by', key: 'origin'}
      ], {empty: state.search ? 'No definition matches “' + state.search + '”.' : 'No security definitions yet.'});
      Dash.pager($('defs-pager'), {total: answer.total, limit: PAGE, offset: state.offset, count: answer.security.length},
                 function (offset) { state.offset = offset; loadDefinitions(); });
    }).catch(function (e) { Dash.notify('Loading the definitions failed: ' + e.message, 'error'); });
  });

  function linesOf(permissions) {
    return permissions.pub.map(function (p) { return 'pub=' + p; })
      .concat(permissions.sub.map(function (p) { return 'sub=' + p; })).join('\n');
  }

  var openDefinition = Dash.latest(function (fresh, name) {
    var both = Promise.all([Dash.api('GET', path(name)), Dash.api('GET', path(name) + '/permissions')]);
    return fresh(both).then(function (answers) {
      var def = answers[0].security;
      state.current = def;
      $('def-details').hidden = false;
      $('def-heading').textContent = 'Definition ' + def.name;
      $('def-summary').textContent = 'User name ' + def.username + ', realm ' + def.realm + ', ' +
        (def.is_active ? 'active' : 'inactive') + ', declared by ' + def.origin + '.';
      var toggle = $('def-toggle');
      if (toggle) toggle.textContent = def.is_active ? 'Deactivate' : 'Activate';
      $('permission-lines').value = linesOf(answers[1].permissions);
      $('def-heading').scrollIntoView({block: 'nearest'});
    }).catch(function (e) { Dash.notify('Opening ' + name + ' failed: ' + e.message, 'error'); });
  });

  function onSubmit(id, handler) {
    var form = $(id);
    if (form) form.addEventListener('submit', function (event) { event.preventDefault(); handler(form); });
  }

  onSubmit('defs-search', function (form) {
    state.search = form.elements.search.value.trim();
    state.offset = 0;
    loadDefinitions();
  });

  onSubmit('def-create', function (form) {
    var body = {name: form.elements.name.value.trim(), username: form.elements.username.value.trim(),
                password: form.elements.password.value};
    if (form.elements.realm.value.trim()) body.realm = form.elements.realm.value.trim();
    Dash.api('POST', '/security', body).then(function (answer) {
      form.reset();
      Dash.notify('Definition ' + answer.security.name + ' created.', 'ok');
      loadDefinitions();
      openDefinition(answer.security.name);
    }).catch(function (e) { Dash.notify('Creating the definition failed: ' + e.message, 'error'); });
  });

  onSubmit('def-password', function (form) {
    var name = state.current.name;
    Dash.api('POST', path(name) + '/password', {password: form.elements.password.value}).then(function () {
      form.reset();
      Dash.notify('Password of ' + name + ' changed.', 'ok');
    }).catch(function (e) { Dash.notify('Changing the password of ' + name + ' failed: ' + e.message, 'error'); });
  });

  onSubmit('def-permissions', function (form) {
    if (!Dash.canWrite) return;
    var name = state.current.name;
    Dash.api('PUT', path(name) + '/permissions', {patterns: form.elements.patterns.value}).then(function (answer) {
      $('permission-lines').value = linesOf(answer.permissions);
      Dash.notify('Permissions of ' + name + ' saved.', 'ok');
    }).catch(function (e) { Dash.notify('Saving the permissions of ' + name + ' failed: ' + e.message, 'error'); });
  });

  var toggle = $('def-toggle');
  if (toggle) toggle.addEventListener('click', function () {
    var def = state.current;
    var verb = def.is_active ? 'Deactivate' : 'Activate';
    Dash.confirm(verb + ' ' + def.name + '? ' + (def.is_active ? 'Its clients can no longer sign in.' : ''),
                 {ok: verb, danger: def.is_active}).then(function (yes) {
      if (!yes) return;
      return Dash.api('PATCH', path(def.name), {is_active: !def.is_active}).then(function () {
        Dash.notify(def.name + (def.is_active ? ' deactivated.' : ' activated.'), 'ok');
        openDefinition(def.name);
        loadDefinitions();
      });
    }).catch(function (e) { Dash.notify(verb + ' ' + def.name + ' failed: ' + e.message, 'error'); });
  });

  var endSessions = $('end-sessions');
  if (endSessions) endSessions.addEventListener('click', function () {
    Dash.confirm('End every dashboard session? Everybody signed in, you too, must sign in again.',
                 {ok: 'End every session', danger: true}).then(function (yes) {
      if (!yes) return;
      // The full path: Dash.api takes a path under /dashboard/ as it is, and this route is /dashboard/api/dashboard/...
      return Dash.api('DELETE', '/dashboard/api/dashboard/sessions').then(function () {
        window.location.assign('/dashboard/sign-in');
      });
    }).catch(function (e) { Dash.notify('Ending the sessions failed: ' + e.message, 'error'); });
  });

  var loadMatches = Dash.latest(function (fresh) {
    var query = new URLSearchParams({pattern: state.pattern, limit: String(PAGE), offset: String(state.patternOffset)});
    return fresh(Dash.api('GET', '/pubsub/topic-matches?' + query)).then(function (answer) {
      $('pattern-total').textContent = answer.total === 1 ? '1 topic matches ' + answer.pattern + '.'
        : Dash.fmt.number(answer.total) + ' topics match ' + answer.pattern + '.';
      Dash.table($('pattern-matches'), answer.topics.map(function (name) { return {name: name}; }),
                 [{label: 'Topic', key: 'name'}], {empty: 'No existing topic matches this pattern.'});
      Dash.pager($('pattern-pager'), {total: answer.total, limit: PAGE, offset: state.patternOffset,
                                      count: answer.topics.length},
                 function (offset) { state.patternOffset = offset; loadMatches(); });
    }).catch(function (e) {
      $('pattern-total').textContent = '';
      $('pattern-matches').textContent = '';
      $('pattern-pager').textContent = '';
      Dash.notify('Testing the pattern failed: ' + e.message, 'error');
    });
  });

  onSubmit('pattern-tester', function (form) {
    var pattern = form.elements.pattern.value.trim();
    if (!pattern) {
      // Spaces pass the input's `required`; say so rather than leave the last pattern's matches as the answer.
      Dash.notify('Enter a pattern to test (spaces alone are not one).', 'error');
      return;
    }
    state.pattern = pattern;
    state.patternOffset = 0;
    loadMatches();
  });

  loadDefinitions();
}());
