// node-redis scenario for test/clients: RESP3 with client-side caching
// (CLIENT TRACKING through Cicada), pipelines, MULTI/EXEC, pub/sub, errors.
// Usage: node node_redis_scenario.js host:port backdoor-host:port. Prints
// one JSON line per step; the Go test compares the transcripts of a direct
// run and a run through Cicada.
const { createClient } = require("redis");

async function main() {
  const [addr, backdoorAddr] = process.argv.slice(2);
  const url = (a) => `redis://${a}`;
  const r = createClient({ url: url(addr), RESP: 3, clientSideCache: { ttl: 0, maxEntries: 0 } });
  const plain = createClient({ url: url(addr) });
  const back = createClient({ url: url(backdoorAddr) });
  for (const c of [r, plain, back]) c.on("error", (e) => console.error("client error", e.message));
  await Promise.all([r.connect(), plain.connect(), back.connect()]);
  const out = (step, value) => console.log(JSON.stringify([step, value]));
  const settle = async (fn) => { try { return ["ok", await fn()]; } catch (e) { return ["err", e.message]; } };
  // waitFor polls until the value read is want (client-side caches learn of
  // writes through invalidation pushes, which arrive asynchronously).
  const waitFor = async (fn, want) => {
    for (let i = 0; i < 200; i++) {
      const v = await fn();
      if (v === want) return v;
      await new Promise((res) => setTimeout(res, 10));
    }
    return await fn();
  };

  out("set", await plain.set("nr:hot", "v1"));
  const reads = [];
  for (let i = 0; i < 100; i++) reads.push(await r.get("nr:hot"));
  out("cached reads", [...new Set(reads)]);
  out("client cache hits", r.clientSideCache.stats().hitCount > 0);
  const plainReads = [];
  for (let i = 0; i < 100; i++) plainReads.push(await plain.get("nr:hot"));
  out("hot reads", [...new Set(plainReads)]);

  // A write through another Cicada connection, then one straight to Redis:
  // Redis's invalidation push must reach the caching client through Cicada.
  out("write elsewhere", await plain.set("nr:hot", "v2"));
  out("after write", await waitFor(() => r.get("nr:hot"), "v2"));
  out("write to redis", await back.set("nr:hot", "v3"));
  out("after backdoor write", await waitFor(() => r.get("nr:hot"), "v3"));

  out("hset", await plain.hSet("nr:h", { f1: "a", f2: "b" }));
  const hreads = [];
  for (let i = 0; i < 100; i++) hreads.push(await r.hGet("nr:h", "f1"));
  out("cached hget", [...new Set(hreads)]);
  out("hdel", await plain.hDel("nr:h", "f1"));
  out("after hdel", await waitFor(() => r.hGet("nr:h", "f1"), null));

  const results = await plain.multi().set("nr:a", "1").incr("nr:a").get("nr:a").exec();
  out("multi", results);
  const pipe = plain.multi();
  for (let i = 0; i < 20; i++) pipe.get("nr:hot");
  pipe.incr("nr:n").hGetAll("nr:h");
  out("pipeline", await pipe.execAsPipeline());

  out("wrongtype", await settle(() => plain.hGet("nr:hot", "f")));
  out("resp3 hgetall", await r.hGetAll("nr:h"));

  const sub = plain.duplicate();
  await sub.connect();
  const got = new Promise((resolve) => sub.subscribe("nr:ch", (msg, ch) => resolve([ch, msg])));
  await new Promise((res) => setTimeout(res, 50));
  out("publish", await back.publish("nr:ch", "hi"));
  out("message", await got);
  await sub.unsubscribe("nr:ch");

  out("del", await plain.del(["nr:hot", "nr:h", "nr:a", "nr:n"]));
  out("after del", await waitFor(() => r.get("nr:hot"), null));
  await Promise.all([r.quit(), plain.quit(), back.quit(), sub.quit()]);
}

main().catch((e) => { console.error(e); process.exit(1); });
