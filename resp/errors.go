package resp

import "errors"

// Protocol errors. The texts of request errors are the ones redis-server
// 7.0 replies with (after "-ERR "); see RequestParser.Err.
var (
	// ErrReplyProtocol reports a reply stream that is not valid RESP2/RESP3:
	// an unknown type byte, a malformed length, a missing CRLF, or an
	// aggregate declaring more than 2^62 values. The stream cannot be
	// resynchronized.
	ErrReplyProtocol = errors.New("resp: invalid reply from upstream")
)

// Redis's own protocol error texts for requests (networking.c, 7.0).
const (
	errTooBigMbulk     = "Protocol error: too big mbulk count string"
	errInvalidMbulk    = "Protocol error: invalid multibulk length"
	errTooBigBulkCount = "Protocol error: too big bulk count string"
	errInvalidBulk     = "Protocol error: invalid bulk length"
	errTooBigInline    = "Protocol error: too big inline request"
	errUnbalanced      = "Protocol error: unbalanced quotes in request"
	errExpectedDollar  = "Protocol error: expected '$', got '"
)
