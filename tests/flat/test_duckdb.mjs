// Runs the DuckDB query of docs/dump-format.md ("Flat tables without precprobe") as the
// page shows it, with @duckdb/node-api, on a format_version 2 dump with NaN and +-Inf, and
// checks its table against `precprobe export --format jsonl` (precprobe's own reader).
//
// usage: node test_duckdb.mjs DUMP_FORMAT_MD DUMP_DIR PRECPROBE_CLI
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import path from 'node:path';

let duckdb;
try {
  duckdb = await import('@duckdb/node-api');
} catch (e) {
  console.error('flat.duckdb needs @duckdb/node-api: run `npm ci` in tests/flat ' +
                `(the flat.npm_ci test does): ${e.message}`);
  process.exit(1);
}

const [doc, dump, cli] = process.argv.slice(2);
let failures = 0;
function check(cond, what) {
  if (!cond) {
    ++failures;
    console.log('FAILED:', what);
  }
}

const text = readFileSync(doc, 'utf8');
const m = /<!-- tested: tests\/flat\/test_duckdb.mjs -->\s*```sql\n([\s\S]*?)```/.exec(text);
if (!m) {
  console.error(`${doc}: no sql block after <!-- tested: tests/flat/test_duckdb.mjs -->`);
  process.exit(1);
}
const rank0 = path.join(dump, 'rank0');
const quote = (p) => p.replaceAll("'", "''");
const sql = m[1].replaceAll("'dump/rank0/ops.jsonl.zst'", `'${quote(path.join(rank0, 'ops.jsonl.zst'))}'`);
check(sql !== m[1], 'the query reads dump/rank0/ops.jsonl.zst');

const db = await duckdb.DuckDBInstance.create(':memory:');
const con = await db.connect();
await con.run(`CREATE VIEW tensors AS ${sql}`);
const t = await con.runAndReadAll(
    'SELECT * FROM tensors ORDER BY step, op, call, dir, io, "index"');
const names = t.columnNames();
const types = Object.fromEntries(names.map((n, i) => [n, String(t.columnTypes()[i])]));
check(JSON.stringify(names) === JSON.stringify(
          ['step', 'op', 'call', 'dir', 'io', 'index', 'dtype', 'numel', 'nan', 'pinf', 'ninf',
           'zero', 'neg', 'pos', 'min', 'max', 'mean', 'norm', 'param']),
      `columns: ${names}`);
for (const c of ['min', 'max', 'mean', 'norm'])
  check(types[c] === 'DOUBLE', `${c} is DOUBLE, not ${types[c]}`);
for (const c of ['step', 'call', 'numel', 'nan', 'pinf', 'ninf', 'zero', 'neg', 'pos'])
  check(types[c] === 'BIGINT', `${c} is BIGINT, not ${types[c]}`);
const rows = t.getRowObjectsJson();  // BIGINT as strings, DOUBLE as numbers, NULL as null

// precprobe's reader: the export's tensor rows of rank 0, in the same order.
const exported = execFileSync(cli, ['export', dump, '--format', 'jsonl'],
                              { encoding: 'utf8', maxBuffer: 1 << 30 })
    .split('\n').filter((l) => l).map((l) => JSON.parse(l))
    .filter((r) => r.rank === 0 && r.dtype);
const key = (r) => [r.step, r.op, r.call, r.dir, r.io, r.index];
const cmp = (a, b) => {
  const x = key(a), y = key(b);
  for (let i = 0; i < x.length; ++i) {
    if (x[i] < y[i]) return -1;
    if (x[i] > y[i]) return 1;
  }
  return 0;
};
const step = (v) => (typeof v === 'string' && /^-?\d+$/.test(v) ? Number(v) : v);
const duck = rows.map((r) => Object.fromEntries(Object.entries(r).map(([k, v]) => [k, step(v)])));
duck.sort(cmp);
exported.sort(cmp);
check(duck.length === exported.length,
      `${duck.length} tensor rows, precprobe export has ${exported.length}`);
let mismatches = 0;
for (let i = 0; i < Math.min(duck.length, exported.length); ++i) {
  for (const c of names) {
    if (duck[i][c] !== exported[i][c]) {
      if (++mismatches < 10)
        console.log(`row ${i} (${key(exported[i])}): ${c} duckdb ${duck[i][c]} export ${exported[i][c]}`);
    }
  }
}
check(mismatches === 0, `${mismatches} cells differ from precprobe export`);

const agg = (await con.runAndReadAll(
    'SELECT max(max) AS mx, count(*) FILTER (WHERE max IS NULL) AS undefined_max, ' +
    'sum(nan) AS nans FROM tensors')).getRowObjectsJson()[0];
const finite = exported.map((r) => r.max).filter((v) => v !== null);
check(agg.mx === Math.max(...finite), `max over max: duckdb ${agg.mx}, precprobe ${Math.max(...finite)}`);
check(agg.mx === 1.7e308, `the extra record's max 1.7e308 is the largest, got ${agg.mx}`);
check(Number(agg.undefined_max) > 100, `undefined statistics are NULL: ${agg.undefined_max}`);
check(Number(agg.nans) > 100, `the dump has NaN elements: ${agg.nans}`);

// The flat streams: inferred DOUBLE, and the named values restore +-Inf / NaN.
const g = await con.runAndReadAll(
    `SELECT typeof(gn) AS t, coalesce(gn, gn_nonfinite::DOUBLE) AS gn,
            coalesce(wn, wn_nonfinite::DOUBLE) AS wn
     FROM read_json('${quote(path.join(rank0, 'grads.jsonl.zst'))}', compression = 'zstd')
     WHERE gn_nonfinite IS NOT NULL`);
const gr = g.getRowObjects();
check(gr.length === 1, `one grad record names its non-finite values, got ${gr.length}`);
if (gr.length === 1) {
  check(gr[0].t === 'DOUBLE', `gn is ${gr[0].t}`);
  check(gr[0].gn === Infinity && gr[0].wn === -Infinity, `gn ${gr[0].gn}, wn ${gr[0].wn}`);
}
const ev = (await con.runAndReadAll(
    `SELECT typeof(value) AS t, count(*) AS n, count(value_nonfinite) AS named
     FROM read_json('${quote(path.join(rank0, 'events.jsonl.zst'))}', compression = 'zstd')
     WHERE name = 'loss' GROUP BY 1`)).getRowObjectsJson();
check(ev.length === 1 && ev[0].t === 'DOUBLE', `loss values are DOUBLE: ${JSON.stringify(ev)}`);
check(ev.length === 1 && Number(ev[0].named) === 2, `two named NaN losses: ${JSON.stringify(ev)}`);

if (failures) {
  console.log(`${failures} check(s) failed`);
  process.exit(1);
}
console.log(`ok: ${duck.length} tensor rows`);
