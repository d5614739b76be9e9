package resp

import "strconv"

// AppendArrayHeader appends "*<n>\r\n".
func AppendArrayHeader(dst []byte, n int) []byte {
	dst = append(dst, '*')
	dst = strconv.AppendInt(dst, int64(n), 10)
	return append(dst, '\r', '\n')
}

// AppendBulk appends b as a bulk string: "$<len>\r\n<b>\r\n".
func AppendBulk(dst, b []byte) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(b)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, b...)
	return append(dst, '\r', '\n')
}

// AppendBulkString is AppendBulk for a string.
func AppendBulkString(dst []byte, s string) []byte {
	dst = append(dst, '$')
	dst = strconv.AppendInt(dst, int64(len(s)), 10)
	dst = append(dst, '\r', '\n')
	dst = append(dst, s...)
	return append(dst, '\r', '\n')
}

// AppendCommand appends a request as a multibulk array of bulk strings,
// the way redis-cli and client libraries send commands.
func AppendCommand(dst []byte, args ...[]byte) []byte {
	dst = AppendArrayHeader(dst, len(args))
	for _, a := range args {
		dst = AppendBulk(dst, a)
	}
	return dst
}

// AppendError appends an error reply "-<msg>\r\n". msg must not contain
// CR or LF.
func AppendError(dst []byte, msg string) []byte {
	dst = append(dst, '-')
	dst = append(dst, msg...)
	return append(dst, '\r', '\n')
}

// NullBulk returns the encoding of a missing value for a protocol version:
// "$-1\r\n" in RESP2, "_\r\n" in RESP3. The slice is shared; do not modify.
func NullBulk(proto int) []byte {
	if proto >= 3 {
		return nullRESP3
	}
	return nullRESP2
}

var (
	nullRESP2 = []byte("$-1\r\n")
	nullRESP3 = []byte("_\r\n")
)
