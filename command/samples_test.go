package command

import "strings"

// writeSamples holds at least one realistic invocation of every command or
// subcommand that has the write flag or Effect EffectKeys. TestWriteSamples
// checks each against COMMAND GETKEYS on a live server and fails for a write
// command without a sample, so a table regenerated from a newer server fails
// until someone adds samples here.
//
// Arguments are split on single spaces (see argv); a field of two
// apostrophes is an empty argument, <nil> a nil one.
var writeSamples = []string{
	"APPEND k v",
	"BITFIELD k SET i8 0 1 INCRBY u4 4 1",
	"BITOP AND dst a b",
	"BLMOVE src dst LEFT RIGHT 0",
	"BLMPOP 0 2 l1 l2 LEFT COUNT 2",
	"blmpop 1.5 1 l1 right",
	"BLPOP l1 l2 0",
	"BRPOP l1 l2 0",
	"BRPOPLPUSH src dst 0",
	"BZMPOP 0 2 z1 z2 MIN COUNT 1",
	"BZPOPMAX z1 z2 0",
	"BZPOPMIN z1 z2 0",
	"COPY a b DB 3 REPLACE",
	"COPY a b",
	"copy a b replace db 0",
	"DECR k",
	"DECRBY k 2",
	"DEL a b c",
	"EXPIRE k 10 NX",
	"EXPIREAT k 1700000000",
	"FLUSHALL ASYNC",
	"FLUSHDB",
	"FUNCTION DELETE mylib",
	"FUNCTION FLUSH SYNC",
	"FUNCTION LOAD code",
	"FUNCTION RESTORE payload REPLACE",
	"GEOADD k 13.36 38.11 Palermo",
	"GEORADIUS k 15 37 200 km WITHDIST COUNT 10 ASC STORE d STOREDIST d2",
	"GEORADIUS k 15 37 200 km",
	"georadius k 15 37 200 km count 5 any store d",
	"GEORADIUSBYMEMBER k Palermo 200 km STORE d",
	"GEORADIUSBYMEMBER k Palermo 200 km STOREDIST d WITHHASH",
	"GEOSEARCHSTORE dst src FROMLONLAT 15 37 BYRADIUS 200 km ASC COUNT 3 STOREDIST",
	"GETDEL k",
	"GETEX k EX 10",
	"GETSET k v",
	"HDEL h f1 f2",
	"HINCRBY h f 1",
	"HINCRBYFLOAT h f 1.5",
	"HMSET h f v f2 v2",
	"HSET h f v",
	"HSETNX h f v",
	"INCR k",
	"INCRBY k 5",
	"INCRBYFLOAT k 1.5",
	"LINSERT l BEFORE p v",
	"LMOVE src dst LEFT RIGHT",
	"LMPOP 2 l1 l2 RIGHT COUNT 3",
	"LPOP l 2",
	"LPUSH l a b",
	"LPUSHX l a",
	"LREM l 0 v",
	"LSET l 0 v",
	"LTRIM l 0 10",
	"MIGRATE 127.0.0.1 6380 '' 0 5000 COPY REPLACE KEYS k1 k2",
	"MIGRATE 127.0.0.1 6380 k 0 5000",
	"MOVE k 3",
	"MSET a 1 b 2",
	"MSETNX a 1 b 2",
	"PERSIST k",
	"PEXPIRE k 100",
	"PEXPIREAT k 1700000000000",
	"PFADD hll a b c",
	"PFCOUNT hll",
	"PFCOUNT h1 h2",
	"PFDEBUG GETREG hll",
	"PFMERGE dst s1 s2",
	"PSETEX k 1000 v",
	"RENAME a b",
	"RENAMENX a b",
	"RESTORE k 0 payload REPLACE ABSTTL",
	"RESTORE-ASKING k 0 payload",
	"RPOP l",
	"RPOPLPUSH src dst",
	"RPUSH l a b",
	"RPUSHX l a",
	"SADD s a b",
	"SDIFFSTORE dst a b",
	"SET k v EX 10",
	"SETBIT k 7 1",
	"SETEX k 10 v",
	"SETNX k v",
	"SETRANGE k 0 v",
	"SINTERSTORE dst a b",
	"SMOVE src dst m",
	"SORT k BY w_* LIMIT 0 10 GET # GET o_* DESC ALPHA STORE dst",
	"SORT k",
	"sort k get # store d1 store d2",
	"SPOP s 2",
	"SREM s a",
	"SUNIONSTORE dst a b",
	"SWAPDB 0 1",
	"UNLINK a b",
	"XACK s g 1-0 2-0",
	"XADD s MAXLEN ~ 1000 * f v",
	"XAUTOCLAIM s g c 3600 0-0 COUNT 10",
	"XCLAIM s g c 3600 1-0 2-0 FORCE",
	"XDEL s 1-0",
	"XGROUP CREATE s g $ MKSTREAM",
	"XGROUP CREATECONSUMER s g c",
	"XGROUP DELCONSUMER s g c",
	"XGROUP DESTROY s g",
	"XGROUP SETID s g 0 ENTRIESREAD 0",
	"XREADGROUP GROUP g c COUNT 1 STREAMS s1 s2 > >",
	"xreadgroup group streams count block 100 noack streams s >",
	"XSETID s 1-0",
	"XTRIM s MAXLEN 100",
	"ZADD z NX 1 a 2 b",
	"ZDIFFSTORE d 2 a b",
	"ZINCRBY z 1 m",
	"ZINTERSTORE d 2 a b WEIGHTS 1 2 AGGREGATE MAX",
	"ZMPOP 2 z1 z2 MIN COUNT 2",
	"ZPOPMAX z 2",
	"ZPOPMIN z",
	"ZRANGESTORE dst src 0 -1",
	"ZREM z a b",
	"ZREMRANGEBYLEX z [a [z",
	"ZREMRANGEBYRANK z 0 1",
	"ZREMRANGEBYSCORE z 0 10",
	"ZUNIONSTORE d 2 a b WEIGHTS 1 2",
}

// argv splits s on single spaces into command arguments. A field of two
// apostrophes is an empty (non-nil) argument and <nil> a nil one (an
// argument the caller did not capture).
func argv(s string) [][]byte {
	fields := strings.Split(s, " ")
	out := make([][]byte, len(fields))
	for i, f := range fields {
		switch f {
		case "<nil>":
			out[i] = nil
		case "''":
			out[i] = []byte{}
		default:
			out[i] = []byte(f)
		}
	}
	return out
}
