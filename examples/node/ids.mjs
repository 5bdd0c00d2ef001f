// pg_idgen's IDs in node-postgres (docs/examples.md#javascript-node-postgres):
// each point of that section, run against a server and checked. Exits
// non-zero (an AssertionError) on a wrong result.
//
//   cd examples/node && npm ci
//   PGHOST=/tmp/pg_idgen-demo PGUSER=postgres PGDATABASE=postgres node ids.mjs
//
// The connection comes from libpq's variables (PGHOST, PGPORT, PGDATABASE,
// PGUSER, PGPASSWORD). The database needs the extension, the server a
// pg_idgen.machine_id from 0 to 15 (snowflake_js_nextval's 4 bits), and a
// role other than a superuser
// GRANT EXECUTE ON FUNCTION snowflake_nextval(), snowflake_js_nextval().
import assert from 'node:assert/strict'
import pg from 'pg'

// A snowflake ID of the default layout (41-bit ms since pg_idgen.snowflake_epoch,
// 10-bit machine id, 12-bit sequence), made from its friendly form so that
// it is the same on every run: 2026-06-15 09:30:00.000 UTC, machine 1, sequence 201.
const FRIENDLY = '20260615093000000-1-201'
const ID = '192209013964804297'

const say = (text) => console.log(text)
const client = new pg.Client()
await client.connect()

// 1. A bigint arrives as a string: node-postgres's default, exact.
{
  const { rows: [row] } = await client.query(
    'SELECT snowflake_from_format($1) AS id, snowflake_nextval() AS fresh', [FRIENDLY])
  assert.equal(typeof row.id, 'string')
  assert.equal(row.id, ID)
  assert.equal(typeof row.fresh, 'string')
  assert.match(row.fresh, /^[1-9][0-9]*$/)
  say(`1. bigint arrives as a string: ${JSON.stringify(row.id)} (and a fresh one, ${JSON.stringify(row.fresh)})`)
}

// 2. The common parseInt type parser loses precision, silently: above 2^53
//    a Number holds only every 2nd, 4th, ... 32nd integer. Here on one
//    client (types:); pg.types.setTypeParser(20, parseInt) does the same
//    for every client of the process.
{
  const lossy = new pg.Client({
    types: { getTypeParser: (oid, format) => (oid === 20 ? parseInt : pg.types.getTypeParser(oid, format)) },
  })
  await lossy.connect()
  const { rows: [row] } = await lossy.query('SELECT $1::bigint AS id, $1::bigint - 1 AS previous', [ID])
  assert.equal(typeof row.id, 'number')
  assert.equal(Number.isSafeInteger(row.id), false)
  assert.equal(String(row.id), '192209013964804300')
  assert.notEqual(String(row.id), ID)
  // Two IDs, one number: a Map keyed by them keeps one entry.
  assert.equal(row.id, row.previous)
  // Sent back, it names another ID (another row, perhaps someone else's).
  const { rows: [back] } = await lossy.query('SELECT $1::bigint = $2::bigint AS same', [row.id, ID])
  assert.equal(back.same, false)
  await lossy.end()
  say(`2. parseInt reads ${ID} as ${row.id}, and ${BigInt(ID) - 1n} as the same number`)
}

// 3. JSON: node-postgres parses json and jsonb with JSON.parse, so a bigint
//    inside a JSON value is a Number, with no type parser involved. Put
//    IDs into JSON as text.
{
  const { rows: [row] } = await client.query(
    "SELECT json_build_object('id', $1::bigint) AS lossy, json_build_object('id', $1::bigint::text) AS exact", [ID])
  assert.equal(typeof row.lossy.id, 'number')
  assert.equal(String(row.lossy.id), '192209013964804300')
  assert.equal(row.exact.id, ID)
  // The same in any JSON a browser or another service parses.
  assert.equal(String(JSON.parse(`{"id": ${ID}}`).id), '192209013964804300')
  say(`3. json_build_object('id', id) arrives as ${row.lossy.id}; with id::text as ${JSON.stringify(row.exact.id)}`)
}

// 4. Exact numbers: BigInt. From here on every bigint of every client of
//    this process is a BigInt. JSON.stringify refuses BigInts (a TypeError)
//    unless told how to write them; a BigInt parameter is sent exactly.
//    bigint[] (OID 1016) has its own parser and keeps strings.
{
  pg.types.setTypeParser(20, BigInt)
  const { rows: [row] } = await client.query('SELECT $1::bigint AS id, ARRAY[$1::bigint] AS ids', [ID])
  assert.equal(typeof row.id, 'bigint')
  assert.equal(row.id, BigInt(ID))
  assert.equal(row.id.toString(), ID)
  assert.deepEqual(row.ids, [ID])
  assert.throws(() => JSON.stringify(row), TypeError)
  const json = JSON.stringify(row, (key, value) => (typeof value === 'bigint' ? value.toString() : value))
  assert.equal(JSON.parse(json).id, ID)
  const { rows: [back] } = await client.query('SELECT $1::bigint = snowflake_from_format($2) AS same', [row.id, FRIENDLY])
  assert.equal(back.same, true)
  say(`4. with setTypeParser(20, BigInt): ${row.id}n; JSON.stringify needs a replacer: ${json}`)
}

