"""Throwaway PostgreSQL clusters, shared by the integration tests and the
benchmark. Each cluster runs as the `postgres` user in its own temporary
directory, listens only on a Unix socket there, and preloads pg_idgen
(unless asked otherwise). Its settings come from cluster.conf, which
cluster.sh (the shell scripts' clusters) reads too."""

import itertools
import os
import shutil
import subprocess
import tempfile

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
        _as_postgres(
            f"{self.pg_bin}/initdb", "-D", self.data, "-U", "postgres", "--auth=trust",
            "--no-sync", "-E", "UTF8", "--locale=C.UTF-8", *initdb_args,
        )
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
