package hotkeys

import "strings"

// UserACL is what Redis's ACL GETUSER says of a user, as far as running a
// keyless command goes.
type UserACL struct {
	// Exists is false when Redis has no such user (GETUSER's nil reply).
	Exists bool
	// Flags are GETUSER's flags ("on" or "off", "nopass", ...).
	Flags []string
	// Commands are the command rules of the user's root permissions and of
	// each of its selectors, each as GETUSER describes them: "+@all
	// -@dangerous", "-@all +get +@admin" (Redis 7 starts every description
	// with +@all or -@all).
	Commands []string
}

// Permission is the outcome of an ACL check of HOTKEYS.
type Permission uint8

const (
	// Allowed: Redis 8.6 would run the subcommand for this connection.
	Allowed Permission = iota
	// NoAuth: the connection has not authenticated and the default user
	// needs a password (or is off): "-NOAUTH Authentication required."
	NoAuth
	// NoPerm: the user's command rules do not allow the subcommand.
	NoPerm
)

// Check decides what Redis 8.6 would do with sub for a connection of user
// u. fresh means the connection never authenticated, so u is the default
// user and the connection is authenticated only if that user is on and
// needs no password (judged on u as it is now; Redis judges a connection
// opened while the default user needed no password as authenticated).
//
// The command rules are evaluated as Redis applies them, left to right:
// +@all/allcommands and -@all/nocommands set everything, +@cat and -@cat
// set the commands of a category (HOTKEYS START/STOP/GET/RESET are in
// @admin, @slow and @dangerous; HELP in @slow), +hotkeys, +hotkeys|get and
// their - forms name it. A Redis older than 8.6 refuses rules that name
// HOTKEYS, so there only categories decide, and a user whose rules start
// with +@all may run commands Redis does not know yet, as Redis 8.6 would
// after loading the same rules. The root rules or any selector's may allow
// it (HOTKEYS has no keys or channels for a selector to restrict).
func Check(u UserACL, fresh bool, sub Sub) Permission {
	if fresh && (!hasFlag(u.Flags, "nopass") || hasFlag(u.Flags, "off")) {
		return NoAuth
	}
	if !u.Exists {
		return NoPerm
	}
	for _, rules := range u.Commands {
		if allows(rules, sub) {
			return Allowed
		}
	}
	return NoPerm
}

func allows(rules string, sub Sub) bool {
	ok := false
	cats := sub.Categories()
	for _, r := range strings.Fields(rules) {
		r = strings.ToLower(r)
		switch {
		case r == "allcommands" || r == "+@all":
			ok = true
		case r == "nocommands" || r == "-@all":
			ok = false
		case len(r) > 2 && r[1] == '@' && (r[0] == '+' || r[0] == '-'):
			for _, c := range cats {
				if r[2:] == c {
					ok = r[0] == '+'
				}
			}
		case len(r) > 1 && (r[0] == '+' || r[0] == '-'):
			if r[1:] == "hotkeys" || r[1:] == sub.FullName() {
				ok = r[0] == '+'
			}
		}
	}
	return ok
}

func hasFlag(flags []string, f string) bool {
	for _, x := range flags {
		if strings.EqualFold(x, f) {
			return true
		}
	}
	return false
}

// AppendDenied appends the error reply Redis 8.6 gives a refused command:
// "-NOAUTH Authentication required." or "-NOPERM User <user> has no
// permissions to run the 'hotkeys|<sub>' command" (acl.c
// getAclErrorMessage, ACL_DENIED_CMD). Nothing is appended for Allowed.
func AppendDenied(dst []byte, p Permission, user string, sub Sub) []byte {
	switch p {
	case NoAuth:
		return append(dst, "-NOAUTH Authentication required.\r\n"...)
	case NoPerm:
		return appendErr(dst, "NOPERM User "+user+" has no permissions to run the '"+sub.FullName()+"' command")
	}
	return dst
}
