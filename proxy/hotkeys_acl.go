package proxy

import (
	"context"
	"sync"
	"time"

	"github.com/cicada-proxy/cicada/hotkeys"
)

// aclErrorTTL is how long a failed ACL lookup is answered from the cache
// (as an error reply) before it is tried again.
const aclErrorTTL = time.Second

// permCache remembers what ACL GETUSER said of the users that ran HOTKEYS,
// until the next ACL change Cicada hears of (identities.rulesChanged: an
// ACL SETUSER/DELUSER/LOAD or CONFIG SET through Cicada, or seen in
// Redis's INFO commandstats). A user not in the cache is looked up on a
// goroutine of its own while the asking connections wait, paused; each is
// woken on its loop (gnet Wake) when the answer is in.
//
// Safe for concurrent use; HOTKEYS only, never the request path.
type permCache struct {
	mu      sync.Mutex // guards the following
	gen     uint64     // identities generation the entries are valid for
	users   map[string]permEntry
	waiting map[string][]*session // lookups in flight, and who waits for each
}

type permEntry struct {
	u   hotkeys.UserACL
	err error
	at  time.Time
}

// lookup returns the ACL of user name, or ready=false after registering s
// to be woken (aclLooked) when it is known. Called on s's loop.
func (c *permCache) lookup(s *session, name string) (u hotkeys.UserACL, err error, ready bool) {
	srv := s.srv
	gen := srv.ids.generation()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.users == nil || c.gen != gen {
		c.users, c.gen = map[string]permEntry{}, gen
	}
	if e, ok := c.users[name]; ok && (e.err == nil || time.Since(e.at) < aclErrorTTL) {
		return e.u, e.err, true
	}
	if c.waiting == nil {
		c.waiting = map[string][]*session{}
	}
	w, inFlight := c.waiting[name]
	c.waiting[name] = append(w, s)
	if !inFlight {
		go c.fetch(srv, name, gen)
	}
	return u, nil, false
}

// fetch looks name up and wakes the connections waiting for it. At most
// ACLLookups run at once (srv.aclLookups), each on a connection of its
// own: users looked up together (HOTKEYS from many users while Redis is
// busy) wait their turn rather than take the descriptors clients need.
func (c *permCache) fetch(srv *Server, name string, gen uint64) {
	srv.aclLookups <- struct{}{}
	ctx, cancel := context.WithTimeout(context.Background(), srv.cfg.DialTimeout+time.Second)
	u, err := srv.cfg.ACLUser(ctx, name)
	cancel()
	<-srv.aclLookups
	c.mu.Lock()
	waiters := c.waiting[name]
	delete(c.waiting, name)
	if c.gen == gen {
		c.users[name] = permEntry{u: u, err: err, at: time.Now()}
	}
	c.mu.Unlock()
	for _, s := range waiters {
		_ = s.client.Wake(s.aclLooked) // safe from any goroutine; ignored once closed
	}
}
