"""File transfer: directories (local or SFTP) as a way to publish messages and invoke services, and to receive them.

Inbound — file channels. A channel (``definition.FileChannelDef``; made through object files, the
admin API or the CLI, kept in ``conduit_file_channel``) watches one directory. In every worker of
every server, ``manager.FileTransfer`` runs one ``poller.Poller`` per active channel, which:

1. lists the directory through a ``Source`` (``sources.LocalSource`` or ``sftp.SftpSource``, both
   behind the protocol of ``source_base``), keeping the files that match the channel's patterns;
2. waits until a file is complete (``completion``: size and mtime stable over N polls, or a marker
   file beside it);
3. claims it by renaming it in place to ``<name>.conduit-claim.<owner>.<time>`` (``claims``): the
   rename is atomic, so of several workers or servers exactly one wins; a claim whose owner died is
   taken over (at once when the owner was a process on this host, else after the claim timeout);
4. hands it to ``processor.FileProcessor``, which reads its records (``parsers``: bytes, text,
   JSON, JSON Lines, CSV, streamed in constant memory) and publishes them to the channel's topics
   and/or invokes its service per record or per file.

Exactly once: every file processing is a run (``conduit_file_run``, SQL in ``statements``) with its
content hash. Each batch of publications is committed in one transaction with the run's progress,
so a crash resumes after the last committed batch; identical content dropped again is skipped (and
logged); a file that fails on a bad record goes to the error directory with a ``.error.json``, and
the digests of the records it published are kept (``conduit_file_digest``) so that the fixed file,
dropped again, publishes only the records not published before. After success the file is
deleted, moved (``naming`` renders the target) or left in place. Service invocations are at least
once around a crash (at most one uncommitted batch runs again).

Outbound — file subscribers. A pub/sub subscription of kind ``file``
(``runtime.pubsub.subscribers.file``) writes its topic's messages into a local or SFTP directory,
one file per message or per batch (``writers``: JSON, JSON Lines or CSV), each written under a
temporary name and renamed when complete (``Source.write_atomic``), with the retries and
dead-letter queue of every other subscriber kind.

``admin`` and ``objects`` are the administration of channels (admin API, CLI, object files).
"""
