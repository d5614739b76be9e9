package command

// ConnEffect is what a command does to the connection that sends it, as a
// proxy that follows the connection's state must see it: which state its
// successful reply changes, whether its replies can still be counted, and
// whether requests after it depend on its reply. ConnNone for every
// command not listed in connEffects (a command learned from the live
// server has the effect its name is listed with: CLIENT SETINFO, from
// Redis 7.2).
type ConnEffect uint8

// The connection effects. "Confirmed" means by Redis's reply: the state
// changes only if the reply is not an error.
const (
	ConnNone ConnEffect = iota
	// ConnSelect (SELECT db): the db, once confirmed.
	ConnSelect
	// ConnReset (RESET): db 0, RESP2, no transaction, no subscriptions, no
	// tracking, the default user, READWRITE.
	ConnReset
	// ConnMulti (MULTI): a transaction opens; commands after it are queued.
	ConnMulti
	// ConnExec (EXEC): the queued commands run, and their state changes
	// take effect.
	ConnExec
	// ConnDiscard (DISCARD): the transaction ends unexecuted.
	ConnDiscard
	// ConnAuth (AUTH): the identity, once confirmed.
	ConnAuth
	// ConnHello (HELLO): the protocol and, with an AUTH option, the
	// identity.
	ConnHello
	// ConnTracking (CLIENT TRACKING ON|OFF): client-side caching.
	ConnTracking
	// ConnReadonly (READONLY, READWRITE): Redis Cluster replica reads;
	// Spec.ConnOn tells which.
	ConnReadonly
	// ConnClusterChange (CLUSTER SETSLOT, ADDSLOTS, FAILOVER, ...): the
	// node's slots or role may change.
	ConnClusterChange
	// ConnAuthRules (CONFIG SET, ACL SETUSER|DELUSER|LOAD): who may read
	// what may change, for every connection. CONFIG SET may also change
	// notify-keyspace-events (Spec.ConnVerify).
	ConnAuthRules
	// ConnSubscribe ((P|S)(UN)SUBSCRIBE): one confirmation per channel
	// (Spec.ConnSub names the family); subscribed mode.
	ConnSubscribe
	// ConnReplyMode (CLIENT REPLY): OFF and SKIP suppress replies, which
	// can then no longer be counted.
	ConnReplyMode
	// ConnReplconf (REPLCONF): ACK and GETACK run without a reply.
	ConnReplconf
	// ConnStream (MONITOR, SYNC, PSYNC): what follows is a stream, not
	// replies.
	ConnStream
	// ConnQuit (QUIT): +OK whatever the arguments, then Redis closes and
	// reads nothing more.
	ConnQuit
	// ConnSetName (CLIENT SETNAME name): the connection's name, once
	// confirmed.
	ConnSetName
	// ConnSetInfo (CLIENT SETINFO LIB-NAME|LIB-VER value, Redis 7.2+): what
	// the connection says of its client library, once confirmed.
	ConnSetInfo
)

// SubKind names a (un)subscribe command family.
type SubKind uint8

// The families; each has its own subscription count in Redis.
const (
	SubChannel SubKind = iota // SUBSCRIBE / UNSUBSCRIBE: channels
	SubPattern                // PSUBSCRIBE / PUNSUBSCRIBE: patterns
	SubShard                  // SSUBSCRIBE / SUNSUBSCRIBE: shard channels
)

// connEffects lists the commands with a ConnEffect. The family of a
// subscribe command and READONLY's on are set by init from the name.
var connEffects = map[string]ConnEffect{
	"select": ConnSelect, "reset": ConnReset,
	"multi": ConnMulti, "exec": ConnExec, "discard": ConnDiscard,
	"auth": ConnAuth, "hello": ConnHello,
	"client|tracking": ConnTracking, "client|reply": ConnReplyMode,
	"readonly": ConnReadonly, "readwrite": ConnReadonly,
	"cluster|setslot": ConnClusterChange, "cluster|addslots": ConnClusterChange,
	"cluster|addslotsrange": ConnClusterChange, "cluster|delslots": ConnClusterChange,
	"cluster|delslotsrange": ConnClusterChange, "cluster|flushslots": ConnClusterChange,
	"cluster|failover": ConnClusterChange, "cluster|replicate": ConnClusterChange,
	"cluster|reset": ConnClusterChange, "cluster|bumpepoch": ConnClusterChange,
	"cluster|set-config-epoch": ConnClusterChange, "cluster|forget": ConnClusterChange,
	"config|set": ConnAuthRules, "acl|setuser": ConnAuthRules, "acl|deluser": ConnAuthRules, "acl|load": ConnAuthRules,
	"subscribe": ConnSubscribe, "unsubscribe": ConnSubscribe,
	"psubscribe": ConnSubscribe, "punsubscribe": ConnSubscribe,
	"ssubscribe": ConnSubscribe, "sunsubscribe": ConnSubscribe,
	"replconf": ConnReplconf,
	"monitor":  ConnStream, "sync": ConnStream, "psync": ConnStream,
	"quit":           ConnQuit,
	"client|setname": ConnSetName, "client|setinfo": ConnSetInfo,
}

// subscribeKinds maps each (un)subscribe command, which is also the first
// element of its confirmation, to its family.
var subscribeKinds = map[string]SubKind{
	"subscribe": SubChannel, "unsubscribe": SubChannel,
	"psubscribe": SubPattern, "punsubscribe": SubPattern,
	"ssubscribe": SubShard, "sunsubscribe": SubShard,
}

// setConn fills in s's connection effect from connEffects.
func setConn(s *Spec) {
	s.Conn = connEffects[s.Name]
	s.ConnSub = subscribeKinds[s.Name]
	s.ConnOn = s.Name == "readonly"
	s.ConnVerify = s.Name == "config|set"
}

// Confirmation reports whether kind, the first element of a three-element
// reply, names a (un)subscribe confirmation, and its family. It does not
// allocate.
func Confirmation(kind []byte) (SubKind, bool) {
	k, ok := subscribeKinds[string(kind)]
	return k, ok
}

// PausesAfter reports whether the requests after a command with this
// effect must wait for its reply before Cicada decides anything for them:
// the state they see (db, identity, protocol) is the one it confirms.
func (c ConnEffect) PausesAfter() bool {
	switch c {
	case ConnSelect, ConnReset, ConnAuth, ConnHello:
		return true
	}
	return false
}

// QueuedAtExec reports whether a command with this effect, queued in a
// transaction, changes the connection's state when EXEC runs it (the
// proxy keeps it until EXEC's reply).
func (c ConnEffect) QueuedAtExec() bool {
	switch c {
	case ConnSelect, ConnAuth, ConnHello, ConnTracking, ConnReadonly, ConnClusterChange:
		return true
	}
	return false
}
