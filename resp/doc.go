// Package resp frames the Redis serialization protocol on both sides of the
// proxy without trusting either side's length fields.
//
// Requests (client → Redis) are parsed by RequestParser, which follows
// redis-server 7.0's own parser (networking.c: processMultibulkBuffer and
// processInlineBuffer) byte for byte: the same accepted inputs, the same
// "Protocol error: ..." texts at the same points, and the same quirks (the
// two bytes after a bulk payload are skipped unchecked, a NUL byte hides a
// line ending, inline arguments are split like sdssplitargs). What Redis
// refuses only in some states (its proto-max-bulk-len of the moment, its
// limits before authentication) is not decided here: such a command is
// streamed for Redis to decide. Small arguments are copied out so a command
// can be inspected after its bytes are gone; big ones are streamed through
// and only their length is kept.
//
// Replies (Redis → client) are framed by ReplyFramer, a resumable RESP2 and
// RESP3 state machine (attributes, pushes, nested aggregates, streamed big
// bulk strings) that reports where each top-level reply ends and a short
// summary of it (type, first line, first elements) for the proxy's
// bookkeeping. It never needs a whole reply in memory.
//
// The Append* functions are pure encoders: AppendX(dst, ...) returns dst with
// the encoding appended.
//
// Nothing in this package is safe for concurrent use; each parser or framer
// belongs to one connection and is used by that connection's event loop.
package resp
