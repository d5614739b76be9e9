package difftest

import (
	"math/rand/v2"
	"strconv"
	"strings"
)

// Setup is the data and server state a generated conversation starts from:
// Prepare loads it on both sides before each conversation.
var Setup = [][]string{
	{"FLUSHALL"},
	{"SET", "a", "1"},
	{"SET", "b", "hello"},
	{"HSET", "h", "f", "v", "g", "7"},
	{"RPUSH", "l", "3", "1", "2"},
	{"SADD", "s", "1", "2", "3"},
	{"ZADD", "z", "1", "one", "2", "two"},
	{"SELECT", "1"},
	{"SET", "a", "db1"},
}

// Once is the server state generated conversations rely on, loaded once per
// server: ACL users with key patterns and a function library.
var Once = [][]string{
	{"ACL", "SETUSER", "reader", "on", ">rpw", "~a", "~b", "~h", "&*", "+@all", "-@write", "-@dangerous"},
	{"ACL", "SETUSER", "writer", "on", ">wpw", "~*", "&*", "+@all"},
	{"FUNCTION", "LOAD", "REPLACE", FunctionLibrary},
}

// FunctionLibrary is a Redis 7 function library: FCALL cset 0 key value
// SETs a key it does not declare; FCALL_RO cget 1 key GETs it.
const FunctionLibrary = "#!lua name=cicadalib\n" +
	"redis.register_function('cset', function(keys, args) return redis.call('SET', args[1], args[2]) end)\n" +
	"redis.register_function{function_name='cget', callback=function(keys, args) return redis.call('GET', keys[1]) end, flags={'no-writes'}}\n"

// Generator draws random conversations from a grammar of real commands over
// a small key space (a, b, c, n, h, l, s, z in dbs 0 and 1), so that keys
// become hot and cached within a conversation. Each connection's state
// (protocol, transaction, subscriptions, CLIENT REPLY mode) is modelled so
// that every command's reply count is known. The same seed always gives
// the same conversations. A Generator is not safe for concurrent use.
//
// Opaque adds what makes Cicada stop answering from its cache for a second
// (CLIENT REPLY OFF|SKIP, REPLCONF ACK|GETACK, protocol errors: Cicada
// cannot see when the writes before them complete): run such conversations
// on a pair of their own, or the cache would rarely answer in the others.
type Generator struct {
	r      *rand.Rand
	Opaque bool
}

// NewGenerator returns a generator seeded with seed.
func NewGenerator(seed uint64) *Generator {
	return &Generator{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))}
}

// clientState is the generator's model of one connection.
type clientState struct {
	resp3, multi, subscribed, tracking bool
	replyOff, skipNext, closed         bool
	user                               string // ACL user, "" for default
}

// Conversation returns the next random conversation: 3 connections and
// 5 to 40 steps of 1 to 3 pipelined commands.
func (g *Generator) Conversation() Conversation {
	const clients = 3
	st := make([]clientState, clients)
	conv := Conversation{Quiet: 10e6}
	n := 5 + g.r.IntN(36)
	for open := clients; len(conv.Steps) < n && open > 0; {
		c := g.r.IntN(clients)
		s := &st[c]
		if s.closed {
			continue
		}
		if g.Opaque && g.r.IntN(20) == 0 {
			conv.Steps = append(conv.Steps, Step{Client: c, Raw: []byte(g.pick(protocolErrors...)), Closes: true})
			s.closed = true
			open--
			continue
		}
		step := Step{Client: c}
		if !s.multi && !s.replyOff && !s.skipNext && g.r.IntN(4) == 0 {
			// A burst: the same read repeated, each after the reply to
			// the one before, so that what the first fills the others
			// read from the cache; the last is pipelined with another.
			read := g.read()
			for k := 1 + g.r.IntN(3); k > 0; k-- {
				conv.Steps = append(conv.Steps, Step{Client: c, Cmds: []Cmd{{Args: read, Replies: s.apply(read)}}})
			}
			step.Cmds = append(step.Cmds, Cmd{Args: read, Replies: s.apply(read)}, g.command(s))
		} else {
			for k := 1 + g.r.IntN(3); k > 0; k-- {
				step.Cmds = append(step.Cmds, g.command(s))
			}
		}
		// A step ends with a command that gets a reply, so that waiting
		// for it orders the step before the next one on any connection.
		for step.Cmds[len(step.Cmds)-1].Replies == 0 {
			end := []string{"PING"}
			if s.replyOff {
				end = []string{"CLIENT", "REPLY", "ON"}
			}
			step.Cmds = append(step.Cmds, Cmd{Args: end, Replies: s.apply(end)})
		}
		conv.Steps = append(conv.Steps, step)
	}
	return conv
}

