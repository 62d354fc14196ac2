"""The Kafka listener: frames in, responses out, record batches sent with sendfile.

Each connection is served by one task on raw non-blocking sockets (not asyncio streams):
a stream transport owns its socket, so a fetch response could not hand file ranges to
`os.sendfile`. Requests on a connection are handled one at a time, in order, as Kafka's
broker does (it mutes a channel while its request is in flight); pipelined requests wait
in the read buffer. Other connections are not blocked: a fetch waiting for data awaits.
While the next request is already whole in the buffer, the response before it is held and
sent with the ones after it, in one write (a producer with linger.ms=0 pipelines a request
per record, and a write per response cost a quarter of the broker's time): the held ones go
out as soon as the connection would wait, for bytes or for a handler that has to wait (a
long poll, acks=all), so holding never delays a response behind a wait. One departure from
Kafka's one-at-a-time rule: a Produce whose records are appended and which waits for its
followers alone is finished in a task while the next Produce requests are handled; any other
request waits for them, and the answers go out in request order (docs/architecture.md).

A listener has a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL). TLS runs
over the same raw socket through an `ssl.SSLObject` and memory buffers; record batches
are then read from their files and encrypted (no sendfile, as in Kafka). SASL listeners
authenticate each connection first (sasl_authenticator.py). Every request is handed over
with its connection (`ClientConnection`: the listener, the security protocol, the client's
address and the principal), from which the router builds the request's `RequestContext`.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
import ssl
import struct
import time
import types
from collections import deque
from collections.abc import Callable, Coroutine, Generator
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

from loglake.protocol import ApiKey, Chunk, ProtocolDecodeError, read_frame_size
from loglake.security.listeners import SecurityProtocol
from loglake.security.principal import ANONYMOUS, KafkaPrincipal
from loglake.security.tls import certificate_principal_name

from ingest_gateway.network.request_context import ClientConnection, CloseConnection, take_only_replication_left

if TYPE_CHECKING:
    from ingest_gateway.network.sasl_authenticator import SaslAuthenticator
    from ingest_gateway.observability.metrics import BrokerMetrics, RequestTiming

log = logging.getLogger(__name__)

_RECV_SIZE = 256 * 1024
# Held responses are sent once they add up to this, even if more requests are in.
_HOLD_BYTES = 64 * 1024
# A response whose file ranges add up to at most this is read into memory and sent in one
# write. A fetch of a few small batches (what followers and consumers of a linger.ms=0
# producer get) otherwise costs three writes (head, sendfile, tail), each of which can wake
# the reader for part of a frame; the copy costs less than those system calls.
_INLINE_RECORDS_BYTES = 64 * 1024
# Produce requests of one connection waiting for their followers at once; the next one is
# served after them (as every request is, Kafka's way).
_MAX_REPLICATING = 64
# A request payload's first field.
_API_KEY = struct.Struct(">h")
TLS_HANDSHAKE_TIMEOUT_S = 10.0


# A request payload and its connection in, the response frame's chunks out (None: no
# response, acks=0).
RequestHandler = Callable[[ClientConnection, memoryview], Coroutine[object, None, list[Chunk] | None]]


class ConnectionClosed(Exception):
    pass


@dataclass(frozen=True)
class ListenerSecurity:
    """How a listener's connections are secured."""

    name: str = "PLAINTEXT"
    protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT
    tls: ssl.SSLContext | None = None
    # A new authenticator per connection (SASL_* listeners).
    authenticator: Callable[[], SaslAuthenticator] | None = None


