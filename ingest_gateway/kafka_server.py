"""The Kafka listener: frames in, responses out, record batches sent with sendfile.

Each connection is served by one task on raw non-blocking sockets (not asyncio streams):
a stream transport owns its socket, so a fetch response could not hand file ranges to
`os.sendfile`. Requests on a connection are handled one at a time, in order, as Kafka's
broker does (it mutes a channel while its request is in flight); pipelined requests wait
in the read buffer. Other connections are not blocked: a fetch waiting for data awaits.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from loglake.protocol import Chunk, ProtocolDecodeError, read_frame_size

if TYPE_CHECKING:
    from ingest_gateway.metrics import BrokerMetrics

log = logging.getLogger(__name__)

# A request payload in, the response frame's chunks out (None: no response, acks=0).
RequestHandler = Callable[[memoryview, str], Awaitable[list[Chunk] | None]]

_RECV_SIZE = 256 * 1024


class ConnectionClosed(Exception):
    pass


class CloseConnection(Exception):
    """Raised by a request handler: close the connection without a response (as Kafka
    does for a failed acks=0 produce)."""


class KafkaServer:
    def __init__(
        self,
        host: str,
        port: int,
        handler: RequestHandler,
        max_request_bytes: int,
        metrics: BrokerMetrics | None = None,
    ) -> None:
        self.host = host
        self.port = port
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
        buffer = bytearray()
        metrics = self._metrics
        # When the last bytes came in: a request already whole in the buffer (pipelined)
        # arrived then, and waits in the buffer as in Kafka's request queue.
        received = time.perf_counter()
        try:
            while True:
                while len(buffer) < 4:
                    buffer += await _receive(loop, conn)
                    received = time.perf_counter()
                size = _frame_size(buffer, self._max_request_bytes)
                while len(buffer) < 4 + size:
                    buffer += await _receive(loop, conn)
                    received = time.perf_counter()
                with memoryview(buffer) as view:
                    payload = memoryview(bytes(view[4 : 4 + size]))
                del buffer[: 4 + size]
                timing = None if metrics is None else metrics.begin_request(received)
                chunks = await self._handler(payload, peer)
                if timing is not None:
                    timing.handled = time.perf_counter()
                if chunks:
                    await _send_chunks(loop, conn, chunks)
                if timing is not None:
                    metrics.end_request(payload, timing, peer)  # type: ignore[union-attr]
        except ConnectionClosed:
            pass
        except CloseConnection as exc:
            log.info("closing connection from %s: %s", peer, exc)
        except ProtocolDecodeError as exc:
            # Kafka closes a connection whose bytes it cannot parse; nothing was applied.
            log.warning("closing connection from %s: %s", peer, exc)
        except (ConnectionError, OSError) as exc:
            log.debug("connection from %s ended: %s", peer, exc)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("closing connection from %s after an unexpected error", peer)
        finally:
            conn.close()


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
    ready = loop.create_future()
    loop.add_writer(fd, lambda: ready.done() or ready.set_result(None))
    try:
        await ready
    finally:
        loop.remove_writer(fd)
