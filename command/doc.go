// Package command is Cicada's table of Redis 7.0 commands and the logic that
// says which keys a forwarded command may write and what it does to its
// connection.
//
// The table (table.go) is generated from a live redis-server's COMMAND reply:
// every command and subcommand with its arity, flags and legacy key
// positions. Each entry also carries an Effect, derived from the flags and
// from hand-written decisions (effects.go), that tells the cache what to do
// when the command goes upstream:
//
//	request args ──Resolve──▶ *Spec ──Effect──┬─ EffectNone:    nothing to evict
//	                                          ├─ EffectKeys:    WrittenKeys ─▶ evict those keys
//	                                          ├─ EffectUnknown: evict everything (or the db)
//	                                          └─ EffectFlush:   drop the whole cache
//
// A nil *Spec (unknown command, module command, unknown subcommand) is to be
// treated as EffectUnknown; WrittenKeys returning ok=false likewise.
//
// Each entry also says what the command does to the connection that sends
// it (Spec.Conn, conn.go): the state its reply confirms (SELECT's db,
// AUTH's identity, MULTI/EXEC, CLIENT TRACKING, READONLY, subscriptions),
// whether requests after it wait for that reply (PausesAfter), whether it
// is kept until EXEC when queued (QueuedAtExec), and whether its replies can
// still be counted (CLIENT REPLY, REPLCONF, MONITOR, SYNC). The proxy's
// dispatch is a switch on that property, never on command names.
//
// Resolve and WrittenKeys do not allocate (given a dst with capacity), never
// panic on any input, and are safe for concurrent use: the table is built at
// package initialisation and read-only afterwards.
//
// To regenerate the table, start a redis-server and run, in this directory:
//
//	go generate
//
// (or go run ./internal/gen -addr host:port -out table.go), then run the
// tests, which compare the table with a live server and fail for each new
// write command without a sample invocation and each new command nobody
// has reviewed.
package command

//go:generate go run ./internal/gen -addr 127.0.0.1:6379 -out table.go
