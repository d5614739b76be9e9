package command

import "strings"

// Flags is a bitset of the command flags that Redis 7.0 reports in the third
// element of each COMMAND entry. Every flag a 7.0 server reports has a bit, so
// the generated table round-trips COMMAND exactly.
type Flags uint32

// The flags, one bit each. The comment gives the COMMAND spelling.
const (
	FlagWrite           Flags = 1 << iota // "write": may modify the keyspace
	FlagReadonly                          // "readonly": only reads keys
	FlagAdmin                             // "admin": administrative command
	FlagPubSub                            // "pubsub": publish/subscribe command
	FlagNoScript                          // "noscript": not allowed in scripts
	FlagBlocking                          // "blocking": may block the client
	FlagMovableKeys                       // "movablekeys": key positions depend on the arguments
	FlagNoAuth                            // "no_auth": allowed before AUTH
	FlagLoading                           // "loading": allowed while the dataset loads
	FlagStale                             // "stale": allowed on a replica with stale data
	FlagFast                              // "fast": O(1) or O(log N)
	FlagNoMulti                           // "no_multi": not allowed inside MULTI
	FlagDenyOOM                           // "denyoom": refused when over maxmemory
	FlagAsking                            // "asking": cluster ASKING handling
	FlagSkipMonitor                       // "skip_monitor": not shown by MONITOR
	FlagSkipSlowlog                       // "skip_slowlog": not logged in SLOWLOG
	FlagAllowBusy                         // "allow_busy": allowed while a script is busy
	FlagNoAsyncLoading                    // "no_async_loading": refused during async loading
	FlagNoMandatoryKeys                   // "no_mandatory_keys": keys may be absent
)

// flagNames maps each flag bit to its COMMAND spelling, in bit order.
// internal/gen holds the same spellings; TestTableMatchesServer fails if the
// two disagree with a live server.
var flagNames = [...]struct {
	flag Flags
	name string
}{
	{FlagWrite, "write"},
	{FlagReadonly, "readonly"},
	{FlagAdmin, "admin"},
	{FlagPubSub, "pubsub"},
	{FlagNoScript, "noscript"},
	{FlagBlocking, "blocking"},
	{FlagMovableKeys, "movablekeys"},
	{FlagNoAuth, "no_auth"},
	{FlagLoading, "loading"},
	{FlagStale, "stale"},
	{FlagFast, "fast"},
	{FlagNoMulti, "no_multi"},
	{FlagDenyOOM, "denyoom"},
	{FlagAsking, "asking"},
	{FlagSkipMonitor, "skip_monitor"},
	{FlagSkipSlowlog, "skip_slowlog"},
	{FlagAllowBusy, "allow_busy"},
	{FlagNoAsyncLoading, "no_async_loading"},
	{FlagNoMandatoryKeys, "no_mandatory_keys"},
}

// Has reports whether every bit of g is set in f.
func (f Flags) Has(g Flags) bool { return f&g == g }

// String returns the COMMAND spellings of the set bits joined by "|", in bit
// order, e.g. "write|denyoom"; "" for no flags. Unknown bits print as "?".
func (f Flags) String() string {
	var b strings.Builder
	for _, fn := range flagNames {
		if f&fn.flag == 0 {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteString(fn.name)
		f &^= fn.flag
	}
	if f != 0 {
		if b.Len() > 0 {
			b.WriteByte('|')
		}
		b.WriteByte('?')
	}
	return b.String()
}

// flagByName returns the bit for a COMMAND flag spelling, and false for a
// spelling this package does not know.
func flagByName(name string) (Flags, bool) {
	for _, fn := range flagNames {
		if fn.name == name {
			return fn.flag, true
		}
	}
	return 0, false
}
