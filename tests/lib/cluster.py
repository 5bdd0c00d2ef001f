"""Throwaway PostgreSQL clusters, shared by the integration tests and the
benchmark. Each cluster runs as the `postgres` user in its own temporary
directory, listens only on a Unix socket there, and preloads pg_idgen
(unless asked otherwise). Its settings come from cluster.conf, which
cluster.sh (the shell scripts' clusters) reads too."""

import fcntl
import hashlib
import itertools
import os
import shutil
import subprocess
import tempfile
import time

import psycopg

PG_BIN = os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin")

_names = itertools.count(1)


def _as_postgres(*args, env=None, check=True, **kwargs):
    return subprocess.run(
        ["runuser", "-u", "postgres", "--", *args],
        env=env,
        check=check,
        capture_output=True,
        text=True,
        **kwargs,
    )


def _own_libpq(pg_bin=None):
    """The relocatable builds of PostgreSQL 16-18 (tests/setup.sh) carry
    their own libpq, but their postgres_fdw.so looks for it under the
    build's prefix (RUNPATH /opt/postgresql/lib) and so loads Debian's
    older one, which lacks what a newer postgres_fdw needs (PostgreSQL 17:
    `undefined symbol: PQcancelStart`). Point the server at its own."""
    lib = os.path.join(os.path.dirname(pg_bin or PG_BIN), "lib")
    if not os.path.exists(os.path.join(lib, "libpq.so.5")):
        return {}  # Debian's PostgreSQL uses the system's libpq
    return {"LD_LIBRARY_PATH": ":".join(filter(None, [lib, os.environ.get("LD_LIBRARY_PATH")]))}


# The settings every throwaway cluster starts with, shared with cluster.sh.
CONF_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "cluster.conf")


def base_conf(directory, preload=True):
    """cluster.conf's postgresql.conf lines for a cluster in `directory`;
    without preload, none that load or set pg_idgen."""
    lines = []
    with open(CONF_FILE) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            if not preload and line.startswith(("shared_preload_libraries", "pg_idgen.")):
                continue
            lines.append(line.replace("@DIR@", directory))
    return lines


# initdb runs once per PostgreSQL and set of initdb arguments: each cluster
# is a copy of that template data directory (cp -a, a fraction of initdb's
# time), made under a lock that every test process of a run shares.
TEMPLATE_ROOT = os.path.join(tempfile.gettempdir(), "pg_idgen-initdb-templates")
INITDB_ARGS = ("-U", "postgres", "--auth=trust", "--no-sync", "-E", "UTF8", "--locale=C.UTF-8")


