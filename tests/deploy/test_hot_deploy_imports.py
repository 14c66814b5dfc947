"""Hot-deployed modules that import each other by plain name, against real servers.

A helper dropped next to the services that use it is imported as ``import shop_utils``; when it
changes, its dependents run again with the new version; a server that starts later (without the
files) loads the recorded modules in dependency order; a name that another module already answers
to is refused, naming the file.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from runtime.deploy.imports import ModuleSource, dependency_order, dependents
from tests.live_server import LiveServer, poll

HELPER = '''"""Prices, shared by the shop's services."""

VERSION = {version}


def price(amount):
    return amount * {factor}
'''

#: Uses the helper through a from-import at module level: it must see the helper's new versions.
SHOP = '''from runtime import Service

from shop_utils import VERSION, price


class Quote(Service):
    name = 'test.shop.quote'

    def handle(self):
        self.response.payload = {'price': price(10), 'helper': VERSION}
'''

#: A helper without price(): the shop cannot import it.
HELPER_WITHOUT_PRICE = '''VERSION = 3


def cost(amount):
    return amount * 4
'''

SHOP_WITH_COST = SHOP.replace('VERSION, price', 'VERSION, cost').replace('price(10)', 'cost(10)')


def _cli(server: LiveServer, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, 'CONDUIT_CONFIG': str(server.base / 'config' / 'server.toml')}
    return subprocess.run([sys.executable, '-m', 'runtime.cli', *args], cwd=server.base, env=env,
                          capture_output=True, text=True, timeout=60)


def quote(server: LiveServer) -> dict | None:
    """What test.shop.quote answers, or None while it is not deployed."""
    r = server.request('POST', '/admin/services/test.shop.quote/invoke', auth=server.admin)
    return r.json()['response'] if r.status_code == 200 else None


def wait_quote(server: LiveServer, expected: dict) -> None:
    poll(lambda: quote(server) == expected, message=f'quote {expected}')


def test_a_helper_imports_by_plain_name_and_its_dependents_follow_its_changes(
        server_factory: Callable[..., LiveServer]) -> None:
    a = server_factory(name='a').start()
    # The service first: it cannot be imported until its helper arrives, then both go live.
    a.write_module('shop.py', SHOP)
    a.wait_for_log("No module named 'shop_utils'")
    a.write_module('shop_utils.py', HELPER.format(version=1, factor=2))
    wait_quote(a, {'price': 20, 'helper': 1})

    # A new version of the helper: the service runs again and sees it.
    a.write_module('shop_utils.py', HELPER.format(version=2, factor=3))
    wait_quote(a, {'price': 30, 'helper': 2})

    # A helper its dependent cannot use is rejected as a whole, naming the dependent; nothing changes.
    a.write_module('shop_utils.py', HELPER_WITHOUT_PRICE)
    log = a.wait_for_log("cannot import name 'price' from 'shop_utils'")
    assert 'shop.py' in log
    assert quote(a) == {'price': 30, 'helper': 2}
    # Once the dependent changes too, both go live together.
    a.write_module('shop.py', SHOP_WITH_COST)
    wait_quote(a, {'price': 40, 'helper': 3})

    # After a restart, and on a server started later without the files, the recorded modules load
    # in dependency order (shop.py was recorded before shop_utils.py).
    a.stop()
    a.start()
    assert quote(a) == {'price': 40, 'helper': 3}
    b = server_factory(name='b').start()
    assert not (b.hot_deploy / 'shop_utils.py').exists()
    assert quote(b) == {'price': 40, 'helper': 3}
    # A later change of the helper on one server reaches the dependents on the other.
    a.write_module('shop_utils.py', HELPER_WITHOUT_PRICE.replace('VERSION = 3', 'VERSION = 4'))
    wait_quote(b, {'price': 40, 'helper': 4})


def test_a_helper_that_fails_to_import_leaves_its_dependents_running(
        server_factory: Callable[..., LiveServer]) -> None:
    a = server_factory().start()
    a.write_module('shop_utils.py', HELPER.format(version=1, factor=2))
    a.write_module('shop.py', SHOP)
    wait_quote(a, {'price': 20, 'helper': 1})
    a.write_module('shop_utils.py', HELPER.format(version=2, factor=2) + "\nBROKEN = {}['key']\n")
    log = a.wait_for_log("KeyError: 'key'")
    assert 'shop_utils.py:9: KeyError' in log
    assert quote(a) == {'price': 20, 'helper': 1}


def test_a_module_name_taken_by_another_module_is_refused_naming_the_file(
        server_factory: Callable[..., LiveServer]) -> None:
    a = server_factory().start()
    source = SHOP.replace('from shop_utils import VERSION, price\n', '').replace(
        "{'price': price(10), 'helper': VERSION}", "{'price': 0, 'helper': 0}")
    for file_name, taken_by in (('json.py', 'standard library'), ('requests.py', 'requests'),
                                ('runtime.py', 'runtime')):
        r = a.request('POST', '/admin/deploy', auth=a.admin, json={'file_name': file_name, 'source': source})
        assert r.status_code == 400, r.text
        details = r.json()['details']
        assert file_name in details and taken_by in details and 'rename' in details, details
    assert quote(a) is None
    a.write_module('email.py', source)
    log = a.wait_for_log("module name 'email' is taken by the standard library")
    assert 'email.py' in log
    assert quote(a) is None
    # A module named like none of them deploys.
    r = a.request('POST', '/admin/deploy', auth=a.admin, json={'file_name': 'shop.py', 'source': source})
    assert r.status_code == 200, r.text
    assert quote(a) == {'price': 0, 'helper': 0}


def _src(text: str) -> ModuleSource:
    return ModuleSource(text, 'x.py', '')


def test_dependency_order_puts_helpers_first_and_survives_cycles() -> None:
    sources = {
        'shop': _src('from shop_utils import price\nimport os'),
        'shop_utils': _src('import money.rates\n'),
        'money': _src('x = 1'),
        'report': _src('def f():\n    import shop\n'),
        'left': _src('import right'),
        'right': _src('from left import x'),
        'broken': _src('def ('),
    }
    order = dependency_order(sources)
    assert sorted(order) == sorted(sources)
    assert order.index('money') < order.index('shop_utils') < order.index('shop') < order.index('report')
    assert order.index('left') < order.index('right')  # a cycle: name order
    assert dependents({'money'}, sources) == {'shop_utils', 'shop', 'report'}
    assert dependents({'left'}, sources) == {'right'}
    assert dependents({'broken'}, sources) == set()


CYCLE_LEFT = '''from runtime import Service