// protocolErrors are requests Redis answers with -ERR Protocol error and a
// close, after the replies to the complete requests before them.
var protocolErrors = []string{
	"*1\r\n$-5\r\n", "*x\r\n", "*1\r\nx4\r\n", "GET \"a\r\n", "*1\r\n$536870913\r\n",
	"*2\r\n$3\r\nGET\r\n$1\r\naXX*1\r\n$4\r\nPING\r\n*x\r\n", "*-1\r\n*0\r\n*1\r\n$4\r\nPING\r\n*1\r\n$x\r\n",
	"*2147483648\r\n", "*1\r\n$" + strings.Repeat("9", 25) + "\r\n", "SET \"a\"b c\r\n",
}

func (g *Generator) pick(s ...string) string { return s[g.r.IntN(len(s))] }

// value returns a value to write: small, binary, numeric, or larger than
// Cicada's default 64 KiB cache limit.
func (g *Generator) value() string {
	switch g.r.IntN(12) {
	case 0:
		return ""
	case 1:
		return "\x00\r\n$-1\r\nbin\xff"
	case 2:
		return strings.Repeat("x", 70000)
	case 3:
		return strings.Repeat("y", 1000)
	case 4, 5:
		return strconv.Itoa(g.r.IntN(200) - 50)
	case 6:
		return "2.5"
	default:
		return "v" + strconv.Itoa(g.r.IntN(100))
	}
}

func (g *Generator) key() string   { return g.pick("a", "a", "b", "c", "n", "h", "l", "x") }
func (g *Generator) skey() string  { return g.pick("a", "a", "b", "b", "c", "n", "x") }
func (g *Generator) field() string { return g.pick("f", "f", "g", "m") }

// read returns a read command: mostly GET and HGET, the commands Cicada
// answers from its cache.
func (g *Generator) read() []string {
	switch g.r.IntN(24) {
	case 0:
		return []string{"MGET", g.skey(), g.skey()}
	case 1:
		return []string{"EXISTS", g.key(), g.key()}
	case 2:
		return []string{g.pick("STRLEN", "TYPE"), g.key()}
	case 3:
		return []string{g.pick("HGETALL", "HLEN"), "h"}
	case 4:
		return []string{"LRANGE", "l", "0", "-1"}
	case 5:
		return []string{g.pick("SMEMBERS", "ZRANGE"), g.pick("s", "z"), "0", "-1"}[:g.r.IntN(3)+2]
	case 6:
		return []string{"GETRANGE", g.skey(), "0", "2"}
	case 7:
		return []string{"EVAL", "return redis.call('GET', KEYS[1])", "1", g.skey()}
	case 8:
		return []string{"FCALL_RO", "cget", "1", g.skey()}
	case 9, 10, 11, 12, 13:
		return []string{"HGET", g.pick("h", "h", "h", "a", "x"), g.field()}
	default:
		return []string{"GET", g.pick("a", "a", "b", "b", "c", "n", "x", "h")}
	}
}

// write returns a write command of one of the kinds that must invalidate.
func (g *Generator) write() []string {
	k, v := g.skey(), g.value()
	switch g.r.IntN(32) {
	case 0:
		return append([]string{"SET", k, v}, [][]string{nil, {"EX", "1000"}, {"PX", "1000000"}, {"NX"}, {"XX"}, {"KEEPTTL"}, {"GET"}}[g.r.IntN(7)]...)
	case 1:
		return []string{g.pick("SETNX", "GETSET", "APPEND"), k, v}
	case 2:
		return []string{"GETDEL", k}
	case 3:
		return []string{"GETEX", k, g.pick("EX", "PERSIST"), "1000"}[:g.r.IntN(2)*2+2]
	case 4:
		return []string{g.pick("INCR", "DECR"), g.pick("n", "a", "n")}
	case 5:
		return []string{g.pick("INCRBY", "INCRBYFLOAT"), g.pick("n", "a"), g.pick("5", "-2", "1.5")}
	case 6:
		return []string{"SETRANGE", k, strconv.Itoa(g.r.IntN(4)), "zz"}
	case 7:
		return []string{g.pick("DEL", "UNLINK"), k, g.key()}
	case 8:
		return []string{g.pick("EXPIRE", "PEXPIRE"), g.key(), "1000000"}
	case 9:
		return []string{"PERSIST", g.key()}
	case 10:
		return []string{g.pick("RENAME", "RENAMENX"), g.key(), g.key()}
	case 11:
		return append([]string{"COPY", g.key(), g.key()}, [][]string{nil, {"REPLACE"}, {"DB", "1"}}[g.r.IntN(3)]...)
	case 12:
		return []string{"MOVE", g.key(), g.pick("1", "0")}
	case 13:
		return []string{g.pick("MSET", "MSETNX"), g.skey(), v, g.skey(), g.value()}
	case 14:
		return []string{"HSET", g.pick("h", "h", "a"), g.field(), v}
	case 15:
		return []string{"HDEL", "h", g.field(), g.field()}
	case 16:
		return []string{g.pick("HINCRBY", "HSETNX"), "h", g.field(), "3"}
	case 17:
		return []string{g.pick("LPUSH", "RPUSH"), "l", g.pick("4", "0")}
	case 18:
		return []string{"LPOP", "l"}
	case 19:
		return []string{g.pick("SADD", "SREM"), "s", strconv.Itoa(g.r.IntN(6))}
	case 20:
		return []string{"ZADD", "z", "3", g.pick("one", "three")}
	case 21:
		if g.r.IntN(4) == 0 {
			return []string{g.pick("FLUSHDB", "FLUSHALL", "SWAPDB")}[:1]
		}
		return []string{"SWAPDB", "0", "1"}
	case 22:
		return []string{"EVAL", "redis.call('SET', ARGV[1], ARGV[2]) return 1", "0", k, v}
	case 23:
		return []string{"EVAL", "redis.call('DEL', ARGV[1]) return redis.call('HSET', 'h', 'f', ARGV[2])", "0", k, v}
	case 24:
		return []string{"FCALL", "cset", "0", k, v}
	case 25:
		return []string{"SORT", "l", "ALPHA", "STORE", k}
	case 26:
		return []string{"SET", "n", strconv.Itoa(g.r.IntN(10))}
	case 27:
		// Scripts that change data without a keyspace notification per
		// key: only the fence's counter check can see them.
		return []string{"EVAL", g.pick("return redis.call('SWAPDB', 0, 1)", "return redis.call('FLUSHDB')"), "0"}
	default:
		return []string{"SET", k, v}
	}
}

