package command

// This file holds the hand-written half of the command table: the effect of
// every command whose effect the COMMAND flags do not settle, and the key
// finders for write commands whose written keys the legacy positions miss.
//
// Derivation from flags (defaultEffect), applied when a command has no entry
// below:
//
//	write, First > 0, not movablekeys  EffectKeys (legacy First..Last..Step)
//	write, movablekeys or no keys      EffectUnknown (needs a key finder or a decision)
//	readonly                           EffectNone
//	neither write nor readonly         EffectUnknown (not reviewed yet)
//
// So a command added by a newer server is conservative until reviewed, and
// the tests fail until someone writes its decision here (and, for a write
// command, a sample invocation in samples_test.go).
//
// Decisions for non-obvious commands:
//
//	command                    effect   why
//	-------------------------  -------  ---------------------------------------------
//	FLUSHALL, FLUSHDB, SWAPDB  flush    replace data wholesale (write flag, no keys)
//	DEBUG                      flush    DEBUG RELOAD/LOADAOF/POPULATE/SET-ACTIVE-EXPIRE...
//	                                    rewrite data; subcommands are not in COMMAND
//	REPLICAOF, SLAVEOF         flush    a full resync replaces the dataset
//	FAILOVER                   flush    this master turns into a replica of another
//	CLUSTER FAILOVER|REPLICATE flush    role change / full resync
//	CLUSTER RESET              flush    a replica's dataset is flushed
//	SHUTDOWN                   flush    a restart reloads data from disk (or nothing);
//	                                    rare, so dropping the cache costs nothing
//	EVAL, EVALSHA, FCALL       unknown  scripts write keys they need not declare
//	                                    (no write flag in 7.0, key specs say RW)
//	MIGRATE                    unknown  deletes the source keys; KEYS form is movable
//	MODULE LOAD, LOADEX        unknown  a module's OnLoad may write anything
//	PFCOUNT                    keys     readonly flag, but on one key it stores the
//	                                    cached cardinality in the HLL header (the
//	                                    bytes GET returns change); key spec says RW
//	FUNCTION DELETE|FLUSH|     none     write flag, but functions are not key data
//	  LOAD|RESTORE
//	SCRIPT FLUSH|LOAD|KILL,    none     scripts are not key data; a script that has
//	  FUNCTION KILL                     written cannot be killed (only SHUTDOWN NOSAVE)
//	PUBLISH, SPUBLISH, WAIT,   none     no key data changes; SPUBLISH/SSUBSCRIBE/WATCH
//	  WATCH, (S)SUBSCRIBE...            name keys but do not write them
//	MULTI, EXEC, DISCARD       none     EXEC's effect is that of the queued commands,
//	                                    which the caller classifies one by one
//	SAVE, BGSAVE, BGREWRITEAOF none     persist, do not change data
//	SYNC, PSYNC, REPLCONF      none     make the *client* a replica; data unchanged
//	CONFIG SET, CONFIG ...     none     (a lower maxmemory evicts keys, as expiry
//	                                    removes them: not caused by a named key;
//	                                    the cache must honour TTLs and evictions by
//	                                    other means)
//	CLIENT ..., ACL ..., RESET none     connection and user state only
//	CLUSTER ADDSLOTS|DELSLOTS| none     slot ownership only; Redis refuses SETSLOT
//	  SETSLOT|FLUSHSLOTS|...            while this node holds keys of the slot, and
//	                                    FLUSHSLOTS needs an empty database
//	MEMORY PURGE, LATENCY ...  none     allocator and statistics only
//	OBJECT, TOUCH, xxx_RO      none     readonly (TOUCH updates only the LRU clock)
//
// Every readonly command may still delete an expired key it touches (lazy
// expiry); that is expiry, not a write named by the command.

