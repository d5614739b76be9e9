package proxy

import "sync"

// identities maps the users Redis authenticated connections as to small
// numbers that hotcache records as proven readers.
//
// A fresh connection is authenticated by Redis as the default user only if
// that user needs no password at the moment it connects. Its identity is the
// current "initial" number; every change to authentication Cicada forwards
// (CONFIG SET, ACL SETUSER/DELUSER/LOAD) moves new connections to a new
// initial number, so proof gathered under the old rules never serves them.
//
// Safe for concurrent use; taken on AUTH, HELLO, RESET and connect only.
type identities struct {
	mu      sync.Mutex // guards the following
	users   map[string]uint32
	next    uint32
	initial uint32
}

func newIdentities() *identities {
	return &identities{users: map[string]uint32{}, next: 2, initial: 1}
}

// fresh returns the identity of a connection that has not authenticated.
func (ids *identities) fresh() uint32 {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	return ids.initial
}

// user returns the identity of a connection Redis authenticated as name.
func (ids *identities) user(name string) uint32 {
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
func (ids *identities) userOrAnonymous(name string, anon bool) uint32 {
	if anon {
		return ids.anonymous()
	}
	return ids.user(name)
}

// anonymous returns an identity nobody else has: for a connection whose
// user Redis knows but Cicada cannot name. Its reads prove nothing for
// other connections.
func (ids *identities) anonymous() uint32 {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	id := ids.next
	ids.next++
	return id
}

// generation changes whenever rulesChanged is called: what was learnt of
// ACL users before it may be out of date.
func (ids *identities) generation() uint32 {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	return ids.initial
}

// rulesChanged gives connections opened from now on a new initial identity.
func (ids *identities) rulesChanged() {
	ids.mu.Lock()
	defer ids.mu.Unlock()
	ids.initial = ids.next
	ids.next++
}
