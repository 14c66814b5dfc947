"""The admin API under /admin: its own credentials, one resource class per kind of object.

- ``parts``: ``AdminParts``, the collaborators the resources are made with (the pub/sub
  administration layer of ``runtime.pubsub.topic_admin``, ``runtime.pubsub.subscription_admin`` and
  ``runtime.pubsub.queue_admin``, the catalog, the service store, the scheduler, ...), and
  ``admin_parts``, which takes them from a runtime; no admin module sees the runtime itself;
- ``base``: ``AdminResource``, the base of every admin resource, and the admin prefix;
- ``input``: reading request bodies field by field, and paging; ``lookups``: whether a named
  security definition or service exists; ``subscription_views``: how a subscription is shown with
  its queue (subscriptions, queues and a topic's details use them);
- one module per family of resources (each reads the input, calls the layer that does the work,
  and shows its answer): ``services`` (services, invoke, deploy, status), ``objects``
  (security definitions and channels), ``permissions``, ``pubsub`` (topics, subscriptions,
  publishing), ``queues`` (queues and dead letters), ``websockets`` (WebSocket subscribers and their
  clients), ``file_channels`` (inbound file-transfer channels and their runs), ``jobs``, ``spark``,
  ``audit`` (the audit log, detach, and the middleware every admin write passes);
- ``routes``: the one list of every admin route, and what each resource writes.

Dependencies go one way: ``routes`` imports the families, the families import the shared modules,
and no family imports another.
"""
