package upstream

import (
	"fmt"

	"github.com/cicada-proxy/cicada/hotkeys"
)

// parseGetUser reads the RESP2 reply of ACL GETUSER: a flat list of field
// names and values; "flags" a list of strings, "commands" a string,
// "selectors" a list of such flat lists.
func parseGetUser(v any) (hotkeys.UserACL, error) {
	u := hotkeys.UserACL{Exists: true}
	fields, ok := v.([]any)
	if !ok {
		return u, fmt.Errorf("upstream: ACL GETUSER: unexpected reply %T", v)
	}
	for i := 0; i+1 < len(fields); i += 2 {
		name, _ := fields[i].(string)
		switch name {
		case "flags":
			list, _ := fields[i+1].([]any)
			for _, f := range list {
				if s, ok := f.(string); ok {
					u.Flags = append(u.Flags, s)
				}
			}
		case "commands":
			if s, ok := fields[i+1].(string); ok {
				u.Commands = append(u.Commands, s)
			}
		case "selectors":
			sels, _ := fields[i+1].([]any)
			for _, sel := range sels {
				kv, _ := sel.([]any)
				for j := 0; j+1 < len(kv); j += 2 {
					if k, _ := kv[j].(string); k == "commands" {
						if s, ok := kv[j+1].(string); ok {
							u.Commands = append(u.Commands, s)
						}
					}
				}
			}
		}
	}
	return u, nil
}
