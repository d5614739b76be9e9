package difftest

import (
	"bytes"
	"strings"
	"time"
)

// authGap is the pause SplitAuth puts before an AUTH that followed other
// requests: long enough for the server to have written their replies.
const authGap = 20 * time.Millisecond

// SplitAuth returns conv with every AUTH, and every HELLO with an AUTH
// option, that is pipelined behind other requests of its step moved to a
// step of its own, authGap later. Redis 7.2 and later (and Valkey) drop a
// failed AUTH's error when the client has replies pending in its output
// buffer (redis/redis#15640), so what Redis sends for such a pipeline
// depends on how its bytes were read; Cicada sends the AUTH once the replies
// before it are in, which is the split conversation. Raw steps are split
// too when they are a sequence of RESP arrays; other raw bytes are left
// alone.
func SplitAuth(conv Conversation) Conversation {
	out := conv
	out.Steps = nil
	for _, s := range conv.Steps {
		switch {
		case len(s.Cmds) > 1:
			start := 0
			for i := 1; i < len(s.Cmds); i++ {
				if authenticates(s.Cmds[i].Args) {
					part := s
					part.Cmds = s.Cmds[start:i]
					if start > 0 {
						part.Wait = authGap
					}
					out.Steps = append(out.Steps, part)
					start = i
				}
			}
			part := s
			part.Cmds = s.Cmds[start:]
			if start > 0 {
				part.Wait = authGap
			}
			out.Steps = append(out.Steps, part)
		case s.Raw != nil:
			out.Steps = append(out.Steps, splitRaw(s)...)
		default:
			out.Steps = append(out.Steps, s)
		}
	}
	return out
}

// splitRaw splits a raw step of RESP arrays before each AUTH behind
// another request.
func splitRaw(s Step) []Step {
	cmds, ends, ok := parseArrays(s.Raw)
	if !ok {
		return []Step{s}
	}
	var out []Step
	start := 0
	for i := 1; i < len(cmds); i++ {
		if authenticates(cmds[i]) {
			part := s
			part.Raw, part.Closes = s.Raw[start:ends[i-1]], false
			if start > 0 {
				part.Wait = authGap
			}
			out = append(out, part)
			start = ends[i-1]
		}
	}
	part := s
	part.Raw = s.Raw[start:]
	if start > 0 {
		part.Wait = authGap
	}
	return append(out, part)
}

// parseArrays reads b as RESP arrays of bulk strings (parseValue),
// returning each one's arguments and end offset; ok is false for anything
// else.
func parseArrays(b []byte) (cmds [][]string, ends []int, ok bool) {
	for off := 0; off < len(b); {
		v, n, err := parseValue(b[off:])
		if err != nil || v.Type != '*' || len(v.Elems) == 0 {
			return nil, nil, false
		}
		args := make([]string, 0, len(v.Elems))
		for _, e := range v.Elems {
			header := bytes.IndexByte(e.Raw, '\n') + 1
			if e.Type != '$' || header > len(e.Raw)-2 { // a null bulk too
				return nil, nil, false
			}
			args = append(args, string(e.Raw[header:len(e.Raw)-2]))
		}
		off += n
		cmds, ends = append(cmds, args), append(ends, off)
	}
	return cmds, ends, true
}

// authenticates reports whether args is AUTH, or HELLO with an AUTH option.
func authenticates(args []string) bool {
	if len(args) == 0 {
		return false
	}
	switch strings.ToUpper(args[0]) {
	case "AUTH":
		return true
	case "HELLO":
		for _, a := range args[1:] {
			if strings.EqualFold(a, "AUTH") {
				return true
			}
		}
	}
	return false
}
