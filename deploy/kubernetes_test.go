package deploy

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// manifests is one kustomization's output, each object decoded strictly
// (an unknown or duplicated field fails the test).
type manifests struct {
	statefulSets []appsv1.StatefulSet
	services     []corev1.Service
	configMaps   []corev1.ConfigMap
	podMonitors  []monitoringv1.PodMonitor
	yaml         []string // every object as built, in output order
}

// kustomize builds dir (relative to deploy/kubernetes, or absolute) as
// kubectl apply -k would and decodes every object with its k8s.io/api (or
// Prometheus Operator) type.
func kustomize(t *testing.T, dir string) manifests {
	t.Helper()
	path := dir
	if !filepath.IsAbs(dir) {
		path = filepath.Join("kubernetes", dir)
	}
	res, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), path)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	var m manifests
	for _, r := range res.Resources() {
		b, err := r.AsYAML()
		if err != nil {
			t.Fatal(err)
		}
		m.yaml = append(m.yaml, string(b))
		var decodeErr error
		switch kind := r.GetKind(); kind {
		case "StatefulSet":
			var o appsv1.StatefulSet
			decodeErr = yaml.UnmarshalStrict(b, &o)
			m.statefulSets = append(m.statefulSets, o)
		case "Service":
			var o corev1.Service
			decodeErr = yaml.UnmarshalStrict(b, &o)
			m.services = append(m.services, o)
		case "ConfigMap":
			var o corev1.ConfigMap
			decodeErr = yaml.UnmarshalStrict(b, &o)
			m.configMaps = append(m.configMaps, o)
		case "PodMonitor":
			var o monitoringv1.PodMonitor
			decodeErr = yaml.UnmarshalStrict(b, &o)
			m.podMonitors = append(m.podMonitors, o)
		default:
			t.Errorf("%s: unexpected kind %s", dir, kind)
		}
		if decodeErr != nil {
			t.Errorf("%s: %s %s: %v", dir, r.GetKind(), r.GetName(), decodeErr)
		}
	}
	if len(m.statefulSets) != 1 {
		t.Fatalf("%s: %d StatefulSets, want 1", dir, len(m.statefulSets))
	}
	return m
}

