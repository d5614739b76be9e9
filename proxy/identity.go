package proxy

import (
	"sync"
	"sync/atomic"

	"github.com/cicada-proxy/cicada/hotcache"
)

// identities maps the users Redis authenticated connections as to small
// numbers that hotcache records as proven readers.
//
// A fresh connection is authenticated by Redis as the default user only if
// that user needs no password at the moment it connects. Its identity is the
// current "initial" number; every change to authentication Cicada forwards
// (CONFIG SET, ACL SETUSER/DELUSER/LOAD) moves new connections to a new
// initial number, so proof gathered under the old rules never serves them.
//
// A connection holding an initial number may have been accepted on either
// side of a change Cicada had not yet seen (a requirepass set on Redis
// directly): Redis authenticated it or not, Cicada cannot tell. So every
// change also moves gen, and a connection whose initial number is from an
// older gen takes an anonymous identity before its next cache lookup
// (session.checkFresh).
//
// It also keeps, for lanes (lane.go), the password Redis last accepted for
// each user under the current rules: in memory only, forgotten at the
// next rules change or when a lane's AUTH with it fails.
//
// Safe for concurrent use; taken on AUTH, HELLO, RESET, connect and lane
// dials only.
type identities struct {
	gen     atomic.Uint64 // rules changes seen; read before every lookup of a fresh connection
	mu      sync.Mutex    // guards the following
	users   map[string]hotcache.Ident
	next    hotcache.Ident
	initial hotcache.Ident
	creds   map[string]credential
}

// credential is a password Redis accepted for a user, and the rules
// generation it was accepted under.
type credential struct {
	pass string
	gen  uint64
}

// remember records that Redis has just accepted pass for user.
func (ids *identities) remember(user, pass string) {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	if ids.creds == nil {
		ids.creds = map[string]credential{}
	}
	ids.creds[user] = credential{pass: pass, gen: ids.gen.Load()}
}

// credential returns the password Redis last accepted for user, unless
// the rules changed since or it was forgotten.
func (ids *identities) credential(user string) (string, bool) {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	c, ok := ids.creds[user]
	if !ok || c.gen != ids.gen.Load() {
		delete(ids.creds, user)
		return "", false
	}
	return c.pass, true
}

// forget drops user's password: Redis refused it.
func (ids *identities) forget(user string) {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	delete(ids.creds, user)
}

func newIdentities() *identities {
	ids := &identities{users: map[string]hotcache.Ident{}, next: 2, initial: 1}
	ids.gen.Store(1)
	return ids
}

// fresh returns the identity of a connection that has not authenticated,
// and the gen it belongs to.
func (ids *identities) fresh() (hotcache.Ident, uint64) {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	return ids.initial, ids.gen.Load()
}

// user returns the identity of a connection Redis authenticated as name.
func (ids *identities) user(name string) hotcache.Ident {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	id, ok := ids.users[name]
	if !ok {
		id = ids.next
		ids.next++
		ids.users[name] = id
	}
	return id
}

// userOrAnonymous is user(name), or anonymous() when anon is set.
func (ids *identities) userOrAnonymous(name string, anon bool) hotcache.Ident {
	if anon {
		return ids.anonymous()
	}
	return ids.user(name)
}

// anonymous returns an identity nobody else has: for a connection whose
// user Redis knows but Cicada cannot name. Its reads prove nothing for
// other connections.
func (ids *identities) anonymous() hotcache.Ident {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	id := ids.next
	ids.next++
	return id
}

// generation changes whenever rulesChanged is called: what was learnt of
// ACL users before it may be out of date.
func (ids *identities) generation() uint64 { return ids.gen.Load() }

// rulesChanged gives connections opened from now on a new initial
// identity, and forgets every password.
func (ids *identities) rulesChanged() {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	ids.initial = ids.next
	ids.next++
	ids.gen.Add(1)
	ids.creds = nil
}