// 5. snowflake_js_nextval(): IDs below 2^53, exact as Numbers. Its layout:
//    41-bit ms | 4-bit machine id | 8-bit sequence, so 2^8 = 256 IDs per
//    millisecond for the whole server (one generator per server; its
//    machine id is the server's, 0-15). A burst above that runs ahead of
//    the clock (within pg_idgen.snowflake_max_lead); a sustained rate above
//    256,000 IDs/s is slowed to it.
{
  const n = 2000
  const { rows } = await client.query('SELECT snowflake_js_nextval() AS id FROM generate_series(1, $1)', [n])
  const ids = rows.map((row) => Number(row.id))
  assert.equal(ids.length, n)
  for (const [i, id] of ids.entries()) {
    assert.ok(Number.isSafeInteger(id) && id < 2 ** 53, `${id} is not below 2^53`)
    assert.equal(BigInt(id), rows[i].id, 'a JavaScript-safe ID changed as a Number')
    if (i > 0) assert.ok(id > ids[i - 1], 'not strictly increasing')
  }
  // Taken apart in JavaScript, with Number arithmetic (exact below 2^53).
  const parts = (id) => ({ ms: Math.floor(id / 2 ** 12), machine: Math.floor(id / 2 ** 8) % 16, sequence: id % 2 ** 8 })
  const perMs = new Map()
  const { rows: [setting] } = await client.query("SELECT current_setting('pg_idgen.machine_id') AS machine_id")
  for (const id of ids) {
    const { ms, machine, sequence } = parts(id)
    assert.equal(machine, Number(setting.machine_id))
    assert.ok(sequence < 256)
    perMs.set(ms, (perMs.get(ms) ?? 0) + 1)
  }
  const busiest = Math.max(...perMs.values())
  assert.ok(busiest <= 256, `${busiest} IDs in one millisecond`)
  assert.ok(perMs.size >= Math.ceil(n / 256))
  // The server agrees: snowflake_js_parse, and the epoch the ms count from.
  const last = ids[ids.length - 1]
  const { rows: [server] } = await client.query(
    `SELECT (extract(epoch FROM p.ts) * 1000)::bigint AS unix_ms, p.machine_id, p.sequence,
            (extract(epoch FROM current_setting('pg_idgen.snowflake_epoch')::timestamptz) * 1000)::bigint AS epoch_ms
       FROM snowflake_js_parse($1) p`, [last])
  assert.equal(BigInt(parts(last).ms) + server.epoch_ms, server.unix_ms)
  assert.equal(BigInt(parts(last).machine), server.machine_id)
  assert.equal(BigInt(parts(last).sequence), server.sequence)
  say(`5. snowflake_js_nextval(): ${n} IDs, all safe integers, e.g. ${last}; at most ${busiest} in one ms (the layout allows 256)`)
}

// 6. snowflake_format: the friendly text of a default-layout ID, for logs,
//    URLs and people; its time is readable in JavaScript with no 64-bit
//    arithmetic, and snowflake_from_format turns it back into the ID.
{
  const { rows: [fixed] } = await client.query('SELECT snowflake_format($1::bigint) AS friendly', [ID])
  assert.equal(fixed.friendly, FRIENDLY)
  const { rows: [row] } = await client.query(
    `SELECT id::text AS id, snowflake_format(id) AS friendly,
            (extract(epoch FROM snowflake_timestamp(id)) * 1000)::bigint AS unix_ms
       FROM (SELECT snowflake_nextval() AS id) s`)
  const m = row.friendly.match(/^(\d{4})(\d{2})(\d{2})(\d{2})(\d{2})(\d{2})(\d{3})-(\d+)-(\d+)$/)
  assert.ok(m, `${row.friendly} is not yyyyMMddHHmmssSSS-machine-sequence`)
  const [y, mo, d, h, mi, s, ms] = m.slice(1, 8).map(Number)
  assert.equal(BigInt(Date.UTC(y, mo - 1, d, h, mi, s, ms)), row.unix_ms)
  const { rows: [back] } = await client.query('SELECT snowflake_from_format($1)::text AS id', [row.friendly])
  assert.equal(back.id, row.id)
  say(`6. snowflake_format(${row.id}) = ${row.friendly}, at ${new Date(Number(row.unix_ms)).toISOString()}`)
}

await client.end()
say('all checks passed')
