package deploy

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"sigs.k8s.io/yaml"
)

// loadCompose loads deploy/compose/docker-compose.yml as docker compose
// would (schema validation, interpolation, relative paths resolved).
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join("compose", "docker-compose.yml")},
		cli.WithName("cicada"), cli.WithWorkingDirectory("compose"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return p
}

// TestCompose checks the compose file's wiring: Cicada built from this
// repository's Dockerfile with settings cicada --check-config accepts,
// Redis reachable only through Cicada, Prometheus scraping Cicada's admin
// port, Grafana provisioned with the Prometheus data source and the
// dashboard.
func TestCompose(t *testing.T) {
	p := loadCompose(t)
	svc := func(name string) types.ServiceConfig {
		s, err := p.GetService(name)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	redis, cicada, prom, grafana := svc("redis"), svc("cicada"), svc("prometheus"), svc("grafana")
	if len(redis.Ports) != 0 {
		t.Errorf("redis publishes %v: clients reach it through Cicada", redis.Ports)
	}

	// Cicada: built from the repository root, settings valid.
	root, _ := filepath.Abs(repoRoot)
	if cicada.Build == nil || cicada.Build.Context != root || cicada.Build.Dockerfile != "Dockerfile" {
		t.Errorf("cicada build %+v, want the repository root's Dockerfile", cicada.Build)
	}
	var env []string
	for k, v := range cicada.Environment {
		if !strings.HasPrefix(k, "CICADA_") {
			continue
		}
		flag := "--" + strings.ReplaceAll(strings.ToLower(strings.TrimPrefix(k, "CICADA_")), "_", "-")
		if !strings.Contains(cicadaHelp(t), "      "+flag+" ") {
			t.Errorf("environment %s names no Cicada setting", k)
		}
		env = append(env, k+"="+*v)
	}
	args := slices.Clone([]string(cicada.Command))
	for i := range args {
		if args[i] == "--config" && i+1 < len(args) {
			args[i+1] = mountSource(t, cicada, args[i+1]) // the host file the container reads
		}
	}
	cmd := exec.Command(cicadaBinary(t), append(args, "--check-config")...)
	cmd.Env = env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("cicada %v --check-config: %v\n%s", cicada.Command, err, out)
	}
	settings := map[string]string{}
	for _, kv := range strings.Fields(string(out)) {
		k, v, _ := strings.Cut(kv, "=")
		settings[k] = v
	}
	if settings["upstream"] != "redis:6379" {
		t.Errorf("cicada upstream %q, want the redis service (redis:6379)", settings["upstream"])
	}
	listen, admin, local := port(t, settings["listen"]), port(t, settings["admin"]), port(t, settings["local-admin"])
	published := map[uint32]bool{}
	for _, svc := range []types.ServiceConfig{cicada, prom, grafana} {
		for _, pc := range svc.Ports {
			if pc.HostIP != "127.0.0.1" {
				t.Errorf("%s publishes port %d on %q: the stack has no passwords, publish on 127.0.0.1", svc.Name, pc.Target, pc.HostIP)
			}
		}
	}
	for _, pc := range cicada.Ports {
		published[pc.Target] = true
	}
	if !published[uint32(listen)] || !published[uint32(admin)] || !published[uint32(local)] {
		t.Errorf("cicada publishes %v, want its listen (%d), admin (%d) and local-admin (%d) ports", cicada.Ports, listen, admin, local)
	}

	// Prometheus scrapes cicada's admin port.
	var promCfg struct {
		Global        map[string]string `json:"global"`
		ScrapeConfigs []struct {
			JobName       string `json:"job_name"`
			StaticConfigs []struct {
				Targets []string `json:"targets"`
			} `json:"static_configs"`
		} `json:"scrape_configs"`
	}
	readYAML(t, mountSource(t, prom, "/etc/prometheus/prometheus.yml"), &promCfg)
	scraped := false
	for _, sc := range promCfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			scraped = scraped || slices.Contains(st.Targets, "cicada:"+strconv.Itoa(admin))
		}
	}
	if !scraped {
		t.Errorf("prometheus.yml does not scrape cicada:%d: %+v", admin, promCfg.ScrapeConfigs)
	}

	// Grafana: data source, dashboard provider, dashboard file.
	prov := mountSource(t, grafana, "/etc/grafana/provisioning")
	var ds struct {
		APIVersion  int `json:"apiVersion"`
		Datasources []struct {
			Name, UID, Type, Access, URL string
			IsDefault                    bool `json:"isDefault"`
		} `json:"datasources"`
	}
	readYAML(t, filepath.Join(prov, "datasources", "prometheus.yml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("Grafana data sources %+v, want prometheus at http://prometheus:9090", ds.Datasources)
	}
	var dp struct {
		APIVersion int `json:"apiVersion"`
		Providers  []struct {
			Name, Folder, Type string
			DisableDeletion    bool `json:"disableDeletion"`
			Options            struct {
				Path string `json:"path"`
			} `json:"options"`
		} `json:"providers"`
	}
	readYAML(t, filepath.Join(prov, "dashboards", "cicada.yml"), &dp)
	if len(dp.Providers) != 1 {
		t.Fatalf("%d dashboard providers, want 1", len(dp.Providers))
	}
	dashboards := mountSource(t, grafana, dp.Providers[0].Options.Path)
	if _, err := os.Stat(filepath.Join(dashboards, "cicada.json")); err != nil {
		t.Errorf("the dashboards mount has no cicada.json: %v", err)
	}
	if home := grafana.Environment["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home == nil || *home != filepath.Join(dp.Providers[0].Options.Path, "cicada.json") {
		t.Errorf("Grafana's home dashboard %v is not the provisioned cicada.json", home)
	}
}

