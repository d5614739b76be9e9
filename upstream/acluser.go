package upstream

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/cicada-proxy/cicada/hotkeys"
)

// ACLUser reads ACL GETUSER name from Redis with Cicada's credentials, on
// a connection of its own (CLIENT SETNAME cicada-acl) opened for this one
// request and closed after it: the proxy asks only when it answers a
// HOTKEYS command whose user it has not checked since the last ACL change.
// Cicada's upstream user needs ACL GETUSER for it. Safe from any
// goroutine; it blocks for one connection and round trip (bounded by ctx).
func (s *Subscriber) ACLUser(ctx context.Context, name string) (hotkeys.UserACL, error) {
	opts := s.options("cicada-acl")
	opts.ReadTimeout, opts.WriteTimeout = s.cfg.DialTimeout, s.cfg.DialTimeout
	c := redis.NewClient(opts)
	defer c.Close()
	v, err := c.Do(ctx, "ACL", "GETUSER", name).Result()
	if err == redis.Nil {
		return hotkeys.UserACL{}, nil
	}
	if err != nil {
		return hotkeys.UserACL{}, fmt.Errorf("upstream: ACL GETUSER: %w", err)
	}
	return parseGetUser(v)
}

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