import cycle_right

NAME = 'left'


class Left(Service):
    name = 'test.cycle.left'

    def handle(self):
        self.response.payload = {'right': cycle_right.VALUE}
'''

CYCLE_RIGHT = '''from runtime import Service

import cycle_left

VALUE = {value}


class Right(Service):
    name = 'test.cycle.right'

    def handle(self):
        self.response.payload = {{'left': cycle_left.NAME}}
'''


def test_modules_importing_each_other_deploy_together_and_reload_as_one(runtime_factory) -> None:
    rt = runtime_factory()
    deployer = rt.hot_deployer
    deployer.deploy_many({'cycle_left': (CYCLE_LEFT, 'cycle_left.py'),
                          'cycle_right': (CYCLE_RIGHT.format(value=1), 'cycle_right.py')})
    assert rt.invoke('test.cycle.left') == {'right': 1}
    assert rt.invoke('test.cycle.right') == {'left': 'left'}
    deployer.deploy('cycle_right', CYCLE_RIGHT.format(value=2), 'cycle_right.py')
    assert rt.invoke('test.cycle.left') == {'right': 2}


TWO_SERVICES = '''from runtime import Service

from stock_utils import LEVEL


class Level(Service):
    name = 'test.stock.level'

    def handle(self):
        self.response.payload = {'level': LEVEL}


class Reorder(Service):
    name = 'test.stock.reorder'

    def handle(self):
        self.response.payload = {'reorder': LEVEL < 5}
