"""redis-py scenario for test/clients: pipelines, MULTI/EXEC with WATCH,
pub/sub, Lua, errors, hot reads.

Usage: python3 redis_py_scenario.py host:port backdoor-host:port. Prints one
JSON line per step; the Go test runs it against Redis directly and through
Cicada and compares the transcripts.
"""
import json
import sys

import redis


def client(addr):
    host, port = addr.rsplit(":", 1)
    return redis.Redis(host=host, port=int(port), decode_responses=True)


def out(step, value):
    print(json.dumps([step, value]), flush=True)


def settle(fn):
    try:
        return ["ok", fn()]
    except redis.RedisError as e:
        return ["err", type(e).__name__, str(e)]


def main():
    r, back = client(sys.argv[1]), client(sys.argv[2])
    out("set", r.set("py:hot", "v1"))
    out("hot reads", sorted({r.get("py:hot") for _ in range(200)}))
    out("hset", r.hset("py:h", mapping={"f1": "a", "f2": "b"}))
    out("hot hget", sorted({r.hget("py:h", "f1") for _ in range(200)}))

    p = r.pipeline(transaction=False)
    for _ in range(50):
        p.get("py:hot")
    p.set("py:hot", "v2").get("py:hot").incr("py:n").hgetall("py:h").get("py:missing")
    out("pipeline", p.execute())

    p = r.pipeline(transaction=True)
    p.set("py:a", "1").incr("py:a").get("py:a").get("py:hot")
    out("multi", p.execute())

    with r.pipeline() as p:
        p.watch("py:w")
        back.set("py:w", "changed")
        p.multi()
        p.set("py:w", "mine")
        out("watch aborted", settle(p.execute))
    out("watch value", r.get("py:w"))

    out("eval", r.eval("redis.call('SET', KEYS[1], ARGV[1]); return redis.call('GET', KEYS[1])", 1, "py:hot", "lua"))
    out("reads after eval", sorted({r.get("py:hot") for _ in range(50)}))

    out("wrongtype", settle(lambda: r.hget("py:hot", "f")))
    out("not an integer", settle(lambda: r.incr("py:hot")))
    out("unknown command", settle(lambda: r.execute_command("NOSUCHCOMMAND", "x")))

    ps = r.pubsub()
    ps.subscribe("py:ch")
    out("subscribed", ps.get_message(timeout=5))
    out("publish", back.publish("py:ch", "hello"))
    out("message", ps.get_message(timeout=5))
    ps.unsubscribe("py:ch")
    out("unsubscribed", ps.get_message(timeout=5))
    ps.close()

    out("del", r.delete("py:hot", "py:h", "py:a", "py:n", "py:w"))
    out("get deleted", r.get("py:hot"))


if __name__ == "__main__":
    main()
