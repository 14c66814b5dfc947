"""The deployments page in a real browser: the history, uploading a module, undeploying with a confirmation;
a viewer sees no form.

Each test starts its own server (no shared one): the first begins with an empty history and counts its
rows, and the second, the only one that could share a server, would start one all the same.
"""

from __future__ import annotations

from tests.dashboard.polling import wait_until

MODULE = b'''
from runtime import Service


class Uploaded(Service):
    name = 'uploaded.hello'

    def handle(self):
        self.response.payload = {'hello': 'from the dashboard'}
'''



def test_upload_a_module_and_undeploy_it(dash_server, dash_page, browser_errors) -> None:
    page = dash_page(dash_server, 'admin')
    page.goto('/dashboard/deployments')
    page.wait_for_selector('#deployments-table >> text=Nothing was hot-deployed yet.')

    page.set_input_files('#deploy-file', files=[{'name': 'uploaded_mod.py', 'mimeType': 'text/x-python',
                                                 'buffer': MODULE}])
    page.click('#deploy-form button[type=submit]')
    page.wait_for_selector('#notify >> text=Deployed uploaded_mod.py: uploaded.hello.')
    page.wait_for_selector('#deployments-table tbody tr >> text=uploaded_mod')
    row = page.inner_text('#deployments-table tbody tr')
    assert 'deploy' in row and 'uploaded.hello' in row and 'admin' in row and 'dashboard' in row
    assert dash_server.invoke('uploaded.hello') == {'hello': 'from the dashboard'}

    # A broken module is refused with the reason, and nothing changes.
    browser_errors.allow(r'status of 400')
    page.set_input_files('#deploy-file', files=[{'name': 'broken.py', 'mimeType': 'text/x-python',
                                                 'buffer': b'def oops(:\n'}])
    page.click('#deploy-form button[type=submit]')
    page.wait_for_selector('#notify .error >> text=Deploying broken.py failed')
    assert page.locator('#deployments-table tbody tr').count() == 1

    # Undeploying asks first; cancelling changes nothing.
    page.fill('#undeploy-name', 'uploaded.hello')
    page.click('#undeploy-form button[type=submit]')
    page.click('dialog button:has-text("Cancel")')
    assert page.locator('#deployments-table tbody tr').count() == 1
    page.click('#undeploy-form button[type=submit]')
    page.click('dialog button:has-text("Undeploy")')
    page.wait_for_selector('#notify >> text=Undeployed uploaded.hello.')
    wait_until(page, "document.querySelectorAll('#deployments-table tbody tr').length === 2")
    assert 'undeploy' in page.inner_text('#deployments-table tbody tr')
    assert dash_server.request('POST', '/admin/services/uploaded.hello/invoke', auth=dash_server.admin,
                               json={}).status_code == 404


def test_viewer_sees_the_history_and_no_form(dash_server, dash_page) -> None:
    dash_server.admin_json('POST', '/admin/deploy', json={'file_name': 'seen_mod.py', 'source': MODULE.decode()})
    viewer = dash_page(dash_server, 'viewer')
    viewer.goto('/dashboard/deployments')
    viewer.wait_for_selector('#deployments-table tbody tr >> text=seen_mod')
    assert viewer.query_selector('#deploy-form') is None and viewer.query_selector('#undeploy-form') is None
    assert viewer.query_selector('main form') is None
