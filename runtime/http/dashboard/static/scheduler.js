// The scheduler page: jobs a page at a time (searched by the server), one job's definition and run
// history, and the changes an admin makes (create, edit, pause, resume, run now, delete).
(function () {
  'use strict';
  const root = document.getElementById('scheduler');
  if (!root) return;
  const canWrite = Dash.canWrite;
  const PAGE = 25;
  const RUNS = 20;
  const INTERVALS = ['weeks', 'days', 'hours', 'minutes', 'seconds'];
  const state = {search: '', offset: 0, selected: null, editing: null};

  const $ = (id) => document.getElementById(id);
  const jobPath = (name) => '/jobs/' + encodeURIComponent(name);

  const text = Dash.text;
  const button = Dash.button;

  function outcome(run) {
    if (!run) return text('span', 'never run', 'muted');
    const el = text('span', run.outcome, 'badge badge-' + run.outcome);
    el.title = run.error || '';
    return el;
  }

  // The list

  const loadJobs = Dash.latest(async (fresh) => {
    const query = new URLSearchParams({limit: PAGE, offset: state.offset});
    if (state.search) query.set('search', state.search);
    let answer;
    try {
      answer = await fresh(Dash.api('GET', '/jobs?' + query));
    } catch (e) {
      Dash.notify('Could not load the jobs: ' + e.message, 'error');
      return;
    }
    Dash.table($('jobs-table'), answer.jobs, [
      {label: 'Name', render: (job) => button(job.name, () => select(job.name), 'link')},
      {label: 'Service', render: (job) => text('code', job.service)},
      {label: 'Schedule', render: (job) => job.schedule},
      {label: 'State', render: (job) => text('span', job.is_active ? 'active' : 'paused',
                                                'badge ' + (job.is_active ? 'badge-ok' : 'badge-paused'))},
      {label: 'Next run', render: (job) => job.next_run_time ? Dash.fmt.time(job.next_run_time) : '—'},
      {label: 'Last run', render: (job) => outcome(job.last_run)},
      {label: 'Runs', render: (job) => String(job.run_count)},
    ], {empty: state.search ? 'No job matches "' + state.search + '".' :
                              'No jobs yet.' + (canWrite ? ' Create one with the form below.' : '')});
    Dash.pager($('jobs-pager'), {offset: state.offset, limit: PAGE, total: answer.total, count: answer.jobs.length},
               (offset) => { state.offset = offset; loadJobs(); });
  });

  // One job

  async function select(name) {
    state.selected = name;
    $('job-detail').hidden = false;
    await loadJob();
    $('job-title').focus();
  }

  const loadJob = Dash.latest(async (fresh) => {
    const name = state.selected;
    if (!name) return;
    let job, runs;
    try {
      [job, runs] = await fresh(Promise.all([Dash.api('GET', jobPath(name)),
                                             Dash.api('GET', jobPath(name) + '/runs?limit=' + RUNS)]));
    } catch (e) {
      Dash.notify('Could not load job ' + name + ': ' + e.message, 'error');
      if (e.status === 404) { closeJob(); loadJobs(); }
      return;
    }
    job = job.job;
    $('job-title').textContent = job.name;
    const facts = $('job-facts');
    facts.replaceChildren();
    const rows = [['Service', job.service], ['Type', job.job_type], ['Schedule', job.schedule],
                  ['State', job.is_active ? 'active' : 'paused'],
                  ['Next run', job.next_run_time ? Dash.fmt.time(job.next_run_time) : '—'],
                  ['Runs so far', job.run_count], ['Payload (extra)', JSON.stringify(job.extra)],
                  ['Origin', job.origin]];
    for (const [term, value] of rows) {
      facts.append(text('dt', term), text('dd', value));
    }
    const actions = $('job-actions');
    // Rebuilt only when they change: a poll must not take the keyboard focus away from a button.
    const shown = job.name + (job.is_active ? ':active' : ':paused');
    if (canWrite && actions.dataset.shown !== shown) {
      actions.dataset.shown = shown;
      actions.replaceChildren();
      actions.append(
        button('Run now', () => runNow(job.name), 'primary'),
        job.is_active ? button('Pause', () => change(job.name, 'pause', 'Paused'))
                      : button('Resume', () => change(job.name, 'resume', 'Resumed')),
        button('Edit', () => startEdit(job)),
        button('Delete', () => remove(job.name), 'danger'));
    }
    Dash.table($('runs-table'), runs.runs, [
      {label: 'Run', render: (run) => '#' + run.id + (run.kind === 'manual' ? ' (run now)' : '')},
      {label: 'Fired', render: (run) => Dash.fmt.time(run.fire_time)},
      {label: 'Outcome', render: (run) => outcome(run)},
      {label: 'Took', render: (run) => run.duration_secs == null ? '—' : run.duration_secs.toFixed(3) + ' s'},
      {label: 'Error', render: (run) => text('span', run.error, 'error-text')},
    ], {empty: 'This job has not run yet.'});
  });

  function closeJob() {
    state.selected = null;
    $('job-detail').hidden = true;
  }

  async function runNow(name) {
    try {
      const answer = await Dash.api('POST', jobPath(name) + '/run');
      Dash.notify('Job ' + name + ' started: run #' + answer.run.id + '.', 'ok');
    } catch (e) {
      Dash.notify('Could not run job ' + name + ': ' + e.message, 'error');
    }
    await loadJob();
  }

  async function change(name, action, done) {
    try {
      await Dash.api('POST', jobPath(name) + '/' + action);
      Dash.notify(done + ' job ' + name + '.', 'ok');
    } catch (e) {
      Dash.notify('Could not ' + action + ' job ' + name + ': ' + e.message, 'error');
    }
    await Promise.all([loadJob(), loadJobs()]);
  }

  async function remove(name) {
    if (!await Dash.confirm('Delete job ' + name + ' and its run history?', {ok: 'Delete'})) return;
    // No poll asks for the job while it is being deleted (its answer would be a 404), and one already
    // on its way is outrun by this empty load: its 404 is not shown as "Could not load job".
    const selected = state.selected;
    if (selected === name) {
      state.selected = null;
      loadJob();
    }
    try {
      await Dash.api('DELETE', jobPath(name));
      Dash.notify('Deleted job ' + name + '.', 'ok');
      if (selected === name) closeJob();
    } catch (e) {
      Dash.notify('Could not delete job ' + name + ': ' + e.message, 'error');
      if (selected === name && state.selected === null) state.selected = name;
    }
    await loadJobs();
  }

  // The form: creates a job, or edits the one chosen

  const form = $('job-form');

  function showFields() {
    const type = form.elements.job_type.value;
    for (const el of form.querySelectorAll('[data-for]')) {
      el.hidden = !el.dataset.for.split(' ').includes(type);
    }
  }

  // Not the hidden attribute: the dashboard's style gives buttons a display of their own.
  const showCancel = (shown) => { $('job-form-cancel').style.display = shown ? '' : 'none'; };

  function startEdit(job) {
    state.editing = job.name;
    $('job-form-title').textContent = 'Edit job ' + job.name;
    $('job-form-submit').textContent = 'Save changes';
    showCancel(true);
    const f = form.elements;
    f.name.value = job.name;
    f.service.value = job.service;
    f.job_type.value = job.job_type;
    f.start_date.value = job.start_date || '';
    for (const key of INTERVALS) f[key].value = job[key] || '';
    f.repeats.value = job.repeats == null ? '' : job.repeats;
    f.cron_definition.value = job.cron_definition || '';
    f.timezone.value = job.timezone || '';
    f.extra.value = job.extra == null ? '' : JSON.stringify(job.extra, null, 2);
    f.is_active.checked = !!job.is_active;
    showFields();
    $('job-form-section').open = true;
    f.service.focus();
  }

  function resetForm() {
    state.editing = null;
    form.reset();
    $('job-form-title').textContent = 'New job';
    $('job-form-submit').textContent = 'Create job';
    showCancel(false);
    showFields();
  }

  function body() {
    const f = form.elements;
    const type = f.job_type.value;
    const out = {name: f.name.value.trim(), service: f.service.value.trim(), job_type: type,
                 is_active: f.is_active.checked};
    if (f.start_date.value.trim()) out.start_date = f.start_date.value.trim();
    if (type === 'interval_based') {
      for (const key of INTERVALS) out[key] = f[key].value === '' ? 0 : Number(f[key].value);
      if (f.repeats.value !== '') out.repeats = Number(f.repeats.value);
    }
    if (type === 'cron_style') {
      out.cron_definition = f.cron_definition.value.trim();
      if (f.timezone.value.trim()) out.timezone = f.timezone.value.trim();
    }
    const extra = f.extra.value.trim();
    if (extra) {
      try {
        out.extra = JSON.parse(extra);
      } catch (e) {
        throw new Error('the payload (extra) is not valid JSON: ' + e.message);
      }
    } else {
      out.extra = null;
    }
    return out;
  }

  async function submit(event) {
    event.preventDefault();
    let data;
    try {
      data = body();
    } catch (e) {
      Dash.notify('Could not save the job: ' + e.message, 'error');
      return;
    }
    const editing = state.editing;
    try {
      if (editing) {
        delete data.name;
        await Dash.api('PATCH', jobPath(editing), data);
        Dash.notify('Saved job ' + editing + '.', 'ok');
      } else {
        await Dash.api('POST', '/jobs', data);
        Dash.notify('Created job ' + data.name + '.', 'ok');
      }
    } catch (e) {
      Dash.notify('Could not ' + (editing ? 'save job ' + editing : 'create the job') + ': ' + e.message, 'error');
      return;
    }
    const name = editing || data.name;
    resetForm();
    await loadJobs();
    await select(name);
  }

  if (form) {
    form.elements.job_type.addEventListener('change', showFields);
    form.addEventListener('submit', submit);
    $('job-form-cancel').addEventListener('click', resetForm);
    showCancel(false);
    showFields();
  }
  $('job-close').addEventListener('click', closeJob);
  $('jobs-search').addEventListener('submit', (event) => {
    event.preventDefault();
    state.search = event.target.elements.search.value.trim();
    state.offset = 0;
    loadJobs();
  });

  const focusedIn = (id) => $(id).contains(document.activeElement);
  Dash.poll(() => Promise.all([focusedIn('jobs-table') ? null : loadJobs(),
                               focusedIn('runs-table') ? null : loadJob()]), 5000);
})();
