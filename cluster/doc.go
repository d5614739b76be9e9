// Package cluster is what Cicada knows of Redis Cluster: the hash slot of a
// key (slot.go), which slots the node behind a sidecar answers for
// (view.go, read from CLUSTER NODES by the keyspace subscriber), and the
// rewriting of node addresses in CLUSTER SLOTS, CLUSTER SHARDS, CLUSTER
// NODES and -MOVED/-ASK replies for deployments whose Redis cannot announce
// the sidecars' ports itself (addrmap.go, rewrite.go).
package cluster
