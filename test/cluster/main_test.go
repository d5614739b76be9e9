// Package cluster holds the end-to-end tests of Cicada in front of a Redis
// Cluster (test/clustertest): clients see sidecars only, whatever the
// cluster does (load_test.go), and what a sidecar answers is what its
// Redis answers, addresses aside (transparency_test.go).
package cluster

import (
	"testing"

	"github.com/cicada-proxy/cicada/test/cicadatest"
)

func TestMain(m *testing.M) { cicadatest.VerifyNoLeaks(m) }
