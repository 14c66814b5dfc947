"""Keys of Zato's enmasse files that Conduit accepts without using, and Zato's names of keys it does use.

A file exported from Zato (3.x or 4.1) must load as it is. Each item of the object files passes
through ``accept`` before its section handler sees it:

- a key Zato names differently from Conduit is renamed (``push_service_name`` → ``push_service``,
  ``hook_service_name`` → ``hook_service``, ...); giving both names is an error;
- Zato's ``is_delivery_active`` (a subscription) pauses delivery as Conduit's ``is_active: false``
  does, and ``push_type`` (``rest`` or ``service``) is checked against the target the item names;
- a key Zato's importers accept that Conduit has no use for (``description``, ``groups``,
  ``rate_limiting``, ``max_retry_time``, ...) is removed and remembered, and so is a whole section
  only Zato has (``groups``, ``sql``, ...): ``warn`` lists them all in one warning,
  ``ignored Zato keys: ...``, once per set of files applied;
- in the sections whose handlers do not check keys themselves (``security``, ``channel_rest``,
  ``outgoing_rest``), any other key is a typo and an error naming the file, the object and the key.
  The other sections' handlers refuse unknown keys on their own, with the same naming.

One deliberate exception to "ignored": a REST channel that Zato protects by security ``groups``
alone (no ``security``) would be open to anyone here, since Conduit has no groups. It is loaded
inactive (the channel serves nothing) and a warning says so, so that nothing becomes more open
than it was in Zato.
"""

from __future__ import annotations

import logging
from typing import Any

from runtime.errors import ConfigError

_log = logging.getLogger(__name__)

#: Keys Zato's importers and exports carry that Conduit does not use, per section. A key Conduit comes
#: to implement must leave this list, or its handler never sees it.
IGNORED_KEYS: dict[str, frozenset[str]] = {
    'security': frozenset({
        'id', 'cluster_id', 'description', 'opaque1', 'is_rate_limit_active', 'rate_limit_type',
        'rate_limit_def', 'rate_limit_check_parent_def'}),
    'channel_rest': frozenset({
        'id', 'cluster_id', 'description', 'opaque1', 'content_type', 'content_encoding', 'timeout', 'groups',
        'rate_limiting', 'is_internal', 'connection', 'transport', 'match_slash', 'merge_url_params_req',
        'params_pri', 'url_params_pri', 'http_accept', 'cache_type', 'cache_id', 'cache_name', 'cache_expiry',
        'is_rate_limit_active', 'rate_limit_type', 'rate_limit_def', 'rate_limit_check_parent_def',
        'sec_use_rbac', 'data_encoding', 'soap_action', 'soap_version', 'host', 'ping_method', 'pool_size',
        'should_parse_on_input', 'should_validate', 'should_return_errors', 'hl7_version', 'json_path'}),
    'outgoing_rest': frozenset({
        'id', 'cluster_id', 'description', 'opaque1', 'ping_method', 'pool_size', 'tls_verify', 'content_type',
        'content_encoding', 'is_internal', 'connection', 'transport', 'serialization_type',
        'sec_tls_ca_cert_id', 'sec_use_rbac', 'data_encoding', 'soap_action', 'soap_version', 'is_rate_limit_active',
        'rate_limit_type', 'rate_limit_def', 'rate_limit_check_parent_def',
        'match_slash', 'merge_url_params_req', 'params_pri', 'url_params_pri', 'http_accept', 'cache_expiry'}),
    'pubsub_topic': frozenset({
        'id', 'cluster_id', 'description', 'opaque1', 'is_audit_log_active', 'is_internal', 'pub_buffer_size_gd',
        'task_sync_interval', 'task_delivery_interval', 'max_depth', 'hook_service_id'}),
    'pubsub_permission': frozenset({'id', 'cluster_id', 'description'}),
    'pubsub_subscription': frozenset({
        'id', 'cluster_id', 'description', 'opaque1', 'max_retry_time', 'endpoint_name', 'endpoint_type',
        'endpoint_id', 'has_gd', 'is_internal', 'active_status', 'is_staging_enabled', 'delivery_method',
        'delivery_data_format', 'delivery_endpoint', 'server_id', 'server_name', 'out_rest_http_soap_id',
        'out_http_soap_id', 'out_soap_http_soap_id', 'sub_key', 'creation_time', 'should_ignore_if_sub_exists',
        'should_delete_all', 'ws_channel_id', 'ws_channel_name', 'web_socket'}),
}

#: Zato's name of a key → Conduit's, per section (both mean the same and are honoured).
RENAMED_KEYS: dict[str, dict[str, str]] = {
    'pubsub_topic': {'hook_service_name': 'hook_service', 'on_no_subs_pub': 'on_no_subs'},
    'pubsub_subscription': {'push_service_name': 'push_service', 'out_http_method': 'push_method',
                            'delivery_max_retry': 'max_attempts', 'delivery_err_should_block': 'err_should_block',
                            'hook_service_name': 'hook_service'},
}

#: Every key Conduit uses in the sections whose handlers do not refuse unknown keys themselves.
CONDUIT_KEYS: dict[str, frozenset[str]] = {
    'security': frozenset({'name', 'type', 'username', 'password', 'realm', 'is_active'}),
    'channel_rest': frozenset({'name', 'service', 'url_path', 'method', 'methods', 'data_format', 'security',
                               'is_active'}),
    'outgoing_rest': frozenset({'name', 'host', 'url_path', 'data_format', 'timeout', 'security', 'username',
                                'password', 'is_active'}),
}

