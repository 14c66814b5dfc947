/* Deployments page: the history, paged; upload a module; undeploy a service after a confirmation. */
(function () {
  'use strict';

  const PAGE = 25;
  const MAX_MODULE_BYTES = 1024 * 1024;
  const root = document.getElementById('deployments');
  if (!root) {
    return;
  }
  const el = (id) => document.getElementById(id);
  let offset = 0;

  const load = Dash.latest(async (fresh) => {
    let answer;
    try {
      answer = await fresh(Dash.api('GET', `/deployments?limit=${PAGE}&offset=${offset}`));
    } catch (e) {
      el('deployments-error').textContent = `Could not load the history: ${e.message}`;
      return;
    }
    el('deployments-error').textContent = '';
    const rows = answer.deployments.map((d) => ({
      at: Dash.fmt.time(d.at), kind: d.kind, module: d.module, services: d.services.join(', '),
      by: d.actor ? `${d.actor} (${d.source})` : d.source,
    }));
    Dash.table(el('deployments-table'), rows, [
      {key: 'at', label: 'When'},
      {key: 'kind', label: 'What'},
      {key: 'module', label: 'Module'},
      {key: 'services', label: 'Services'},
      {key: 'by', label: 'By'},
    ], {empty: 'Nothing was hot-deployed yet.'});
    Dash.pager(el('deployments-pager'), {total: answer.total, limit: PAGE, offset, count: answer.deployments.length},
      (next) => { offset = next; load(); });
  });

  const upload = el('deploy-form');
  if (upload) {
    upload.addEventListener('submit', async (event) => {
      event.preventDefault();
      const file = el('deploy-file').files[0];
      if (!file) {
        Dash.notify('Choose a .py file to deploy.', 'error');
        return;
      }
      if (!file.name.endsWith('.py') || file.size > MAX_MODULE_BYTES) {
        Dash.notify(`${file.name}: a module must be a .py file of at most 1 MB.`, 'error');
        return;
      }
      try {
        const answer = await Dash.api('POST', '/deploy', {file_name: file.name, source: await file.text()});
        Dash.notify(`Deployed ${file.name}: ${answer.services.join(', ') || 'no service'}.`, 'ok');
        upload.reset();
        offset = 0;
        load();
      } catch (e) {
        Dash.notify(`Deploying ${file.name} failed: ${e.message}`, 'error');
      }
    });
  }

  const undeploy = el('undeploy-form');
  if (undeploy) {
    undeploy.addEventListener('submit', async (event) => {
      event.preventDefault();
      const name = el('undeploy-name').value.trim();
      if (!name) {
        Dash.notify('Name the service to undeploy.', 'error');
        return;
      }
      if (!(await Dash.confirm(`Undeploy ${name} from every worker?`, {ok: 'Undeploy'}))) {
        return;
      }
      const path = `/services/${encodeURIComponent(name)}`;
      try {
        try {
          await Dash.api('DELETE', path);
        } catch (e) {
          // In use by channels, jobs or subscriptions: say which, and undeploy only if asked again.
          if (e.status !== 409 || !(await Dash.confirm(`${e.message}.`, {ok: 'Undeploy anyway'}))) {
            throw e;
          }
          await Dash.api('DELETE', `${path}?force=true`);
        }
        Dash.notify(`Undeployed ${name}.`, 'ok');
        undeploy.reset();
        offset = 0;
        load();
      } catch (e) {
        Dash.notify(`Undeploying ${name} failed: ${e.message}`, 'error');
      }
    });
  }

  Dash.poll(load, 10000);
})();
