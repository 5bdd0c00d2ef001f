"""The call-site cache's cost: marginal cost per ID of segment_nextval with a
constant tag (never compared), with a tag read from a column (compared on
every call), the pgrx floor and nextval CACHE 1, interleaved in one run on a
throwaway cluster. Needs pg_idgen and idgen_floor installed (bash
tests/bench.sh does both); run as root:

    .venv/bin/python tests/bench/fast_path.py
"""
import os
import statistics
import sys
import time
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "lib"))
from cluster import Cluster
N, ROUNDS = 5_000_000, 7
c = Cluster(); c.start()
try:
    c.sql("CREATE EXTENSION pg_idgen"); c.sql("CREATE EXTENSION idgen_floor")
    c.sql("SELECT segment_create('t', step => 100000)")
    c.sql("CREATE SEQUENCE s1 CACHE 1")
    c.sql("CREATE TABLE tags AS SELECT 't'::text AS tag, g FROM generate_series(1, %s) g" % N)
    with c.connect() as conn:
        conn.execute("SET max_parallel_workers_per_gather = 0")
        conn.execute("SELECT count(segment_nextval('t')) FROM generate_series(1, 1000000)")
        queries = {
            "bare": f"SELECT count(*) FROM generate_series(1, {N})",
            "const tag": f"SELECT count(segment_nextval('t')) FROM generate_series(1, {N})",
            "floor": f"SELECT count(idgen_floor()) FROM generate_series(1, {N})",
            "nextval CACHE 1": f"SELECT count(nextval('s1')) FROM generate_series(1, {N})",
            "bare (table)": "SELECT count(tag) FROM tags",
            "tag from a column": "SELECT count(segment_nextval(tag)) FROM tags",
        }
        times = {k: [] for k in queries}
        for _ in range(ROUNDS):
            for k, q in queries.items():
                t = time.perf_counter(); conn.execute(q).fetchall(); times[k].append(time.perf_counter() - t)
    med = {k: statistics.median(v) for k, v in times.items()}
    ns = lambda k, base: (med[k] - med[base]) / N * 1e9
    for k, base in [("const tag", "bare"), ("floor", "bare"), ("nextval CACHE 1", "bare"), ("tag from a column", "bare (table)")]:
        print(f"{k:20s} {ns(k, base):7.1f} ns/ID over the bare query (median of {ROUNDS})")
    print(f"bare query {med['bare']/N*1e9:.0f} ns/row")
finally:
    c.destroy()