#: Sections of Zato's enmasse files that Conduit has no counterpart for (accepted, listed in the warning).
ZATO_SECTIONS = frozenset({
    'groups', 'outgoing_soap', 'channel_soap', 'outgoing_sql', 'sql', 'ldap', 'outgoing_ldap', 'odoo',
    'outgoing_odoo', 'sap', 'outgoing_sap', 'microsoft_365', 'cloud_microsoft_365', 'email_smtp', 'email_imap',
    'smtp', 'imap', 'cache', 'cache_builtin', 'elastic_search', 'search_es', 'search_solr', 'confluence', 'jira',
    'channel_amqp', 'outgoing_amqp', 'def_amqp', 'outgoing_ftp', 'outgoing_sftp', 'channel_file_transfer',
    'channel_websocket', 'web_socket', 'outgoing_wsx', 'channel_hl7_mllp', 'outgoing_hl7_mllp', 'kafka',
    'outgoing_redis', 'outgoing_mongodb', 'channel_jms_wmq', 'outgoing_jms_wmq', 'def_jms_wmq',
    'zato_generic_connection', 'json_rpc', 'channel_json_rpc', 'vault_connection', 'tls_ca_cert',
    'tls_channel_sec', 'tls_key_cert'})


class Ignored:
    """What one reading of the object files accepted without using: keys per section, and whole sections."""

    def __init__(self) -> None:
        self.keys: dict[str, set[str]] = {}
        self.sections: set[str] = set()
        #: Channels loaded inactive because Zato protected them by groups alone (file [section] 'name').
        self.closed_channels: list[str] = []

    def __bool__(self) -> bool:
        return bool(self.keys or self.sections or self.closed_channels)

    def describe(self) -> str:
        """The keys and sections, as the warning lists them."""
        parts = [f'[{section}] {", ".join(sorted(keys))}' for section, keys in sorted(self.keys.items())]
        if self.sections:
            parts.append(f'sections {", ".join(sorted(self.sections))}')
        return '; '.join(parts)


def label(item: dict[str, Any]) -> str:
    """How messages name an object: its name, else what identifies it (a subscription has no name in Zato)."""
    for key in ('name', 'security', 'service', 'push_service', 'push_service_name'):
        value = item.get(key)
        if isinstance(value, str) and value:
            return repr(value)
    topics = item.get('topic_list')
    if isinstance(topics, list) and topics:
        return 'on ' + ', '.join(repr(t) for t in topics[:3])
    return "'?'"


def _where(path: str, section: str, item: dict[str, Any]) -> str:
    return f'{path} [{section}] {label(item)}'


def is_zato_section(section: str) -> bool:
    """Whether a section is one of Zato's that Conduit accepts without using."""
    return section in ZATO_SECTIONS


def accept(section: str, item: dict[str, Any], path: str, ignored: Ignored) -> dict[str, Any]:
    """The item as Conduit's handler of section takes it (see the module docstring); records what it dropped."""
    where = _where(path, section, item)
    out = dict(item)
    for zato_key, key in RENAMED_KEYS.get(section, {}).items():
        if zato_key in out:
            if key in out:
                raise ConfigError(where, f'give either {key!r} or {zato_key!r} (its Zato name), not both')
            out[key] = out.pop(zato_key)
    if section == 'pubsub_subscription':
        _subscription(out, where)
    if section == 'channel_rest' and out.get('groups') and not out.get('security') and out.get('is_active', True):
        # Zato lets only the groups' members in; Conduit has no groups, so nobody may call it.
        out['is_active'] = False
        ignored.closed_channels.append(where)
    dropped = IGNORED_KEYS.get(section, frozenset()) & out.keys()
    if dropped:
        ignored.keys.setdefault(section, set()).update(dropped)
        for key in dropped:
            del out[key]
    known = CONDUIT_KEYS.get(section)
    if known is not None:
        for key in out:
            if key not in known:
                raise ConfigError(where, f'unknown key {key!r} (neither Conduit nor Zato knows it)')
    return out


def _subscription(item: dict[str, Any], where: str) -> None:
    """Zato's is_delivery_active and push_type on a pubsub_subscription item, in Conduit's terms."""
    if 'is_delivery_active' in item:
        active = item.pop('is_delivery_active')
        if not isinstance(active, bool):
            raise ConfigError(where, 'is_delivery_active must be true or false')
        if not active:
            item['is_active'] = False  # paused: messages are queued, delivery waits
    if 'push_type' in item:
        push_type = item.pop('push_type')
        if push_type not in ('rest', 'service'):
            raise ConfigError(where, f"push_type must be 'rest' or 'service', not {push_type!r}")
        service = item.get('service') or item.get('push_service')
        endpoint = item.get('push_rest_endpoint') or item.get('rest_push_endpoint')
        if push_type == 'service' and not service:
            raise ConfigError(where, 'push_type is service but push_service_name is missing')
        if push_type == 'rest' and not endpoint:
            raise ConfigError(where, 'push_type is rest but rest_push_endpoint is missing')


def warn(ignored: Ignored) -> None:
    """Log what the files carried that Conduit does not use: one warning, plus one per channel closed."""
    if ignored.keys or ignored.sections:
        _log.warning('ignored Zato keys: %s (Conduit does not use them)', ignored.describe())
    for where in ignored.closed_channels:
        _log.warning('%s: loaded inactive: Zato protects it by security groups only, which Conduit does not '
                     'have; give it a security definition to serve it', where)