class KafkaServer:
    def __init__(
        self,
        host: str,
        port: int,
        handler: RequestHandler,
        max_request_bytes: int,
        metrics: BrokerMetrics | None = None,
        security: ListenerSecurity | None = None,
    ) -> None:
        self.host = host
        self.port = port
        self.security = security or ListenerSecurity()
        self._handler = handler
        self._metrics = metrics
        self._max_request_bytes = max_request_bytes
        self._listener: socket.socket | None = None
        self._accept_task: asyncio.Task | None = None
        self._connections: set[asyncio.Task] = set()
        self._accepted = itertools.count()

    async def start(self) -> None:
        sock = socket.create_server((self.host, self.port), reuse_port=False, backlog=512)
        sock.setblocking(False)
        self._listener = sock
        self.port = sock.getsockname()[1]
        self._accept_task = asyncio.create_task(self._accept_loop(sock))

    async def stop(self) -> None:
        if self._accept_task is not None:
            self._accept_task.cancel()
        if self._listener is not None:
            self._listener.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)

    async def _accept_loop(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            conn, address = await loop.sock_accept(listener)
            conn.setblocking(False)
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            peer = f"{address[0]}:{address[1]}"
            local = conn.getsockname()
            connection = ClientConnection(
                f"{local[0]}:{local[1]}-{peer}-{next(self._accepted)}",  # Kafka's connection id
                self.security.name,
                self.security.protocol,
                peer,
            )
            task = asyncio.create_task(self._serve(conn, connection))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _serve(self, conn: socket.socket, connection: ClientConnection) -> None:
        loop = asyncio.get_running_loop()
        security = self.security
        peer = connection.client_address
        outbox = _Outbox(PlainChannel(loop, conn), self._metrics, peer)
        authenticator = None if security.authenticator is None else security.authenticator()
        buffer = bytearray()
        metrics = self._metrics
        try:
            if security.tls is not None:
                tls = TlsChannel(loop, conn, security.tls)
                await asyncio.wait_for(tls.handshake(), TLS_HANDSHAKE_TIMEOUT_S)
                outbox.channel = tls
                if authenticator is None:
                    connection.principal = tls.principal()
            channel = outbox.channel
            # When the last bytes came in: a request already whole in the buffer (pipelined)
            # arrived then, and waits in the buffer as in Kafka's request queue.
            received = time.perf_counter()
            while True:
                while len(buffer) < 4:
                    await outbox.flush()  # nothing more to answer before bytes come
                    buffer += await channel.receive()
                    received = time.perf_counter()
                size = _frame_size(buffer, self._max_request_bytes)
                while len(buffer) < 4 + size:
                    await outbox.flush()
                    buffer += await channel.receive()
                    received = time.perf_counter()
                with memoryview(buffer) as view:
                    payload = memoryview(bytes(view[4 : 4 + size]))
                del buffer[: 4 + size]
                if outbox.replicating and _API_KEY.unpack_from(payload)[0] != ApiKey.PRODUCE:
                    await outbox.settle()  # only Produce requests go on while others replicate
                if authenticator is not None:
                    chunks = await authenticator.intercept(payload)
                    if chunks is not None:
                        await outbox.flush()
                        await channel.send(chunks)
                        if authenticator.principal is not None:
                            connection.principal = authenticator.principal
                        continue
                timing = None if metrics is None else metrics.begin_request(received)
                request = self._handler(connection, payload)
                try:
                    # Run here until the handler's first wait, if any: most never wait.
                    waiting_on = request.send(None)
                except StopIteration as done:
                    chunks = done.value
                    take_only_replication_left()  # a Produce whose ISR had it already
                else:
                    if take_only_replication_left() and outbox.replicating < _MAX_REPLICATING:
                        # A Produce with its records appended, waiting for the ISR: read on.
                        outbox.defer(request, waiting_on, payload, timing)
                        if connection.throttle_ms > 0:
                            await _mute(connection, outbox)
                        continue
                    chunks = await outbox.resume(request, waiting_on)
                if timing is not None:
                    timing.handled = time.perf_counter()
                then = outbox.add(chunks, payload, timing)
                if then is not None:
                    await outbox.flush(then)
                if connection.throttle_ms > 0:
                    await _mute(connection, outbox)
        except ConnectionClosed:
            # A client that only shut its side down still reads the answers of what it sent.
            await outbox.flush_before_close()
        except CloseConnection as exc:
            try:
                await outbox.settle()
                if exc.response:
                    await outbox.channel.send(exc.response)
            except (ConnectionError, OSError, ssl.SSLError):
                pass
            log.info("closing connection from %s: %s", peer, exc)
        except ProtocolDecodeError as exc:
            # Kafka closes a connection whose bytes it cannot parse; nothing was applied.
            # The answers to the requests before it still go out, as they would have.
            await outbox.flush_before_close()
            log.warning("closing connection from %s: %s", peer, exc)
        except (ssl.SSLError, TimeoutError) as exc:
            log.info("closing connection from %s: TLS failed: %s", peer, exc)
        except (ConnectionError, OSError) as exc:
            log.debug("connection from %s ended: %s", peer, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            await outbox.flush_before_close()
            log.exception("closing connection from %s after an unexpected error", peer)
        finally:
            outbox.abandon()
            conn.close()


async def _mute(connection: ClientConnection, outbox: _Outbox) -> None:
    """A throttled connection: its next request waits in the socket until the quota allows it."""
    await outbox.settle()
    await asyncio.sleep(connection.throttle_ms / 1000)
    connection.throttle_ms = 0


class _Queued(NamedTuple):
    """An answer in a connection's queue while Produce requests replicate: a deferred
    Produce's task, or a response (`chunks`) behind one."""

    task: asyncio.Task[list[Chunk] | None] | None
    chunks: list[Chunk] | None
    payload: memoryview
    timing: RequestTiming | None


class _Outbox:
    """A connection's responses on their way out: held while more requests are in, then
    sent together (see the module's docstring), each counted in the metrics once sent.

    A Produce that waits for its followers can be deferred: it finishes in a task while the
    connection's next requests are read, and from then on until the queue is empty every
    answer goes into `_queue` and a drainer task sends them in request order."""

    def __init__(self, channel: PlainChannel | TlsChannel, metrics: BrokerMetrics | None, peer: str) -> None:
        self.channel = channel
        self._metrics = metrics
        self._peer = peer
        self._held: list[bytes] = []
        self._held_bytes = 0
        self._sent_later: list[tuple[memoryview, RequestTiming]] = []
        self._queue: deque[_Queued] = deque()
        self._drainer: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._serving = asyncio.current_task()
        # Deferred Produce requests still waiting for their followers.
        self.replicating = 0

    def defer(
        self,
        request: Coroutine[object, None, list[Chunk] | None],
        waiting_on: object,
        payload: memoryview,
        timing: RequestTiming | None,
    ) -> None:
        """Finish a Produce whose records are appended (it waits for the ISR alone) in a
        task; its answer goes out in its turn."""
        loop = asyncio.get_running_loop()
        task = loop.create_task(_finish(request, waiting_on, timing))
        self.replicating += 1
        task.add_done_callback(self._replicated)
        self._queue.append(_Queued(task, None, payload, timing))
        if self._drainer is None:
            self._drainer = loop.create_task(self._drain())

    def _replicated(self, _task: asyncio.Task[list[Chunk] | None]) -> None:
        self.replicating -= 1

    async def settle(self) -> None:
        """Wait until every deferred Produce is answered, then send what is held."""
        while self._drainer is not None:
            await asyncio.wait((self._drainer,))
        if self._failure is not None:
            raise self._failure
        await self.flush()

    def abandon(self) -> None:
        """The connection is closing: deferred requests stop waiting (nothing is sent)."""
        if self._drainer is not None:
            self._drainer.cancel()
        for queued in self._queue:
            if queued.task is not None:
                queued.task.cancel()
        self._queue.clear()

    async def _drain(self) -> None:
        queue = self._queue
        try:
            await self.flush()  # the answers to the requests before the first deferred one
            while queue:
                head = queue[0].task
                if head is not None and not head.done():
                    await asyncio.wait((head,))
                # Every answer ready from the head on, in one write.
                pieces: list[Chunk] = []
                answered: list[_Queued] = []
                while queue and (queue[0].task is None or queue[0].task.done()):
                    queued = queue.popleft()
                    chunks = queued.chunks if queued.task is None else queued.task.result()
                    if chunks:
                        pieces.extend(chunks)
                    if queued.timing is not None:
                        answered.append(queued)
                if pieces:
                    await self.channel.send(_joined(pieces))
                for queued in answered:
                    self._metrics.end_request(queued.payload, queued.timing, self._peer)  # type: ignore[union-attr, arg-type]
        except Exception as exc:  # noqa: BLE001 - the connection's end: its serving task is told
            self._failure = exc
            log.info("closing connection from %s: a deferred answer failed: %s", self._peer, exc)
            if self._serving is not None:
                self._serving.cancel()
        finally:
            self._drainer = None

    async def resume(
        self, request: Coroutine[object, None, list[Chunk] | None], waiting_on: object
    ) -> list[Chunk] | None:
        """Carry on a request's handler that has to wait (on `waiting_on`): the held
        responses go out first, so none waits behind it."""
        try:
            await self.flush()
        except BaseException:
            request.close()
            raise
        return await _resume(request, waiting_on)

    def add(self, chunks: list[Chunk] | None, payload: memoryview, timing: RequestTiming | None) -> list[Chunk] | None:
        """A request's response (None: acks=0, nothing to send): held if it is in memory
        and the held ones are small; queued while a deferred Produce is ahead of it.
        Returns what the caller must now `flush` after the held ones ([]: only those, too
        many bytes held; file ranges: these), or None: nothing to send yet."""
        if chunks and not _in_memory(chunks):
            chunks = _inlined(chunks)
        if self._drainer is not None:
            if chunks or timing is not None:
                self._queue.append(_Queued(None, chunks, payload, timing))
            return None
        if timing is not None:
            self._sent_later.append((payload, timing))
        if chunks:
            if not _in_memory(chunks):
                return chunks  # file ranges: sent now, after the held ones
            self._held.extend(chunks)  # type: ignore[arg-type]
            self._held_bytes += sum(map(len, chunks))  # type: ignore[arg-type]
        return [] if self._held_bytes >= _HOLD_BYTES else None

    async def flush(self, then: list[Chunk] | None = None) -> None:
        """Send the held responses (in one write), then the chunks of `then`."""
        if self._drainer is not None and self._drainer is not asyncio.current_task():
            return  # the drainer sends, in order
        if self._held:
            held = self._held[0] if len(self._held) == 1 else b"".join(self._held)
            self._held = []
            self._held_bytes = 0
            await self.channel.send([held, *then] if then else [held])
        elif then:
            await self.channel.send(then)
        if self._sent_later:
            sent, self._sent_later = self._sent_later, []
            for payload, timing in sent:
                self._metrics.end_request(payload, timing, self._peer)  # type: ignore[union-attr]

    async def flush_before_close(self) -> None:
        try:
            await self.settle()
        except (ConnectionError, OSError, ssl.SSLError):
            pass


def _in_memory(chunks: list[Chunk]) -> bool:
    """No file range among the chunks (those go out with sendfile)."""
    return chunks[0].__class__ is bytes if len(chunks) == 1 else all(c.__class__ is bytes for c in chunks)


def _inlined(chunks: list[Chunk]) -> list[Chunk]:
    """A response with file ranges as one bytes object if those are small, else as it is."""
    if sum(c.size for c in chunks if not isinstance(c, bytes)) > _INLINE_RECORDS_BYTES:
        return chunks
    pieces: list[bytes] = []
    for c in chunks:
        if isinstance(c, bytes):
            pieces.append(c)
            continue
        data = os.pread(c.fd, c.size, c.position)
        if len(data) != c.size:
            return chunks  # the file was cut under us: sendfile finds out and closes the connection
        pieces.append(data)
    return [b"".join(pieces)]


def _joined(chunks: list[Chunk]) -> list[Chunk]:
    """Answers in one write when they are all in memory."""
    return [b"".join(chunks)] if _in_memory(chunks) else chunks  # type: ignore[arg-type]


async def _finish(
    request: Coroutine[object, None, list[Chunk] | None], waiting_on: object, timing: RequestTiming | None
) -> list[Chunk] | None:
    chunks = await _resume(request, waiting_on)
    if timing is not None:
        timing.handled = time.perf_counter()
    return chunks


@types.coroutine
def _resume(
    request: Coroutine[object, None, list[Chunk] | None], waiting_on: object
) -> Generator[object, None, list[Chunk] | None]:
    """Carry on a coroutine that has already yielded `waiting_on` to the event loop, as
    `await request` would have: what the loop sends or throws in goes on to it."""
    while True:
        try:
            sent = yield waiting_on
        except BaseException as exc:  # noqa: BLE001 - cancellation, or this generator closed: passed on
            try:
                waiting_on = request.throw(exc)
            except StopIteration as done:
                return done.value
        else:
            try:
                waiting_on = request.send(sent)
            except StopIteration as done:
                return done.value


class PlainChannel:
    """A connection's bytes as they are on the socket; file ranges go out with sendfile."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conn: socket.socket) -> None:
        self._loop = loop
        self._conn = conn

    async def receive(self) -> bytes:
        return await _receive(self._loop, self._conn)

    async def send(self, chunks: list[Chunk]) -> None:
        await _send_chunks(self._loop, self._conn, chunks)


class TlsChannel:
    """TLS over the raw socket: an SSLObject between memory buffers and the socket."""

    def __init__(self, loop: asyncio.AbstractEventLoop, conn: socket.socket, context: ssl.SSLContext) -> None:
        self._loop = loop
        self._conn = conn
        self._incoming = ssl.MemoryBIO()
        self._outgoing = ssl.MemoryBIO()
        self._tls = context.wrap_bio(self._incoming, self._outgoing, server_side=True)
        # Deferred produces' answers are sent by a task of their own while the connection
        # reads (and a read may have to answer, e.g. a TLS key update): one sender at a time,
        # so that two writes' bytes never interleave on the socket.
        self._sending = asyncio.Lock()

    async def _flush(self) -> None:
        async with self._sending:
            data = self._outgoing.read()
            if data:
                await self._loop.sock_sendall(self._conn, data)

    async def _fill(self) -> None:
        data = await self._loop.sock_recv(self._conn, _RECV_SIZE)
        if not data:
            self._incoming.write_eof()
            raise ConnectionClosed
        self._incoming.write(data)

    async def handshake(self) -> None:
        while True:
            try:
                self._tls.do_handshake()
                await self._flush()
                return
            except ssl.SSLWantReadError:
                await self._flush()
                await self._fill()

    def principal(self) -> KafkaPrincipal:
        """The verified client certificate's subject, else ANONYMOUS (Kafka's default builder)."""
        certificate = self._tls.getpeercert()
        name = certificate_principal_name(certificate) if certificate else None
        return KafkaPrincipal.user(name) if name else ANONYMOUS

    async def receive(self) -> bytes:
        while True:
            # Everything decryptable now, in one piece (a read gives one TLS record, 16 KB).
            pieces = []
            try:
                while True:
                    data = self._tls.read(_RECV_SIZE)
                    if not data:
                        raise ConnectionClosed
                    pieces.append(data)
            except ssl.SSLWantReadError:
                pass
            except ssl.SSLZeroReturnError:
                if not pieces:
                    raise ConnectionClosed from None
            if pieces:
                return b"".join(pieces)
            await self._flush()  # TLS 1.3 may need to answer (key updates, tickets)
            await self._fill()

    async def send(self, chunks: list[Chunk]) -> None:
        for chunk in chunks:
            if isinstance(chunk, (bytes, bytearray, memoryview)):
                self._tls.write(chunk)
            else:
                position, remaining = chunk.position, chunk.size
                while remaining > 0:
                    piece = os.pread(chunk.fd, min(remaining, _RECV_SIZE), position)
                    if not piece:
                        raise ConnectionClosed  # the file is shorter than the slice
                    self._tls.write(piece)
                    position += len(piece)
                    remaining -= len(piece)
                    if self._outgoing.pending >= _RECV_SIZE:
                        await self._flush()
        await self._flush()


async def _receive(loop: asyncio.AbstractEventLoop, conn: socket.socket) -> bytes:
    data = await loop.sock_recv(conn, _RECV_SIZE)
    if not data:
        raise ConnectionClosed
    return data


def _frame_size(buffer: bytearray, max_bytes: int) -> int:
    return read_frame_size(bytes(buffer[:4]), max_bytes)


async def _send_chunks(loop: asyncio.AbstractEventLoop, conn: socket.socket, chunks: list[Chunk]) -> None:
    for chunk in chunks:
        if isinstance(chunk, (bytes, bytearray, memoryview)):
            # Straight to the socket: it nearly always takes the whole response at once.
            try:
                sent = conn.send(chunk)
            except BlockingIOError:
                sent = 0
            if sent < len(chunk):
                await loop.sock_sendall(conn, memoryview(chunk)[sent:])
        else:
            await _sendfile(loop, conn, chunk.fd, chunk.position, chunk.size)


async def _sendfile(loop: asyncio.AbstractEventLoop, conn: socket.socket, fd: int, position: int, count: int) -> None:
    """Zero-copy from a segment file to the socket, waiting for writability as needed."""
    out = conn.fileno()
    while count > 0:
        try:
            sent = os.sendfile(out, fd, position, count)
        except BlockingIOError:
            sent = -1
        if sent == 0:
            # The file is shorter than the slice (truncated under us): the frame cannot be
            # completed, so the connection must go.
            raise ConnectionClosed
        if sent > 0:
            position += sent
            count -= sent
        if count > 0:
            await _writable(loop, out)


async def _writable(loop: asyncio.AbstractEventLoop, fd: int) -> None:
    ready: asyncio.Future[None] = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    loop.add_writer(fd, wake)
    try:
        await ready
    finally:
        loop.remove_writer(fd)
