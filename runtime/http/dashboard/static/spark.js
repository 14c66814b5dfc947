// The Spark page: the pipelines that can be submitted (and a form to submit one), jobs a page at a
// time filtered by the server, and one job's status, outputs and log (with kill for a running job).
(function () {
  'use strict';
  const root = document.getElementById('spark');
  if (!root) return;
  const canWrite = Dash.canWrite;
  const PAGE = 25;
  const LOG_LINES = 200;
  const ENDED = ['succeeded', 'failed', 'killed'];
  const state = {status: '', pipeline: '', offset: 0, selected: null};

  const $ = (id) => document.getElementById(id);
  const jobPath = (id) => '/spark/jobs/' + encodeURIComponent(id);

  const text = Dash.text;
  const button = Dash.button;

  // Paths have long unbroken words (a_b_c/d_e): they may break anywhere rather than widen a phone's page.
  function path(value) {
    const el = text('code', value);
    el.style.overflowWrap = 'anywhere';
    return el;
  }

  const badge = (status) => text('span', status, 'badge badge-' + status);

  function took(job) {
    if (job.duration_secs != null) return job.duration_secs.toFixed(1) + ' s';
    if (!job.started_at) return '—';
    return 'running for ' + ((Date.now() - Date.parse(job.started_at)) / 1000).toFixed(0) + ' s';
  }

  // Pipelines and the submit form

  async function loadPipelines() {
    let answer;
    try {
      answer = await Dash.api('GET', '/spark/pipelines');
    } catch (e) {
      Dash.notify('Could not load the pipelines: ' + e.message, 'error');
      return;
    }
    $('spark-master').replaceChildren(path(answer.master));
    $('spark-directory').replaceChildren(path(answer.directory));
    const list = $('pipelines');
    list.replaceChildren(...answer.pipelines.map((name) => text('li', name)));
    if (!answer.pipelines.length) {
      list.replaceChildren(Dash.el('li', null, 'No pipelines in ', path(answer.directory), '.'));
    }
    const select = $('submit-pipeline');
    if (select) {
      select.replaceChildren(...answer.pipelines.map((name) => {
        const option = text('option', name);
        option.value = name;
        return option;
      }));
    }
    const filter = $('filter-pipeline');
    filter.replaceChildren(text('option', 'every pipeline'),
                           ...answer.pipelines.map((name) => text('option', name)));
    filter.options[0].value = '';
  }

  async function submit(event) {
    event.preventDefault();
    const f = event.target.elements;
    const body = {pipeline: f.pipeline.value,
                  args: f.args.value.split('\n').map((a) => a.trim()).filter((a) => a)};
    if (f.master.value.trim()) body.master = f.master.value.trim();
    if (f.timeout.value !== '') body.timeout = Number(f.timeout.value);
    try {
      const answer = await Dash.api('POST', '/spark/jobs', body);
      Dash.notify('Submitted ' + body.pipeline + ': job ' + answer.job_id + '.', 'ok');
      state.offset = 0;
      await loadJobs();
      await select(answer.job_id);
    } catch (e) {
      Dash.notify('Could not submit pipeline ' + body.pipeline + ': ' + e.message, 'error');
    }
  }

  // Jobs

  const loadJobs = Dash.latest(async (fresh) => {
    const query = new URLSearchParams({limit: PAGE, offset: state.offset});
    if (state.status) query.set('status', state.status);
    if (state.pipeline) query.set('pipeline', state.pipeline);
    let answer;
    try {
      answer = await fresh(Dash.api('GET', '/spark/jobs?' + query));
    } catch (e) {
      Dash.notify('Could not load the Spark jobs: ' + e.message, 'error');
      return;
    }
    const filtered = state.status || state.pipeline;
    Dash.table($('spark-jobs'), answer.jobs, [
      {label: 'Job', render: (job) => button(job.job_id, () => select(job.job_id), 'link')},
      {label: 'Pipeline', render: (job) => job.pipeline},
      {label: 'Status', render: (job) => badge(job.status)},
      {label: 'Submitted', render: (job) => Dash.fmt.time(job.submitted_at)},
      {label: 'Took', render: took},
      {label: 'Output', render: (job) => path(job.output_location || '—')},
    ], {empty: filtered ? 'No job matches these filters.' : 'No Spark job has been submitted yet.'});
    Dash.pager($('spark-pager'), {offset: state.offset, limit: PAGE, count: answer.jobs.length,
                                  hasMore: answer.next_offset != null},
               (offset) => { state.offset = offset; loadJobs(); });
  });

  async function select(jobId) {
    state.selected = jobId;
    $('spark-job').hidden = false;
    await loadJob();
    $('spark-job-title').focus();
  }

  const loadJob = Dash.latest(async (fresh) => {
    const jobId = state.selected;
    if (!jobId) return;
    let job;
    try {
      job = (await fresh(Dash.api('GET', jobPath(jobId) + '?lines=' + LOG_LINES))).job;
    } catch (e) {
      Dash.notify('Could not load Spark job ' + jobId + ': ' + e.message, 'error');
      return;
    }
    $('spark-job-title').textContent = 'Job ' + job.job_id + ' (' + job.pipeline + ')';
    const facts = $('spark-job-facts');
    facts.replaceChildren();
    const rows = [['Status', job.status], ['Master', job.master], ['Arguments', (job.arguments || []).join(' ')],
                  ['Submitted', Dash.fmt.time(job.submitted_at)], ['Took', took(job)],
                  ['Exit code', job.exit_code], ['Output', job.output_location || '—'], ['Log file', job.log_path],
                  ['Error', job.error || '—']];
    for (const [term, value] of rows) {
      const shown = value == null || value === '' ? '—' : value;
      facts.append(text('dt', term), Dash.el('dd', null, term === 'Output' || term === 'Log file' ? path(shown) : shown));
    }
    $('spark-job-result').textContent = job.result == null ? '—' : JSON.stringify(job.result, null, 2);
    const log = job.log_tail || [];
    $('spark-job-log').textContent = log.length ? log.join('\n') : '(the log is empty)';
    const actions = $('spark-job-actions');
    const running = !ENDED.includes(job.status);
    const shown = job.job_id + (running ? ':running' : ':ended');
    if (actions.dataset.shown !== shown) {
      actions.dataset.shown = shown;
      actions.replaceChildren();
      if (canWrite && running) actions.append(button('Kill', () => kill(job.job_id), 'danger'));
    }
  });

  async function kill(jobId) {
    if (!await Dash.confirm('Kill Spark job ' + jobId + '?', {ok: 'Kill'})) return;
    try {
      await Dash.api('POST', jobPath(jobId) + '/kill');
      Dash.notify('Asked job ' + jobId + ' to stop.', 'ok');
    } catch (e) {
      Dash.notify('Could not kill job ' + jobId + ': ' + e.message, 'error');
    }
    await Promise.all([loadJob(), loadJobs()]);
  }

  const submitForm = $('spark-submit');
  if (submitForm) submitForm.addEventListener('submit', submit);
  $('spark-filter').addEventListener('submit', (event) => {
    event.preventDefault();
    state.status = event.target.elements.status.value;
    state.pipeline = event.target.elements.pipeline.value;
    state.offset = 0;
    loadJobs();
  });
  $('spark-job-close').addEventListener('click', () => { state.selected = null; $('spark-job').hidden = true; });

  loadPipelines();
  const focusedIn = (id) => $(id).contains(document.activeElement);
  Dash.poll(() => Promise.all([focusedIn('spark-jobs') ? null : loadJobs(), loadJob()]), 5000);
})();