// command returns one command for a connection in state s and updates s.
func (g *Generator) command(s *clientState) Cmd {
	args := g.pickCommand(s)
	c := Cmd{Args: args, Replies: s.apply(args)}
	if !s.multi && g.r.IntN(10) == 0 && inlineSafe(args) {
		c.Inline = true
	}
	return c
}

// apply updates the model for args sent on the connection and returns the
// number of replies (pushes aside) Redis gives to it.
func (s *clientState) apply(args []string) int {
	name, sub := strings.ToUpper(args[0]), ""
	if len(args) > 1 {
		sub = strings.ToUpper(args[1])
	}
	// CLIENT REPLY SKIP suppresses the next reply whatever the command;
	// OFF suppresses replies until a command clears it before replying
	// (CLIENT REPLY ON, RESET).
	skipped := s.skipNext
	s.skipNext = false
	switch {
	case s.multi:
		switch name {
		case "EXEC", "DISCARD":
			s.multi = false
		}
	case name == "RESET":
		*s = clientState{}
	case name == "HELLO" && len(args) > 1:
		s.resp3 = args[1] == "3"
	case name == "MULTI":
		s.multi = true
	case name == "AUTH" && len(args) == 3:
		if pw, ok := passwords[args[1]]; ok && (pw == "" || pw == args[2]) {
			s.user = args[1]
		}
	case name == "REPLCONF" && s.user != "reader" && replconfReplies(args) == 0:
		// Run (reader's ACL refuses it, with a reply). Queued in MULTI it
		// would make EXEC's array one element short: never generated there.
		return 0
	case name == "SUBSCRIBE" || name == "UNSUBSCRIBE":
		s.subscribed = name == "SUBSCRIBE" || s.subscribed && len(args) > 2
		return 0 // RESP3: confirmations are pushes
	case name == "CLIENT" && sub == "TRACKING" && len(args) > 2:
		s.tracking = strings.EqualFold(args[2], "ON")
	case name == "CLIENT" && sub == "REPLY" && len(args) > 2:
		switch strings.ToUpper(args[2]) {
		case "ON":
			s.replyOff = false
			return 1
		case "OFF":
			s.replyOff = true
		case "SKIP":
			s.skipNext = !s.replyOff
			return 0
		}
	}
	if skipped || s.replyOff {
		return 0
	}
	return 1
}

// passwords are the users of Once and the default user (no password), as
// AUTH user password checks them.
var passwords = map[string]string{"reader": "rpw", "writer": "wpw", "default": ""}

// replconfReplies is how many replies Redis 7.0 gives a REPLCONF it runs
// (replconfCommand): it takes the option-value pairs in order and returns
// without a reply at ACK or GETACK, with an error at an invalid pair (an
// even argument count, an unknown option, a port that is not a number),
// else with +OK.
func replconfReplies(args []string) int {
	if len(args)%2 == 0 {
		return 1
	}
	for j := 1; j < len(args); j += 2 {
		switch strings.ToUpper(args[j]) {
		case "ACK", "GETACK":
			return 0
		case "LISTENING-PORT":
			if _, err := strconv.ParseInt(args[j+1], 10, 64); err != nil {
				return 1
			}
		case "CAPA", "IP-ADDRESS":
		default:
			return 1
		}
	}
	return 1
}