// effectOverrides holds every effect decided by hand. Each command that is
// neither write nor readonly has an entry, so none gets EffectUnknown by
// default by accident. Commands with a key finder are not listed here.
var effectOverrides = map[string]Effect{
	// Write commands that do not write named keys.
	"flushall": EffectFlush, "flushdb": EffectFlush, "swapdb": EffectFlush,
	"migrate":         EffectUnknown,
	"function|delete": EffectNone, "function|flush": EffectNone, "function|load": EffectNone, "function|restore": EffectNone,

	// Readonly commands that write.
	"pfcount": EffectKeys,

	// Neither write nor readonly: reviewed one by one.
	"debug": EffectFlush, "replicaof": EffectFlush, "slaveof": EffectFlush, "failover": EffectFlush, "shutdown": EffectFlush,
	"eval": EffectUnknown, "evalsha": EffectUnknown, "fcall": EffectUnknown,

	"acl": EffectNone, "acl|cat": EffectNone, "acl|deluser": EffectNone, "acl|dryrun": EffectNone, "acl|genpass": EffectNone,
	"acl|getuser": EffectNone, "acl|help": EffectNone, "acl|list": EffectNone, "acl|load": EffectNone, "acl|log": EffectNone,
	"acl|save": EffectNone, "acl|setuser": EffectNone, "acl|users": EffectNone, "acl|whoami": EffectNone,

	"client": EffectNone, "client|caching": EffectNone, "client|getname": EffectNone, "client|getredir": EffectNone,
	"client|help": EffectNone, "client|id": EffectNone, "client|info": EffectNone, "client|kill": EffectNone,
	"client|list": EffectNone, "client|no-evict": EffectNone, "client|pause": EffectNone, "client|reply": EffectNone,
	"client|setname": EffectNone, "client|tracking": EffectNone, "client|trackinginfo": EffectNone,
	"client|unblock": EffectNone, "client|unpause": EffectNone,

	"cluster|failover": EffectFlush, "cluster|replicate": EffectFlush, "cluster|reset": EffectFlush,
	"cluster": EffectNone, "cluster|addslots": EffectNone, "cluster|addslotsrange": EffectNone, "cluster|bumpepoch": EffectNone,
	"cluster|count-failure-reports": EffectNone, "cluster|countkeysinslot": EffectNone, "cluster|delslots": EffectNone,
	"cluster|delslotsrange": EffectNone, "cluster|flushslots": EffectNone, "cluster|forget": EffectNone,
	"cluster|getkeysinslot": EffectNone, "cluster|help": EffectNone, "cluster|info": EffectNone, "cluster|keyslot": EffectNone,
	"cluster|links": EffectNone, "cluster|meet": EffectNone, "cluster|myid": EffectNone, "cluster|nodes": EffectNone,
	"cluster|replicas": EffectNone, "cluster|saveconfig": EffectNone, "cluster|set-config-epoch": EffectNone,
	"cluster|setslot": EffectNone, "cluster|shards": EffectNone, "cluster|slaves": EffectNone, "cluster|slots": EffectNone,

	"command": EffectNone, "command|count": EffectNone, "command|docs": EffectNone, "command|getkeys": EffectNone,
	"command|getkeysandflags": EffectNone, "command|help": EffectNone, "command|info": EffectNone, "command|list": EffectNone,

	"config": EffectNone, "config|get": EffectNone, "config|help": EffectNone, "config|resetstat": EffectNone,
	"config|rewrite": EffectNone, "config|set": EffectNone,

	"function": EffectNone, "function|dump": EffectNone, "function|help": EffectNone, "function|kill": EffectNone,
	"function|list": EffectNone, "function|stats": EffectNone,

	"latency": EffectNone, "latency|doctor": EffectNone, "latency|graph": EffectNone, "latency|help": EffectNone,
	"latency|histogram": EffectNone, "latency|history": EffectNone, "latency|latest": EffectNone, "latency|reset": EffectNone,

	"memory": EffectNone, "memory|doctor": EffectNone, "memory|help": EffectNone, "memory|malloc-stats": EffectNone,
	"memory|purge": EffectNone, "memory|stats": EffectNone,

	"module|load": EffectUnknown, "module|loadex": EffectUnknown,
	"module": EffectNone, "module|help": EffectNone, "module|list": EffectNone, "module|unload": EffectNone,

	"pubsub": EffectNone, "pubsub|channels": EffectNone, "pubsub|help": EffectNone, "pubsub|numpat": EffectNone,
	"pubsub|numsub": EffectNone, "pubsub|shardchannels": EffectNone, "pubsub|shardnumsub": EffectNone,

	"script": EffectNone, "script|debug": EffectNone, "script|exists": EffectNone, "script|flush": EffectNone,
	"script|help": EffectNone, "script|kill": EffectNone, "script|load": EffectNone,

	"slowlog": EffectNone, "slowlog|get": EffectNone, "slowlog|help": EffectNone, "slowlog|len": EffectNone,
	"slowlog|reset": EffectNone,

	"object": EffectNone, "object|help": EffectNone, "xgroup": EffectNone, "xgroup|help": EffectNone,
	"xinfo": EffectNone, "xinfo|help": EffectNone,

	"asking": EffectNone, "auth": EffectNone, "bgrewriteaof": EffectNone, "bgsave": EffectNone, "discard": EffectNone,
	"echo": EffectNone, "exec": EffectNone, "hello": EffectNone, "info": EffectNone, "lastsave": EffectNone,
	"monitor": EffectNone, "multi": EffectNone, "pfselftest": EffectNone, "ping": EffectNone, "psubscribe": EffectNone,
	"psync": EffectNone, "publish": EffectNone, "punsubscribe": EffectNone, "quit": EffectNone, "readonly": EffectNone,
	"readwrite": EffectNone, "replconf": EffectNone, "reset": EffectNone, "role": EffectNone, "save": EffectNone,
	"select": EffectNone, "spublish": EffectNone, "ssubscribe": EffectNone, "subscribe": EffectNone,
	"sunsubscribe": EffectNone, "sync": EffectNone, "time": EffectNone, "unsubscribe": EffectNone,
	"unwatch": EffectNone, "wait": EffectNone, "watch": EffectNone,
}

