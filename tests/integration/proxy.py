"""A fault-injecting TCP proxy on 127.0.0.1 between a shard and its central
server, for the moments of the protocol a failpoint cannot reach: the
central side of a link that froze.

`LinkProxy(port)` listens on a free port of 127.0.0.1 and forwards every
connection to 127.0.0.1:`port`, reading the PostgreSQL protocol's frames
(the startup packets, then a type byte and a length) in both directions.
`freeze_after(*patterns, moment=...)` arms a one-shot rule: the client's
frames must contain the patterns in that order (bytes, e.g. b"FOR UPDATE"
then b"FETCH"); at the frame that contains the last one, the link freezes:

* "hold": that frame is held back — the server never sees it;
* "request": that frame reaches the server, and nothing passes afterwards,
  its reply included;
* "reply": the server's reply passes, up to its ReadyForQuery, and nothing
  passes afterwards.

A frozen link passes nothing in either direction, FIN included, as a
network that stopped would; the other connections go on. With
`dead_network()`, new connections are held too, before they reach the
server; `freeze_all()` freezes every open link as well. `release()` cuts
every frozen or held connection (both sockets closed, as a link reset)
and lets new ones through again. `fired` is set when the rule froze a link."""

import socket
import struct
import threading

# Startup-packet codes that a one-byte answer follows (SSL, GSS encryption).
_ONE_BYTE_ANSWER = (80877103, 80877104)


def _read_exactly(sock, n):
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


class _Link:
    def __init__(self, proxy, client):
        self.proxy = proxy
        self.client = client
        self.server = None
        self.frozen = threading.Event()
        self.one_byte_answers = 0  # owed by the server: SSL/GSS replies
        self.lock = threading.Lock()
        self.freeze_at_ready = False

    def run(self):
        if self.proxy._dead.is_set():
            self.frozen.set()
            self.proxy._register_frozen(self)
            return
        try:
            self.server = socket.create_connection(("127.0.0.1", self.proxy.upstream_port))
            # As libpq and the server do: a frame forwarded alone must not
            # wait for the ACK of the one before (Nagle and delayed ACKs
            # would add 40 ms to every round trip).
            self.server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            self.client.close()
            return
        threading.Thread(target=self._pump_from_server, daemon=True).start()
        self._pump_from_client()

    def _hold(self):
        """Blocks while frozen: release() closes the sockets."""
        self.proxy._register_frozen(self)
        self.proxy._released.wait()
        raise ConnectionError("released")

    def _pump_from_client(self):
        try:
            startup = True
            while True:
                if startup:
                    head = _read_exactly(self.client, 8)
                    length, code = struct.unpack("!ii", head)
                    frame = head + _read_exactly(self.client, length - 8)
                    if code in _ONE_BYTE_ANSWER:
                        with self.lock:
                            self.one_byte_answers += 1
                    else:  # the startup message (or a cancel request)
                        startup = False
                else:
                    head = _read_exactly(self.client, 5)
                    (length,) = struct.unpack("!i", head[1:])
                    frame = head + _read_exactly(self.client, length - 4)
                if self.frozen.is_set():
                    self._hold()
                moment = self.proxy._match(frame)
                if moment == "hold":
                    self.frozen.set()
                    self.proxy.fired.set()
                    self._hold()
                if moment == "request":
                    self.frozen.set()
                    self.server.sendall(frame)
                    self.proxy.fired.set()
                    self._hold()
                if moment == "reply":
                    self.freeze_at_ready = True
                self.server.sendall(frame)
        except (ConnectionError, OSError):
            self._end()

    def _pump_from_server(self):
        try:
            while True:
                first = _read_exactly(self.server, 1)
                # An answer to SSL or GSS encryption comes only after the
                # client pump counted the request (it counts, then sends).
                with self.lock:
                    owed = self.one_byte_answers
                    if owed:
                        self.one_byte_answers -= 1
                if owed:
                    frame = first
                else:
                    head = first + _read_exactly(self.server, 4)
                    (length,) = struct.unpack("!i", head[1:])
                    frame = head + _read_exactly(self.server, length - 4)
                if self.frozen.is_set():
                    self._hold()
                self.client.sendall(frame)
                if self.freeze_at_ready and frame[:1] == b"Z":
                    self.frozen.set()
                    self.proxy.fired.set()
                    self._hold()
        except (ConnectionError, OSError):
            self._end()

    def _end(self):
        """A side closed: pass it on, unless frozen (a frozen link passes
        no FIN either) — then release() closes."""
        if self.frozen.is_set() and not self.proxy._released.is_set():
            self.proxy._register_frozen(self)
            self.proxy._released.wait()
        self._close()

    def _close(self):
        for sock in (self.client, self.server):
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                sock.close()


class LinkProxy:
    def __init__(self, upstream_port):
        self.upstream_port = upstream_port
        self.fired = threading.Event()
        self._rule = None  # (remaining patterns, moment)
        self._rule_lock = threading.Lock()
        self._released = threading.Event()
        self._dead = threading.Event()
        self._frozen = []
        self._links = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(64)
        self.port = self._listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while True:
            try:
                client, _ = self._listener.accept()
                client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            except OSError:
                return
            link = _Link(self, client)
            with self._rule_lock:
                self._links.append(link)
            threading.Thread(target=link.run, daemon=True).start()

    def freeze_after(self, *patterns, moment="request"):
        assert moment in ("hold", "request", "reply") and patterns
        with self._rule_lock:
            self.fired.clear()
            self._released.clear()
            self._rule = (list(patterns), moment)

    def dead_network(self):
        """From now on, new connections are held before the server."""
        self._released.clear()
        self._dead.set()

    def freeze_all(self):
        """The network stops: every link passes nothing from now on, and
        new connections are held."""
        self.dead_network()
        with self._rule_lock:
            links = list(self._links)
        for link in links:
            link.frozen.set()

    def _match(self, frame):
        with self._rule_lock:
            if self._rule is None:
                return None
            patterns, moment = self._rule
            if patterns[0] not in frame:
                return None
            patterns.pop(0)
            if patterns:
                return None
            self._rule = None
            return moment

    def _register_frozen(self, link):
        with self._rule_lock:
            self._frozen.append(link)
        if self._released.is_set():
            link._close()

    def release(self):
        """Cuts every frozen or held connection; new ones pass again."""
        self._dead.clear()
        with self._rule_lock:
            self._rule = None
            frozen, self._frozen = self._frozen, []
            frozen += [link for link in self._links if link.frozen.is_set()]
            self._links = [link for link in self._links if not link.frozen.is_set()]
        self._released.set()
        for link in frozen:
            link._close()

    def close(self):
        self.release()
        self._listener.close()