// Recount sets every command's reply count from the connection model, for
// a conversation edited by Minimize. It reports false when a step's last
// command gets no reply: nothing would then order that step before the
// next one on another connection.
func Recount(conv Conversation) (Conversation, bool) {
	st := map[int]*clientState{}
	out := conv
	out.Steps = make([]Step, len(conv.Steps))
	for i, step := range conv.Steps {
		if st[step.Client] == nil {
			st[step.Client] = &clientState{}
		}
		if step.Cmds != nil {
			cmds := make([]Cmd, len(step.Cmds))
			for j, c := range step.Cmds {
				c.Replies = st[step.Client].apply(c.Args)
				cmds[j] = c
			}
			if cmds[len(cmds)-1].Replies == 0 {
				return conv, false
			}
			step.Cmds = cmds
		}
		out.Steps[i] = step
	}
	return out, true
}

// pickCommand draws a command allowed in state s.
func (g *Generator) pickCommand(s *clientState) []string {
	if s.multi {
		switch g.r.IntN(12) {
		case 0:
			return []string{"EXEC"}
		case 1:
			return []string{g.pick("EXEC", "DISCARD", "MULTI", "WATCH")}
		case 2:
			return []string{"GET"} // wrong arity: EXECABORT
		case 3, 4, 5:
			return g.read()
		default:
			return g.write()
		}
	}
	if s.replyOff {
		if g.r.IntN(4) == 0 {
			return []string{"CLIENT", "REPLY", "ON"}
		}
		return [][]string{g.read(), g.write()}[g.r.IntN(2)]
	}
	switch r := g.r.IntN(100); {
	case r < 66:
		return g.read()
	case r < 80:
		return g.write()
	case r < 82:
		return []string{"MULTI"}
	case r < 83:
		return []string{g.pick("WATCH", "UNWATCH"), g.skey()}[:1+g.r.IntN(2)]
	case r < 85:
		return []string{"SELECT", g.pick("0", "1", "0")}
	case r < 87:
		if s.subscribed || s.tracking {
			return []string{"HELLO", "3"} // RESP2 would turn pushes into replies
		}
		return []string{"HELLO", g.pick("2", "3", "3")}
	case r < 88:
		return []string{"RESET"}
	case r < 90:
		return [][]string{{"AUTH", "reader", "rpw"}, {"AUTH", "writer", "wpw"}, {"AUTH", "default", "x"}, {"AUTH", "reader", "bad"}}[g.r.IntN(4)]
	case r < 92 && s.resp3:
		if s.tracking {
			return []string{"CLIENT", "TRACKING", "OFF"}
		}
		return append([]string{"CLIENT", "TRACKING", "ON"}, [][]string{nil, {"BCAST"}, {"BCAST", "PREFIX", "a"}, {"NOLOOP"}}[g.r.IntN(4)]...)
	case r < 94 && s.resp3:
		if s.subscribed && g.r.IntN(2) == 0 {
			return []string{"UNSUBSCRIBE"}
		}
		return []string{"SUBSCRIBE", g.pick("ch", "ch2")}
	case r < 95:
		return []string{"PUBLISH", g.pick("ch", "ch2"), g.value()}
	case r < 96 && g.Opaque:
		if g.r.IntN(3) == 0 {
			// ACK and GETACK get no reply: Cicada cannot count those after.
			return [][]string{{"REPLCONF", "ACK", "0"}, {"REPLCONF", "getack", "*"}, {"REPLCONF", "capa", "eof", "ack", "1"},
				{"REPLCONF", "listening-port", "x", "ack", "1"}}[g.r.IntN(4)]
		}
		return []string{"CLIENT", "REPLY", g.pick("OFF", "SKIP")}
	case r < 97:
		return []string{"BLPOP", g.pick("l", "empty"), "0.01"}
	default:
		return [][]string{{"TIME"}, {"RANDOMKEY"}, {"CLIENT", "ID"}, {"TTL", g.key()}, {"PTTL", g.key()}, {"PING"}, {"ECHO", "e"}, {"DBSIZE"}, {"INFO", "keyspace"}}[g.r.IntN(9)]
	}
}

// inlineSafe reports whether args can be sent as an inline command and
// reach Redis unchanged.
func inlineSafe(args []string) bool {
	for _, a := range args {
		if a == "" || len(a) > 100 || strings.ContainsAny(a, " \t\r\n\"'\x00\\") {
			return false
		}
	}
	return true
}
