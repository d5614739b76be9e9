// ioredis scenario for test/clients: pipelines, MULTI/EXEC with WATCH, Lua,
// pub/sub, errors, hot reads. Usage: node ioredis_scenario.js host:port
// backdoor-host:port. Prints one JSON line per step; the Go test runs it
// against Redis directly and through Cicada and compares the transcripts.
const Redis = require("ioredis");

function client(addr) {
  const [host, port] = addr.split(":");
  return new Redis({ host, port: Number(port), lazyConnect: true, maxRetriesPerRequest: 0, enableOfflineQueue: true });
}

async function main() {
  const [addr, backdoorAddr] = process.argv.slice(2);
  const r = client(addr), other = client(addr), back = client(backdoorAddr), sub = client(addr);
  await Promise.all([r.connect(), other.connect(), back.connect(), sub.connect()]);
  const out = (step, value) => console.log(JSON.stringify([step, value]));
  const settle = async (fn) => { try { return ["ok", await fn()]; } catch (e) { return ["err", e.message]; } };

  out("set", await r.set("io:hot", "v1"));
  const reads = [];
  for (let i = 0; i < 200; i++) reads.push(await r.get("io:hot"));
  out("hot reads", [...new Set(reads)]);
  out("hset", await r.hset("io:h", "f1", "a", "f2", "b"));
  const hreads = [];
  for (let i = 0; i < 200; i++) hreads.push(await r.hget("io:h", "f1"));
  out("hot hget", [...new Set(hreads)]);

  const pipe = r.pipeline();
  for (let i = 0; i < 50; i++) pipe.get("io:hot");
  pipe.set("io:hot", "v2").get("io:hot").incr("io:n").hgetall("io:h").get("io:missing").incr("io:hot");
  out("pipeline", (await pipe.exec()).map(([e, v]) => (e ? ["err", e.message] : ["ok", v])));

  out("multi", await r.multi().set("io:a", "1").incr("io:a").get("io:a").get("io:hot").exec());
  await r.watch("io:w");
  await back.set("io:w", "changed");
  out("watch aborted", await r.multi().set("io:w", "mine").exec());
  out("watch value", await r.get("io:w"));

  out("eval", await r.eval("redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])", 1, "io:hot", "from-lua"));
  const after = [];
  for (let i = 0; i < 50; i++) after.push(await r.get("io:hot"));
  out("reads after eval", [...new Set(after)]);

  out("wrongtype", await settle(() => r.hget("io:hot", "f")));
  out("not an integer", await settle(() => r.incr("io:hot")));
  out("unknown command", await settle(() => r.call("NOSUCHCOMMAND", "x")));

  await sub.subscribe("io:ch");
  const got = new Promise((resolve) => sub.once("message", (ch, msg) => resolve([ch, msg])));
  out("publish", await other.publish("io:ch", "hello"));
  out("message", await got);
  await sub.unsubscribe("io:ch");

  out("del", await r.del("io:hot", "io:h", "io:a", "io:n", "io:w"));
  out("get deleted", await r.get("io:hot"));
  await Promise.all([r.quit(), other.quit(), back.quit(), sub.quit()]);
}

main().catch((e) => { console.error(e); process.exit(1); });
