"""The text of a binary stream, decoded a chunk at a time, and its lines: the layer under the record readers.

``TextStream`` reads ``CHUNK_BYTES`` at a time and decodes incrementally in any Python text encoding,
dropping a byte-order mark at the start. A byte the encoding does not accept does not stop decoding
there: the decoder does not know which record or line it is in, the reader above does. It becomes a
lone surrogate (U+DC00 + the byte), which strict decoders never produce, and the reader that meets
it raises ``FileParseError`` naming its record and line (``utf8`` does it for free while making a
record's raw bytes; ``TextStream.bad_at`` says where the first one is for readers that do not).

``line_batches`` splits the text at ``\\n`` without ever holding more than ``limit`` characters of
a line whose end has not come yet.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterator
from typing import BinaryIO

from runtime.errors import FileParseError

#: Bytes read from the stream at a time.
CHUNK_BYTES = 64 * 1024

#: The error handler that keeps decoding past a byte invalid in the encoding, turning each such byte b
#: into the lone surrogate U+DC00+b: strict decoders never produce lone surrogates, so the reader that
#: meets one knows the record and line of a bad byte, which the decoder does not.
_BAD_BYTES = 'conduit.files.bad-bytes'

_SURROGATE = re.compile('[\ud800-\udfff]')


def _mark_bad_bytes(e: UnicodeError) -> tuple[str, int]:
    if not isinstance(e, UnicodeDecodeError):
        raise e
    return ''.join(chr(0xDC00 + b) for b in e.object[e.start:e.end]), e.end


codecs.register_error(_BAD_BYTES, _mark_bad_bytes)


def decode_whole(raw: bytes, encoding: str) -> str:
    """The text of a whole file's bytes, a byte-order mark dropped; FileParseError naming the line of a bad byte."""
    try:
        text = codecs.decode(raw, encoding)
    except UnicodeDecodeError as e:
        before = codecs.decode(raw[:e.start], encoding, _BAD_BYTES)
        raise FileParseError(None, before.count('\n') + 1,
                             f'not valid {encoding}: byte 0x{raw[e.start]:02x} at offset {e.start}') from None
    return text[1:] if text.startswith('\ufeff') else text


class TextStream:
    """The text of a binary stream, decoded CHUNK_BYTES at a time, a leading byte-order mark dropped."""

    def __init__(self, stream: BinaryIO, encoding: str) -> None:
        self._stream = stream
        self._decoder = codecs.getincrementaldecoder(encoding)()
        self._started = False
        self._done = False
        #: Characters returned so far.
        self.offset = 0
        #: Offset of the first character that stands for an invalid byte, once one was met.
        self.bad_at: int | None = None

    def read(self) -> str:
        """The next piece of text; '' once the stream is exhausted."""
        while not self._done:
            data = self._stream.read(CHUNK_BYTES)
            if not data:
                self._done = True
            text = self._decode(data, self._done)
            if not self._started and text:
                self._started = True
                if text[0] == '\ufeff':
                    text = text[1:]
            if text:
                if self.bad_at is None and self._decoder.errors == _BAD_BYTES:
                    m = _SURROGATE.search(text)
                    if m is not None:
                        self.bad_at = self.offset + m.start()
                self.offset += len(text)
                return text
        return ''

    def _decode(self, data: bytes, final: bool) -> str:
        if self._decoder.errors == _BAD_BYTES:
            return self._decoder.decode(data, final)
        state = self._decoder.getstate()
        try:
            return self._decoder.decode(data, final)
        except UnicodeDecodeError:
            # Decode this chunk again, marking the bad bytes, and every chunk after it: see _BAD_BYTES.
            self._decoder.setstate(state)
            self._decoder.errors = _BAD_BYTES
            return self._decoder.decode(data, final)


class LineTooLong(Exception):
    """A line grew past the limit before its end was seen."""


def line_batches(text: TextStream, limit: int) -> Iterator[list[str]]:
    """Lists of complete lines without their '\\n', one list per chunk; an unterminated last line comes alone.

    A line still without its end is held in pieces; once they hold more than limit characters (a
    '\\r' before the '\\n' allowed) LineTooLong is raised and nothing more is read.
    """
    head: list[str] = []
    head_size = 0
    while True:
        chunk = text.read()
        if not chunk:
            break
        lines = chunk.split('\n')
        tail = lines.pop()
        if head and lines:
            head.append(lines[0])
            lines[0] = ''.join(head)
            head = []
            head_size = 0
        if lines:
            yield lines
        if tail:
            head.append(tail)
            head_size += len(tail)
            if head_size > limit + 1:
                raise LineTooLong
    if head:
        yield [''.join(head)]


def utf8(s: str, index: int | None, line: int | None, encoding: str, column: bool = True) -> bytes:
    """s in UTF-8; FileParseError naming the first byte the file's encoding did not accept (see _BAD_BYTES)."""
    try:
        return s.encode('utf-8')
    except UnicodeEncodeError as e:
        bad = ord(s[e.start]) - 0xDC00
        at = f' at column {e.start + 1}' if column else ''
        raise FileParseError(index, line, f'not valid {encoding}: byte 0x{bad:02x}{at}') from None


def too_large(index: int | None, line: int | None, limit: int) -> FileParseError:
    """The error of a record over max_record_bytes."""
    return FileParseError(index, line, f'the record is larger than the limit of {limit} bytes')