def _template(pg_bin, initdb_args):
    """The template data directory for `pg_bin` and `initdb_args`, made
    by initdb the first time it is asked for."""
    version = subprocess.run([f"{pg_bin}/pg_config", "--version"], capture_output=True, text=True).stdout
    key = hashlib.sha256(repr((pg_bin, version, INITDB_ARGS, tuple(initdb_args))).encode()).hexdigest()[:16]
    os.makedirs(TEMPLATE_ROOT, exist_ok=True)
    template = os.path.join(TEMPLATE_ROOT, key)
    with open(template + ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.exists(os.path.join(template, "done")):
            shutil.rmtree(template, ignore_errors=True)
            os.makedirs(template)
            shutil.chown(template, "postgres", "postgres")
            _as_postgres(f"{pg_bin}/initdb", "-D", os.path.join(template, "data"), *INITDB_ARGS, *initdb_args)
            open(os.path.join(template, "done"), "w").close()
    return os.path.join(template, "data")


def _crc32c_table():
    table = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def _crc32c_prefixes(data, limit):
    """CRC-32C (Castagnoli, as PostgreSQL checksums its control file) of
    every prefix of `data` up to `limit` bytes: (length, crc) pairs."""
    crc = 0xFFFFFFFF
    for length, byte in enumerate(data[:limit], 1):
        crc = _CRC32C[(crc ^ byte) & 0xFF] ^ (crc >> 8)
        yield length, crc ^ 0xFFFFFFFF


def _new_system_identifier(data_dir):
    """Gives a copy of the template a system identifier of its own, as
    initdb would (time in the high half): every test cluster is a distinct
    system, as tests of several servers (a central server and its shards,
    the fence on the central server's identifier) need. The identifier is
    the control file's first 8 bytes; its CRC-32C follows the struct, at an
    offset found by matching it (it differs between versions)."""
    path = os.path.join(data_dir, "global", "pg_control")
    with open(path, "rb") as f:
        control = bytearray(f.read())
    end = next((length for length, crc in _crc32c_prefixes(control, 1024)
                if length >= 16 and crc == int.from_bytes(control[length:length + 4], "little")), None)
    assert end, f"no CRC found in {path}"
    identifier = (int(time.time()) << 32) | int.from_bytes(os.urandom(4), "little")
    control[0:8] = identifier.to_bytes(8, "little")
    *_, (_, crc) = _crc32c_prefixes(control, end)
    control[end:end + 4] = crc.to_bytes(4, "little")
    with open(path, "wb") as f:
        f.write(control)


class Cluster:
    def __init__(self, conf=(), preload=True, name="pg_idgen-it.", pg_bin=None, initdb_args=(),
                 tcp_port=None):
        # Another PostgreSQL's binaries than PG_BIN (pg_upgrade's old side).
        self.pg_bin = pg_bin or PG_BIN
        # With tcp_port, it also listens on 127.0.0.1 (never elsewhere).
        self.port = tcp_port or 5432
        self.dir = tempfile.mkdtemp(prefix=name)
        shutil.chown(self.dir, "postgres", "postgres")
        self.data = os.path.join(self.dir, "data")
        self.env = None
        subprocess.run(["cp", "-a", _template(self.pg_bin, initdb_args), self.data], check=True)
        _new_system_identifier(self.data)
        # WAL made anew from the control file, so its pages carry the new
        # identifier too (PostgreSQL refuses WAL of another system).
        _as_postgres(f"{self.pg_bin}/pg_resetwal", "-f", self.data)
        tcp = (f"listen_addresses = '127.0.0.1'", f"port = {tcp_port}") if tcp_port else ()
        self.append_conf(*base_conf(self.dir, preload), *tcp, *conf)

    def append_conf(self, *lines):
        with open(os.path.join(self.data, "postgresql.conf"), "a") as f:
            f.write("\n".join(lines) + "\n")

    @property
    def log_path(self):
        return os.path.join(self.dir, "server.log")

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def start(self, extra_env=None):
        env = {k: v for k, v in os.environ.items() if not k.startswith("RUST_")}
        env.update(_own_libpq(self.pg_bin))
        env.update(extra_env or {})
        _as_postgres(
            f"{self.pg_bin}/pg_ctl", "-D", self.data, "-l", self.log_path, "-w", "-t", "60", "start",
            env=env,
        )

    def stop(self, mode="fast"):
        _as_postgres(f"{self.pg_bin}/pg_ctl", "-D", self.data, "-m", mode, "-w", "-t", "60", "stop",
                     check=False)

    def restart(self, mode="fast", extra_env=None):
        self.stop(mode)
        self.start(extra_env)

    def connect(self, dbname="postgres", autocommit=True, **kwargs):
        return psycopg.connect(host=self.dir, port=self.port, user="postgres", dbname=dbname,
                               autocommit=autocommit, **kwargs)

    def sql(self, query, params=None, dbname="postgres"):
        """Runs one statement on a fresh connection and returns its rows."""
        with self.connect(dbname) as conn:
            cur = conn.execute(query, params)
            return cur.fetchall() if cur.description else []

    def new_database(self, extension=True):
        name = f"idgen_{next(_names)}"
        self.sql(f"CREATE DATABASE {name}")
        if extension:
            self.sql("CREATE EXTENSION pg_idgen", dbname=name)
        return name

    def client(self, *args, check=True):
        """Runs a client program (pg_dump, psql, pg_basebackup) against it."""
        return subprocess.run([f"{self.pg_bin}/{args[0]}", "-h", self.dir, "-p", str(self.port), "-U", "postgres",
                               *args[1:]],
                              check=check, capture_output=True, text=True)

    def destroy(self):
        self.stop("immediate")
        shutil.rmtree(self.dir, ignore_errors=True)
