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
// Redis older than 8.6 does not know HOTKEYS, and 7.0 does not even keep a
// user's category rules: ACL GETUSER describes the resulting set of
// commands, with a category only when all its commands are in it
// ("-@all +@slow -@admin" reads back as "-@all +@read ... +config
// -config|get ..."). So the rules are evaluated, left to right as Redis
// applies them, for stand-ins: commands that exist since 7.0 with exactly
// the subcommand's categories (standIns). The subcommand is allowed when
// every stand-in is: category rules give them the verdict HOTKEYS would
// get; a rule naming one stand-in alone (-config|get) refuses HOTKEYS too,
// which errs on the side of refusing. Rules naming HOTKEYS itself (a Redis
// 8.6 upstream) apply to every stand-in. The root rules or any selector's
// may allow it (HOTKEYS has no keys or channels for a selector to
// restrict).
func Check(u UserACL, fresh bool, sub Sub) Permission {
	if fresh && (!hasFlag(u.Flags, "nopass") || hasFlag(u.Flags, "off")) {
		return NoAuth
	}
	if !u.Exists {
		return NoPerm
	}
	for _, rules := range u.Commands {
		if allows(strings.Fields(strings.ToLower(rules)), sub) {
			return Allowed
		}
	}
	return NoPerm
}

// standIns are, per set of categories, Redis 7.0 commands with exactly
// those categories (COMMAND INFO on redis-server 7.0.15): START, STOP, GET
// and RESET are @admin @slow @dangerous; HELP is @slow.
var standIns = map[bool][]string{
	false: {"config|get", "acl|getuser", "slowlog|get", "latency|latest"},
	true:  {"config|help", "acl|help", "slowlog|help", "latency|help"},
}

func allows(rules []string, sub Sub) bool {
	cats := sub.Categories()
	for _, cmd := range standIns[sub == SubHelp] {
		parent, _, _ := strings.Cut(cmd, "|")
		ok := false
		for _, r := range rules {
			switch {
			case r == "allcommands" || r == "+@all":
				ok = true
			case r == "nocommands" || r == "-@all":
				ok = false
			case len(r) < 2 || (r[0] != '+' && r[0] != '-'):
			case r[1] == '@':
				for _, c := range cats {
					if r[2:] == c {
						ok = r[0] == '+'
					}
				}
			default:
				if n := r[1:]; n == cmd || n == parent || n == "hotkeys" || n == sub.FullName() {
					ok = r[0] == '+'
				}
			}
		}
		if !ok {
			return false
		}
	}
	return true
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