'''


def test_reloading_a_dependent_never_brings_back_an_undeployed_service(runtime_factory) -> None:
    rt = runtime_factory()
    deployer = rt.hot_deployer
    deployer.deploy('stock_utils', 'LEVEL = 1\n', 'stock_utils.py')
    deployer.deploy('stock', TWO_SERVICES, 'stock.py')
    deployer.undeploy('test.stock.reorder')
    deployer.deploy('stock_utils', 'LEVEL = 7\n', 'stock_utils.py')
    assert rt.invoke('test.stock.level') == {'level': 7}
    assert not rt.store.has('test.stock.reorder')
    # Deploying the module itself brings it back.
    deployer.deploy('stock', TWO_SERVICES, 'stock.py')
    assert rt.invoke('test.stock.reorder') == {'reorder': False}


def test_conduit_deploy_takes_a_helper_and_its_dependent_together(
        server_factory: Callable[..., LiveServer], tmp_path: Path) -> None:
    a = server_factory().start()
    files = tmp_path / 'files'
    files.mkdir()
    helper, shop = files / 'shop_utils.py', files / 'shop.py'
    helper.write_text(HELPER.format(version=1, factor=2))
    shop.write_text(SHOP)
    done = _cli(a, 'deploy', str(helper), str(shop))
    assert done.returncode == 0, done.stderr
    assert 'deployed: test.shop.quote' in done.stdout
    assert quote(a) == {'price': 20, 'helper': 1}

    # The helper alone would break its dependent: refused, naming it.
    helper.write_text(HELPER_WITHOUT_PRICE)
    done = _cli(a, 'deploy', str(helper))
    assert done.returncode != 0
    assert 'shop.py' in done.stderr and "cannot import name 'price'" in done.stderr
    assert quote(a) == {'price': 20, 'helper': 1}
    shop.write_text(SHOP_WITH_COST)
    done = _cli(a, 'deploy', str(helper), str(shop))
    assert done.returncode == 0, done.stderr
    assert quote(a) == {'price': 40, 'helper': 3}

    # A compatible helper alone: its dependent runs again, and the answer says so.
    r = a.request('POST', '/admin/deploy', auth=a.admin,
                  json={'file_name': 'shop_utils.py', 'source': HELPER_WITHOUT_PRICE.replace('= 3', '= 5')})
    assert r.status_code == 200, r.text
    assert r.json()['services'] == [] and r.json()['reloaded'] == ['shop.py']
    assert quote(a) == {'price': 40, 'helper': 5}


def test_admin_deploy_of_several_modules_refuses_malformed_bodies_naming_the_field(
        server_factory: Callable[..., LiveServer]) -> None:
    a = server_factory().start()
    good = {'file_name': 'shop_utils.py', 'source': HELPER.format(version=1, factor=2)}
    for body, named in (
            ({'modules': 'shop.py'}, "'modules'"),
            ({'modules': []}, "'modules'"),
            ({'modules': [good] * 101}, "'modules'"),
            ({'modules': [good, 'shop.py']}, 'modules[1]'),
            ({'modules': [good, {'file_name': 'shop.py'}]}, "'modules[1].source'"),
            ({'modules': [{'file_name': 'shop.txt', 'source': SHOP}]}, "'modules[0].file_name'"),
            ({'modules': [good, {'file_name': 'x-y.py', 'source': SHOP}]}, "'x-y' is not a valid module name"),
            ({'modules': [good, dict(good, file_name='../shop_utils.py')]}, 'is given twice'),
            ({'modules': [good, {'file_name': 'json.py', 'source': SHOP}]}, 'json.py'),
    ):
        r = a.request('POST', '/admin/deploy', auth=a.admin, json=body)
        assert r.status_code == 400, (body, r.text)
        assert named in r.json()['details'], (named, r.json()['details'])
    # Nothing of any refused body was deployed.
    r = a.request('POST', '/admin/deploy', auth=a.admin, json={'modules': [{'file_name': 'shop.py', 'source': SHOP}]})
    assert r.status_code == 400 and "No module named 'shop_utils'" in r.json()['details'], r.text
    # Without the admin credentials: 401, nothing deployed.
    r = a.request('POST', '/admin/deploy', json={'modules': [good, {'file_name': 'shop.py', 'source': SHOP}]})
    assert r.status_code == 401, r.text
    assert quote(a) is None