// mountSource returns the host path a service mounts at target, which
// must exist.
func mountSource(t *testing.T, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Target == target {
			if _, err := os.Stat(v.Source); err != nil {
				t.Fatalf("%s mounts missing %s", s.Name, v.Source)
			}
			return v.Source
		}
	}
	t.Fatalf("%s mounts nothing at %s", s.Name, target)
	return ""
}

// readYAML decodes a YAML file strictly (unknown fields fail).
func readYAML(t *testing.T, path string, v any) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, v); err != nil {
		t.Errorf("%s: %v", path, err)
	}
}

// TestDashboard checks the Grafana dashboard: valid JSON, every panel on
// the data source variable, every query naming only metrics a running
// Cicada exports (with their labels), panels not overlapping.
func TestDashboard(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("grafana", "cicada.json"))
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		UID    string `json:"uid"`
		Title  string `json:"title"`
		Panels []struct {
			ID         int    `json:"id"`
			Title      string `json:"title"`
			Type       string `json:"type"`
			Datasource struct {
				UID string `json:"uid"`
			} `json:"datasource"`
			GridPos struct{ X, Y, W, H int } `json:"gridPos"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatal(err)
	}
	if dash.UID == "" || len(dash.Panels) == 0 {
		t.Fatalf("dashboard uid %q with %d panels", dash.UID, len(dash.Panels))
	}
	exported := scrapeMetrics(t)
	metric := regexp.MustCompile(`\b(cicada_[a-z_]+)(\{[^}]*\})?`)
	by := regexp.MustCompile(`by \(([a-z_, ]+)\)`)
	ids := map[int]bool{}
	cells := map[[2]int]string{}
	for _, p := range dash.Panels {
		if ids[p.ID] {
			t.Errorf("panel id %d twice", p.ID)
		}
		ids[p.ID] = true
		if p.Datasource.UID != "${datasource}" {
			t.Errorf("panel %q: data source %q, want the ${datasource} variable", p.Title, p.Datasource.UID)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, q := range p.Targets {
			names := metric.FindAllStringSubmatch(q.Expr, -1)
			if len(names) == 0 {
				t.Errorf("panel %q: query %q names no Cicada metric", p.Title, q.Expr)
			}
			for _, m := range names {
				labels, ok := exported[m[1]]
				if !ok {
					t.Errorf("panel %q: Cicada exports no %s", p.Title, m[1])
					continue
				}
				for _, g := range by.FindAllStringSubmatch(q.Expr, -1) {
					for _, l := range strings.Split(g[1], ",") {
						if l = strings.TrimSpace(l); l != "le" && !labels[l] {
							t.Errorf("panel %q: %s has no label %q", p.Title, m[1], l)
						}
					}
				}
			}
		}
		for x := p.GridPos.X; x < p.GridPos.X+p.GridPos.W; x++ {
			for y := p.GridPos.Y; y < p.GridPos.Y+p.GridPos.H; y++ {
				if other, ok := cells[[2]int{x, y}]; ok {
					t.Fatalf("panels %q and %q overlap", other, p.Title)
				}
				cells[[2]int{x, y}] = p.Title
			}
		}
		if p.GridPos.X+p.GridPos.W > 24 {
			t.Errorf("panel %q is wider than the 24-column grid", p.Title)
		}
	}
}

// scrapeMetrics starts Cicada (its upstream refuses connections: metrics
// are served anyway) and returns the series names of its /metrics with
// their label names; a histogram's _bucket, _sum and _count count as its
// name too.
func scrapeMetrics(t *testing.T) map[string]map[string]bool {
	t.Helper()
	free := func() string {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		return l.Addr().String()
	}
	admin := free()
	cmd := exec.Command(cicadaBinary(t), "--listen", free(), "--admin", admin, "--local-admin", "", "--upstream", free(), "--log-level", "error")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	var body []byte
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get("http://" + admin + "/metrics")
		if err == nil {
			body, err = io.ReadAll(resp.Body)
			resp.Body.Close()
			if err == nil && resp.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no /metrics from Cicada: %v", err)
		}
	}
	series := map[string]map[string]bool{}
	line := regexp.MustCompile(`^([a-z_]+)(?:\{([^}]*)\})? `)
	label := regexp.MustCompile(`([a-z_]+)="`)
	for _, l := range strings.Split(string(body), "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		names := []string{m[1]}
		for _, suffix := range []string{"_bucket", "_sum", "_count"} {
			if base, ok := strings.CutSuffix(m[1], suffix); ok {
				names = append(names, base)
			}
		}
		for _, n := range names {
			if series[n] == nil {
				series[n] = map[string]bool{}
			}
			for _, lm := range label.FindAllStringSubmatch(m[2], -1) {
				series[n][lm[1]] = true
			}
		}
	}
	return series
}
