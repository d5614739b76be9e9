package resp

// splitArgs splits an inline request line into arguments exactly like
// Redis's sdssplitargs (sds.c): blanks separate arguments; "double quotes"
// understand \xHH, \n, \r, \t, \b, \a and \<any>; 'single quotes' understand
// \'; a closing quote must be followed by a blank or the end of the line.
// It records the arguments in p (at most p.captureArgs of them) and returns
// how many there were, or ok=false for unbalanced quotes.
func (p *RequestParser) splitArgs(line []byte) (argc int, ok bool) {
	at := func(i int) byte { // the line as a NUL-terminated C string
		if i < len(line) {
			return line[i]
		}
		return 0
	}
	i := 0
	for {
		for at(i) != 0 && isSpace(at(i)) {
			i++
		}
		if at(i) == 0 {
			return argc, true
		}
		start := len(p.buf)
		inq, insq, done := false, false, false
		for !done {
			c := at(i)
			switch {
			case inq:
				switch {
				case c == '\\' && at(i+1) == 'x' && isHex(at(i+2)) && isHex(at(i+3)):
					p.buf = append(p.buf, unhex(at(i+2))<<4|unhex(at(i+3)))
					i += 3
				case c == '\\' && at(i+1) != 0:
					i++
					p.buf = append(p.buf, unescape(at(i)))
				case c == '"':
					if at(i+1) != 0 && !isSpace(at(i+1)) {
						return 0, false
					}
					done = true
				case c == 0:
					return 0, false
				default:
					p.buf = append(p.buf, c)
				}
			case insq:
				switch {
				case c == '\\' && at(i+1) == '\'':
					i++
					p.buf = append(p.buf, '\'')
				case c == '\'':
					if at(i+1) != 0 && !isSpace(at(i+1)) {
						return 0, false
					}
					done = true
				case c == 0:
					return 0, false
				default:
					p.buf = append(p.buf, c)
				}
			default:
				switch c {
				case ' ', '\n', '\r', '\t', 0:
					done = true
				case '"':
					inq = true
				case '\'':
					insq = true
				default:
					p.buf = append(p.buf, c)
				}
			}
			if at(i) != 0 {
				i++
			}
		}
		if len(p.offs) < p.captureArgs {
			p.offs = append(p.offs, start)
			p.lens = append(p.lens, len(p.buf)-start)
		} else {
			p.buf = p.buf[:start]
		}
		argc++
	}
}

// isSpace is C's isspace in the "C" locale.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r'
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func unhex(c byte) byte {
	switch {
	case c >= '0' && c <= '9':
		return c - '0'
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

func unescape(c byte) byte {
	switch c {
	case 'n':
		return '\n'
	case 'r':
		return '\r'
	case 't':
		return '\t'
	case 'b':
		return '\b'
	case 'a':
		return '\a'
	default:
		return c
	}
}
