package proxy

// Descriptors. Each client holds two (its connection and its upstream
// connection); beyond those the proxy needs a bounded number, which
// MaxClientsFor reserves, so that accept(2) never fails for want of one:
// it would stop gnet's engine, and with it every client.
const (
	// DialsInFlight bounds the upstream dials in progress at once; more
	// wait their turn. Each holds up to two descriptors besides its
	// client's two (the dialed socket, and gnet's duplicate of it until
	// gnet closes the first), since its client may have closed and freed
	// its place meanwhile.
	DialsInFlight = 16
	// ACLLookups bounds the ACL GETUSER lookups (one connection each, see
	// permCache) in progress at once; the process's own descriptors must
	// hold them (cmd/cicada reserves them).
	ACLLookups = 4
	// descriptorsPerLoop are an event loop's own: its epoll instance, the
	// eventfd that wakes it and its listener (SO_REUSEPORT), its spare
	// upstream connection (spare.go), and one more for the connection it
	// has accepted and OnOpen refuses (maxclients, draining) before it
	// accepts the next, or for the moment a half-closed client's socket
	// is duplicated (half.go).
	descriptorsPerLoop = 5
)

// Descriptors returns how many descriptors the proxy may hold at once
// with maxClients clients and loops event loops: two per client, and its
// own (descriptorsPerLoop per loop, two per dial in flight).
func Descriptors(maxClients, loops int) uint64 {
	return 2*uint64(maxClients) + uint64(descriptorsPerLoop*loops+2*DialsInFlight)
}

// MaxClientsFor returns how many clients fit in openFiles descriptors
// (RLIMIT_NOFILE) with loops event loops, when the process holds others
// of its own besides the proxy's (listeners, Cicada's own Redis
// connections): the most for which Descriptors fits in what others leave,
// at least 1 and at most 2^30.
func MaxClientsFor(openFiles uint64, loops, others int) int {
	reserved := uint64(others) + Descriptors(0, loops)
	if openFiles < reserved+2 {
		return 1
	}
	return int(min((openFiles-reserved)/2, 1<<30))
}
