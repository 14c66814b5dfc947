"""The ``conduit`` command line: start and stop the server, and talk to its admin API.

``main`` (``runtime.cli.root``) is the command group; each group of commands lives in a module of
its own, and this module, the only one that knows them all, adds them to it. Loading the CLI loads
no server library: ``conduit start`` imports the server stack when it runs, and commands import
the admin API's client when they call it. Every command prints through ``runtime.cli.output``.
"""

from __future__ import annotations

import click

from runtime.cli import (
    channels,
    dashboard,
    file_channels,
    jobs,
    objects,
    pubsub,
    queues,
    security,
    server,
    services,
    spark,
    subscriptions,
    topics,
)
from runtime.cli.root import main

__all__ = ['main']

for _command in (server.start, server.stop, server.status, services.invoke, services.deploy, services.undeploy,
                 services.services, jobs.job, spark.spark, topics.topic, subscriptions.sub, queues.queue,
                 queues.dlq, topics.publish, pubsub.pubsub, security.sec, channels.channel,
                 file_channels.file_channel, objects.objects, objects.audit, dashboard.dashboard):
    main.add_command(_command)
objects.add_detach_options({name: cmd for name, cmd in main.commands.items() if isinstance(cmd, click.Group)})