// TestKubernetesManifests builds the base and each overlay and checks the
// wiring: Cicada's settings (from the ConfigMap and the environment, checked
// by cicada --check-config) against its ports, probes, Services, scrape
// configuration and Secret, and Redis reachable only through Cicada.
func TestKubernetesManifests(t *testing.T) {
	for _, tt := range []struct {
		dir         string
		native      bool // Cicada is an init container with restartPolicy Always
		podMonitor  bool // a PodMonitor instead of scrape annotations
		annotations bool
	}{
		{"base", true, false, true},
		{"overlays/two-container", false, false, true},
		{"overlays/prometheus-operator", true, true, false},
	} {
		t.Run(tt.dir, func(t *testing.T) {
			m := kustomize(t, tt.dir)
			sts := m.statefulSets[0]
			pod := sts.Spec.Template
			cicada, native := findContainer(t, pod.Spec, "cicada")
			redis, redisNative := findContainer(t, pod.Spec, "redis")
			if native != tt.native || redisNative {
				t.Errorf("cicada is an init container: %v, want %v; redis: %v, want false", native, tt.native, redisNative)
			}
			if always := cicada.RestartPolicy != nil && *cicada.RestartPolicy == corev1.ContainerRestartPolicyAlways; always != tt.native {
				t.Errorf("cicada restartPolicy Always: %v, want %v", always, tt.native)
			}
			if !tt.native && len(pod.Spec.InitContainers) != 0 {
				t.Errorf("%d init containers left", len(pod.Spec.InitContainers))
			}
			if cicada.Image != "ghcr.io/cicada-proxy/cicada:latest" {
				t.Errorf("cicada image %q", cicada.Image)
			}

			settings := checkConfig(t, m, pod.Spec, cicada)
			listen, admin := port(t, settings["listen"]), port(t, settings["admin"])
			if got := namedPort(t, cicada, "resp"); got != listen {
				t.Errorf("container port resp %d, want --listen's %d", got, listen)
			}
			if got := namedPort(t, cicada, "admin"); got != admin {
				t.Errorf("container port admin %d, want --admin's %d", got, admin)
			}
			checkProbe(t, cicada, "readiness", cicada.ReadinessProbe, "/readyz", admin)
			checkProbe(t, cicada, "liveness", cicada.LivenessProbe, "/healthz", admin)
			if cicada.Resources.Limits.Cpu().IsZero() {
				t.Error("cicada has no CPU limit for CICADA_LOOPS to follow")
			}

			// Redis: on the pod's loopback, at the port Cicada's upstream names.
			conf := redisConf(t, m, pod.Spec, redis)
			if settings["upstream"] != "127.0.0.1:"+conf["port"] {
				t.Errorf("cicada upstream %s, want 127.0.0.1:%s (redis.conf port)", settings["upstream"], conf["port"])
			}
			if !strings.HasPrefix(conf["bind"], "127.0.0.1") || strings.Contains(conf["bind"], "0.0.0.0") || strings.Contains(conf["bind"], "*") {
				t.Errorf("redis.conf bind %q: Redis must listen on loopback only", conf["bind"])
			}
			if len(redis.Ports) != 0 {
				t.Errorf("the redis container declares ports %v: Redis is reached only through Cicada", redis.Ports)
			}
			checkPassword(t, pod.Spec, cicada, redis, settings["upstream-password-file"])

			// Services lead to Cicada only.
			headless := false
			for _, svc := range m.services {
				if !selects(svc.Spec.Selector, pod.Labels) {
					t.Errorf("Service %s selector %v does not select the pod (labels %v)", svc.Name, svc.Spec.Selector, pod.Labels)
				}
				for _, p := range svc.Spec.Ports {
					if p.TargetPort.Type != intstr.Int {
						// Services resolve the named ports of init containers
						// (a native sidecar) only from Kubernetes 1.33.
						t.Errorf("Service %s port %s targets the name %q: use the number", svc.Name, p.Name, p.TargetPort.StrVal)
					}
					if target := targetPort(t, cicada, p.TargetPort); target != listen && target != admin {
						t.Errorf("Service %s port %s targets %d, not Cicada's %d or %d", svc.Name, p.Name, target, listen, admin)
					}
				}
				if svc.Name == sts.Spec.ServiceName && svc.Spec.ClusterIP == corev1.ClusterIPNone {
					headless = true
				}
			}
			if !headless {
				t.Errorf("no headless Service named %q (the StatefulSet's serviceName)", sts.Spec.ServiceName)
			}

			// Scraping: annotations or a PodMonitor, not both.
			a := pod.Annotations
			if has := a["prometheus.io/scrape"] == "true"; has != tt.annotations {
				t.Errorf("scrape annotations: %v, want %v", has, tt.annotations)
			}
			if tt.annotations && (a["prometheus.io/port"] != strconv.Itoa(admin) || a["prometheus.io/path"] != "/metrics") {
				t.Errorf("scrape annotations %v, want port %d path /metrics", a, admin)
			}
			if (len(m.podMonitors) == 1) != tt.podMonitor {
				t.Fatalf("%d PodMonitors, want one: %v", len(m.podMonitors), tt.podMonitor)
			}
			for _, pm := range m.podMonitors {
				if !selects(pm.Spec.Selector.MatchLabels, pod.Labels) {
					t.Errorf("PodMonitor selector %v does not select the pod", pm.Spec.Selector.MatchLabels)
				}
				for _, ep := range pm.Spec.PodMetricsEndpoints {
					if ep.PortNumber == nil || int(*ep.PortNumber) != admin || ep.Port != nil || ep.Path != "/metrics" {
						t.Errorf("PodMonitor endpoint %+v, want portNumber %d (the admin port's name is on an init container) and path /metrics", ep, admin)
					}
				}
			}
		})
	}
}

