"""The Kafka listener: frames in, responses out, record batches sent with sendfile.

Each connection is served by one task on raw non-blocking sockets (not asyncio streams):
a stream transport owns its socket, so a fetch response could not hand file ranges to
`os.sendfile`. Requests on a connection are handled one at a time, in order, as Kafka's
broker does (it mutes a channel while its request is in flight); pipelined requests wait
in the read buffer. Other connections are not blocked: a fetch waiting for data awaits.

A listener has a security protocol (PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL). TLS runs
over the same raw socket through an `ssl.SSLObject` and memory buffers; record batches
are then read from their files and encrypted (no sendfile, as in Kafka). SASL listeners
authenticate each connection first (sasl_authenticator.py). Every request is handed over
with its `RequestContext`: the listener, the security protocol, the peer and the principal.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loglake.protocol import Chunk, ProtocolDecodeError, read_frame_size
from loglake.security.listeners import SecurityProtocol
from loglake.security.principal import ANONYMOUS, KafkaPrincipal
from loglake.security.tls import certificate_principal_name

from ingest_gateway.network.request_context import CloseConnection, RequestContext, bind_request

if TYPE_CHECKING:
    from ingest_gateway.network.sasl_authenticator import SaslAuthenticator
    from ingest_gateway.observability.metrics import BrokerMetrics

log = logging.getLogger(__name__)

_RECV_SIZE = 256 * 1024
TLS_HANDSHAKE_TIMEOUT_S = 10.0


# A request payload in, the response frame's chunks out (None: no response, acks=0); the
# handler finds the request's context with `current_request()`.
RequestHandler = Callable[[memoryview], Awaitable[list[Chunk] | None]]


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
            task = asyncio.create_task(self._serve(conn, f"{address[0]}:{address[1]}"))
            self._connections.add(task)
            task.add_done_callback(self._connections.discard)

    async def _serve(self, conn: socket.socket, peer: str) -> None:
        loop = asyncio.get_running_loop()
        security = self.security
        context = RequestContext(security.name, security.protocol, peer)
        bind_request(context)  # this task's own context: its requests see it
        channel: PlainChannel | TlsChannel = PlainChannel(loop, conn)
        authenticator = None if security.authenticator is None else security.authenticator()
        buffer = bytearray()
        metrics = self._metrics
        try:
            if security.tls is not None:
                tls = TlsChannel(loop, conn, security.tls)
                await asyncio.wait_for(tls.handshake(), TLS_HANDSHAKE_TIMEOUT_S)
                channel = tls
                if authenticator is None:
                    context.principal = tls.principal()
            # When the last bytes came in: a request already whole in the buffer (pipelined)
            # arrived then, and waits in the buffer as in Kafka's request queue.
            received = time.perf_counter()
            while True:
                while len(buffer) < 4:
                    buffer += await channel.receive()
                    received = time.perf_counter()
                size = _frame_size(buffer, self._max_request_bytes)
                while len(buffer) < 4 + size:
                    buffer += await channel.receive()
                    received = time.perf_counter()
                with memoryview(buffer) as view:
                    payload = memoryview(bytes(view[4 : 4 + size]))
                del buffer[: 4 + size]
                if authenticator is not None:
                    chunks = await authenticator.intercept(payload)
                    if chunks is not None:
                        await channel.send(chunks)
                        if authenticator.principal is not None:
                            context.principal = authenticator.principal
                        continue
                timing = None if metrics is None else metrics.begin_request(received)
                chunks = await self._handler(payload)
                if timing is not None:
                    timing.handled = time.perf_counter()
                if chunks:
                    await channel.send(chunks)
                if timing is not None:
                    metrics.end_request(payload, timing, peer)  # type: ignore[union-attr]
                if context.throttle_ms > 0:
                    # Muted: the next request waits in the socket until the quota allows it.
                    await asyncio.sleep(context.throttle_ms / 1000)
                    context.throttle_ms = 0
        except ConnectionClosed:
            pass
        except CloseConnection as exc:
            if exc.response:
                try:
                    await channel.send(exc.response)
                except (ConnectionError, OSError, ssl.SSLError):
                    pass
            log.info("closing connection from %s: %s", peer, exc)
        except ProtocolDecodeError as exc:
            # Kafka closes a connection whose bytes it cannot parse; nothing was applied.
            log.warning("closing connection from %s: %s", peer, exc)
        except (ssl.SSLError, TimeoutError) as exc:
            log.info("closing connection from %s: TLS failed: %s", peer, exc)
        except (ConnectionError, OSError) as exc:
            log.debug("connection from %s ended: %s", peer, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("closing connection from %s after an unexpected error", peer)
        finally:
            conn.close()


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

    async def _flush(self) -> None:
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
            await loop.sock_sendall(conn, chunk)
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