// keyFinders names the EffectKeys commands whose written keys the legacy
// First..Last..Step positions do not describe (movablekeys write commands,
// MOVE's and COPY's target database). See keys.go for each parser.
var keyFinders = map[string]keysKind{
	"move":              kindMove,
	"copy":              kindCopy,
	"sort":              kindSort,
	"georadius":         kindGeoRadius,
	"georadiusbymember": kindGeoRadius,
	"zunionstore":       kindStoreNumkeys,
	"zinterstore":       kindStoreNumkeys,
	"zdiffstore":        kindStoreNumkeys,
	"lmpop":             kindNumkeysAt1,
	"zmpop":             kindNumkeysAt1,
	"blmpop":            kindNumkeysAt2,
	"bzmpop":            kindNumkeysAt2,
	"xreadgroup":        kindXReadGroup,
}

// decide returns the effect and key finder of the command named name.
func decide(name string, f Flags, first int) (Effect, keysKind) {
	if k, ok := keyFinders[name]; ok {
		return EffectKeys, k
	}
	if e, ok := effectOverrides[name]; ok {
		return e, kindLegacy
	}
	return defaultEffect(f, first), kindLegacy
}

// defaultEffect derives an effect from the flags alone (see the file
// comment).
func defaultEffect(f Flags, first int) Effect {
	switch {
	case f.Has(FlagWrite) && !f.Has(FlagMovableKeys) && first > 0:
		return EffectKeys
	case f.Has(FlagWrite):
		return EffectUnknown
	case f.Has(FlagReadonly):
		return EffectNone
	}
	return EffectUnknown
}
