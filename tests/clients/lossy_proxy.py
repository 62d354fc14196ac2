"""A Kafka-aware TCP proxy that loses chosen Produce responses.

Clients talk to the proxy; it forwards each request to the broker and each response back,
rewriting broker addresses in Metadata and FindCoordinator responses to its own so that
clients stay on it. When told to, it drops a Produce response and closes that connection:
the broker has appended the batch but the producer never hears so, and resends it — the
case idempotent producers exist for.
"""

from __future__ import annotations

import socket
import threading

from loglake.protocol import ApiKey, decode_response, encode_response


def _recv_exact(sock: socket.socket, n: int) -> bytes | None:
    buf = bytearray()
    while len(buf) < n:
        try:
            chunk = sock.recv(n - len(buf))
        except OSError:
            return None
        if not chunk:
            return None
        buf += chunk
    return bytes(buf)


def _recv_frame(sock: socket.socket) -> bytes | None:
    prefix = _recv_exact(sock, 4)
    if prefix is None:
        return None
    payload = _recv_exact(sock, int.from_bytes(prefix, "big"))
    return None if payload is None else prefix + payload


class LossyProxy:
    def __init__(self, broker_bootstrap: str) -> None:
        host, port = broker_bootstrap.rsplit(":", 1)
        self._target = (host, int(port))
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        # Produce responses to drop: the n-th ones (1-based) among all that pass through.
        self._drop: set[int] = set()
        self.produce_responses = 0
        self.dropped = 0
        self._sockets: list[socket.socket] = []
        self._closed = False
        threading.Thread(target=self._accept_loop, daemon=True).start()

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def drop_produce_responses(self, *ordinals: int) -> None:
        with self._lock:
            self._drop |= set(ordinals)

    def close(self) -> None:
        self._closed = True
        self._listener.close()
        for s in list(self._sockets):
            _close(s)

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self._target)
            except OSError:
                client.close()
                continue
            self._sockets += [client, upstream]
            inflight: dict[int, tuple[int, int]] = {}
            threading.Thread(target=self._requests, args=(client, upstream, inflight), daemon=True).start()
            threading.Thread(target=self._responses, args=(client, upstream, inflight), daemon=True).start()

    def _requests(self, client: socket.socket, upstream: socket.socket, inflight: dict) -> None:
        while True:
            frame = _recv_frame(client)
            if frame is None:
                break
            api_key = int.from_bytes(frame[4:6], "big")
            api_version = int.from_bytes(frame[6:8], "big")
            correlation_id = int.from_bytes(frame[8:12], "big")
            inflight[correlation_id] = (api_key, api_version)
            try:
                upstream.sendall(frame)
            except OSError:
                break
        _close(client)
        _close(upstream)

    def _responses(self, client: socket.socket, upstream: socket.socket, inflight: dict) -> None:
        while True:
            frame = _recv_frame(upstream)
            if frame is None:
                break
            correlation_id = int.from_bytes(frame[4:8], "big")
            api_key, api_version = inflight.pop(correlation_id, (None, None))
            if api_key == ApiKey.PRODUCE:
                with self._lock:
                    self.produce_responses += 1
                    drop = self.produce_responses in self._drop
                    if drop:
                        self.dropped += 1
                if drop:
                    break  # the response is lost with the connection
            elif api_key in (ApiKey.METADATA, ApiKey.FIND_COORDINATOR):
                frame = self._rewrite(api_key, api_version, frame)
            try:
                client.sendall(frame)
            except OSError:
                break
        _close(client)
        _close(upstream)

    def _rewrite(self, api_key: int, api_version: int, frame: bytes) -> bytes:
        correlation_id, body = decode_response(api_key, api_version, frame[4:])
        if api_key == ApiKey.METADATA:
            for b in body["brokers"]:
                b["host"], b["port"] = "127.0.0.1", self.port
        elif api_version >= 4:
            for c in body["coordinators"]:
                if c["port"] >= 0:
                    c["host"], c["port"] = "127.0.0.1", self.port
        elif body["port"] >= 0:
            body["host"], body["port"] = "127.0.0.1", self.port
        return b"".join(bytes(c) for c in encode_response(api_key, api_version, correlation_id, body))


def _close(sock: socket.socket) -> None:
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()
