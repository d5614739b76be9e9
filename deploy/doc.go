// Package deploy holds Cicada's deployment files, and tests that validate
// them on a machine without a container engine: the Dockerfile's build
// command run as a plain go build (dockerfile_test.go), the Kubernetes
// manifests decoded strictly with the k8s.io/api types and their wiring
// checked against Cicada's flags (kubernetes_test.go), and the compose file
// and Grafana dashboard parsed and checked against Cicada's metrics
// (compose_test.go).
//
//	kubernetes/  Kustomize base and overlays: Redis StatefulSet with Cicada
//	             as a sidecar
//	compose/     docker-compose for development: Redis, Cicada, Prometheus,
//	             Grafana with the dashboard provisioned
//	local/       run.sh: Cicada in front of a local redis-server (make run)
package deploy