// TestKubernetesOverlayImage writes the overlay that docs/deploy.md's
// "Kubernetes" section has users write, with the file content taken from
// there, on top of the base and of each overlay, and checks that the build
// gives Cicada the user's image and names the base's image nowhere. (An
// images: entry keyed "cicada", as kustomize edit set image cicada=...
// writes, matches nothing: the base has already renamed the image.)
func TestKubernetesOverlayImage(t *testing.T) {
	const (
		image = "registry.example/cicada:v1"
		base  = "../deploy/kubernetes/base"
	)
	section := deployDocSection(t, "Kubernetes")
	dir, overlay := deployDocOverlay(t, section)
	if !strings.Contains(section, "\ndocker push "+image+"\n") {
		t.Errorf("docs/deploy.md: no line docker push %s, want the image the overlay sets pushed", image)
	}
	if n := strings.Count(overlay, base); n != 1 {
		t.Fatalf("docs/deploy.md's overlay names %s %d times, want once (the path users change to start from an overlay)", base, n)
	}
	deployDir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for _, from := range []string{"base", "overlays/two-container", "overlays/prometheus-operator"} {
		t.Run(from, func(t *testing.T) {
			// The documented layout: the overlay directory next to deploy/.
			root := t.TempDir()
			if err := os.Symlink(deployDir, filepath.Join(root, "deploy")); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(filepath.Join(root, dir), 0o755); err != nil {
				t.Fatal(err)
			}
			k := strings.Replace(overlay, base, "../deploy/kubernetes/"+from, 1)
			if err := os.WriteFile(filepath.Join(root, dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
				t.Fatal(err)
			}
			m := kustomize(t, filepath.Join(root, dir))
			spec := m.statefulSets[0].Spec.Template.Spec
			if cicada, _ := findContainer(t, spec, "cicada"); cicada.Image != image {
				t.Errorf("cicada image: got %q, want %q", cicada.Image, image)
			}
			if redis, _ := findContainer(t, spec, "redis"); redis.Image != "redis:7.0.15" {
				t.Errorf("redis image: got %q, want %q (the overlay sets Cicada's only)", redis.Image, "redis:7.0.15")
			}
			for _, y := range m.yaml {
				for _, line := range strings.Split(y, "\n") {
					if strings.Contains(line, "ghcr.io/cicada-proxy/cicada") {
						t.Errorf("output names the base's image: got %q, want no ghcr.io/cicada-proxy/cicada", strings.TrimSpace(line))
					}
				}
			}
		})
	}
}

// deployDocSection returns the body of the docs/deploy.md section headed
// "## title" (up to the next heading of level 1 or 2).
func deployDocSection(t *testing.T, title string) string {
	t.Helper()
	b, err := os.ReadFile("../docs/deploy.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?ms)^## ` + regexp.QuoteMeta(title) + `\n(.*?)(^##? |\z)`).FindStringSubmatch(string(b))
	if m == nil {
		t.Fatalf("docs/deploy.md: no section ## %s", title)
	}
	return m[1]
}

// deployDocOverlay returns the directory and the kustomization.yaml that a
// docs/deploy.md section has users write with a heredoc
// (cat > DIR/kustomization.yaml <<'EOF' ... EOF), after checking that the
// section then applies that directory with kubectl apply -k and runs no
// standalone kustomize, which kubectl users lack.
func deployDocOverlay(t *testing.T, section string) (dir, kustomization string) {
	t.Helper()
	all := regexp.MustCompile(`(?m)^cat > ([\w.-]+)/kustomization\.yaml <<'EOF'\n((?s:.*?)\n)EOF$`).FindAllStringSubmatch(section, -1)
	if len(all) != 1 {
		t.Fatalf("docs/deploy.md: got %d heredocs cat > DIR/kustomization.yaml <<'EOF', want 1", len(all))
	}
	dir, kustomization = all[0][1], all[0][2]
	if !regexp.MustCompile(`(?m)^kubectl apply -k ` + regexp.QuoteMeta(dir) + `$`).MatchString(section) {
		t.Errorf("docs/deploy.md: no line kubectl apply -k %s, want the overlay applied", dir)
	}
	for _, line := range strings.Split(section, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "kustomize ") {
			t.Errorf("docs/deploy.md runs the standalone kustomize: got %q, want kubectl only", line)
		}
	}
	return dir, kustomization
}

// findContainer returns the named container and whether it is an init
// container.
func findContainer(t *testing.T, spec corev1.PodSpec, name string) (corev1.Container, bool) {
	t.Helper()
	for _, c := range spec.InitContainers {
		if c.Name == name {
			return c, true
		}
	}
	for _, c := range spec.Containers {
		if c.Name == name {
			return c, false
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}, false
}

// mountedFile returns the content of the file at path in container c, if a
// ConfigMap volume provides it (ok false otherwise), and the volume.
func mountedFile(t *testing.T, m manifests, spec corev1.PodSpec, c corev1.Container, path string) (string, corev1.Volume, bool) {
	t.Helper()
	for _, vm := range c.VolumeMounts {
		rel, err := filepath.Rel(vm.MountPath, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != vm.Name {
				continue
			}
			if v.ConfigMap == nil {
				return "", v, false
			}
			key := rel
			for _, it := range v.ConfigMap.Items {
				if it.Path == rel {
					key = it.Key
				}
			}
			for _, cm := range m.configMaps {
				if cm.Name == v.ConfigMap.Name {
					data, ok := cm.Data[key]
					if !ok {
						t.Fatalf("ConfigMap %s has no key %s for %s", cm.Name, key, path)
					}
					return data, v, true
				}
			}
			t.Fatalf("volume %s names ConfigMap %s, which the build lacks", v.Name, v.ConfigMap.Name)
		}
		t.Fatalf("volumeMount %s has no volume", vm.Name)
	}
	return "", corev1.Volume{}, false
}

// checkConfig runs cicada --check-config with the container's args, its
// environment (a resourceFieldRef taken as 2) and its config file from the
// ConfigMap, the password file replaced by a test file, and returns the
// settings it printed.
func checkConfig(t *testing.T, m manifests, spec corev1.PodSpec, c corev1.Container) map[string]string {
	t.Helper()
	args := slices.Clone(c.Args)
	dir := t.TempDir()
	var env []string
	for i, a := range args {
		if a != "--config" || i+1 == len(args) {
			continue
		}
		data, _, ok := mountedFile(t, m, spec, c, args[i+1])
		if !ok {
			t.Fatalf("--config %s is not a mounted ConfigMap file", args[i+1])
		}
		// The password file is checked by checkPassword; here it must only
		// exist.
		pw := filepath.Join(dir, "password")
		if err := os.WriteFile(pw, []byte("test\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		data = regexp.MustCompile(`(?m)^upstream-password-file: .*$`).ReplaceAllString(data, "upstream-password-file: "+pw)
		args[i+1] = filepath.Join(dir, "cicada.yaml")
		if err := os.WriteFile(args[i+1], []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	for _, e := range c.Env {
		name, ok := strings.CutPrefix(e.Name, "CICADA_")
		if !ok {
			continue
		}
		flag := "--" + strings.ReplaceAll(strings.ToLower(name), "_", "-")
		if !strings.Contains(cicadaHelp(t), "      "+flag+" ") && flag != "--upstream-password" {
			t.Errorf("env %s names no Cicada setting (%s)", e.Name, flag)
		}
		v := e.Value
		if e.ValueFrom != nil && e.ValueFrom.ResourceFieldRef != nil {
			v = "2"
		}
		env = append(env, e.Name+"="+v)
	}
	cmd := exec.Command(cicadaBinary(t), append(args, "--check-config")...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cicada %v --check-config with %v: %v\n%s", args, env, err, out)
	}
	settings := map[string]string{}
	for _, kv := range strings.Fields(string(out)) {
		k, v, _ := strings.Cut(kv, "=")
		settings[k] = v
	}
	if pw, ok := strings.CutPrefix(settings["upstream-password-file"], dir); ok && pw == "/password" {
		settings["upstream-password-file"] = configValue(t, m, spec, c, "upstream-password-file")
	}
	return settings
}

// configValue returns one key's value in the container's --config file.
func configValue(t *testing.T, m manifests, spec corev1.PodSpec, c corev1.Container, key string) string {
	t.Helper()
	i := slices.Index(c.Args, "--config")
	data, _, _ := mountedFile(t, m, spec, c, c.Args[i+1])
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(data), &cfg); err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(cfg[key])
}

// redisConf returns the directives of the redis.conf the redis container
// is started with (its first argument after redis-server).
func redisConf(t *testing.T, m manifests, spec corev1.PodSpec, c corev1.Container) map[string]string {
	t.Helper()
	if len(c.Args) < 2 || c.Args[0] != "redis-server" {
		t.Fatalf("redis args %v, want redis-server <config file> ...", c.Args)
	}
	data, _, ok := mountedFile(t, m, spec, c, c.Args[1])
	if !ok {
		t.Fatalf("%s is not a mounted ConfigMap file", c.Args[1])
	}
	conf := map[string]string{"port": "6379"}
	for _, line := range strings.Split(data, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' {
			continue
		}
		k, v, _ := strings.Cut(line, " ")
		conf[k] = v
	}
	return conf
}

// checkPassword: Cicada's password file is the key of the Secret that
// Redis's --requirepass comes from.
func checkPassword(t *testing.T, spec corev1.PodSpec, cicada, redis corev1.Container, file string) {
	t.Helper()
	var secret, key string
	for _, e := range redis.Env {
		if e.Name == "REDIS_PASSWORD" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			secret, key = e.ValueFrom.SecretKeyRef.Name, e.ValueFrom.SecretKeyRef.Key
		}
	}
	if i := slices.Index(redis.Args, "--requirepass"); i < 0 || i+1 == len(redis.Args) || redis.Args[i+1] != "$(REDIS_PASSWORD)" || secret == "" {
		t.Fatalf("redis args %v, env %v: want --requirepass $(REDIS_PASSWORD) from a Secret", redis.Args, redis.Env)
	}
	for _, vm := range cicada.VolumeMounts {
		if filepath.Dir(file) != filepath.Clean(vm.MountPath) {
			continue
		}
		for _, v := range spec.Volumes {
			if v.Name != vm.Name || v.Secret == nil {
				continue
			}
			for _, it := range v.Secret.Items {
				if it.Path == filepath.Base(file) && it.Key == key && v.Secret.SecretName == secret {
					return
				}
			}
		}
	}
	t.Errorf("cicada's upstream-password-file %s is not key %s of Secret %s (Redis's password)", file, key, secret)
}

func checkProbe(t *testing.T, c corev1.Container, kind string, p *corev1.Probe, path string, admin int) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("cicada has no HTTP %s probe", kind)
		return
	}
	if p.HTTPGet.Path != path || targetPort(t, c, p.HTTPGet.Port) != admin {
		t.Errorf("%s probe GET %s on port %s, want %s on %d", kind, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, admin)
	}
}

// targetPort resolves a port number or a name of c's ports.
func targetPort(t *testing.T, c corev1.Container, p intstr.IntOrString) int {
	t.Helper()
	if p.Type == intstr.Int {
		return p.IntValue()
	}
	return namedPort(t, c, p.StrVal)
}

func namedPort(t *testing.T, c corev1.Container, name string) int {
	t.Helper()
	for _, p := range c.Ports {
		if p.Name == name {
			return int(p.ContainerPort)
		}
	}
	t.Errorf("container %s has no port named %q", c.Name, name)
	return -1
}

func port(t *testing.T, hostPort string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(hostPort)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("address %q has no port", hostPort)
	}
	return n
}

// selects reports whether every selector label is among labels.
func selects(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}
