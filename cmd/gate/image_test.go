package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// repoRoot is the repository, seen from this package's directory, where
// go test runs.
const repoRoot = "../.."

// composeFile is the part of docker-compose.yml the checks read.
type composeFile struct {
	Services map[string]struct {
		Image string    `yaml:"image"`
		Build yaml.Node `yaml:"build"`
		Ports []string  `yaml:"ports"`
		// Environment is the gate's settings, with ${VAR} from .env.
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
	} `yaml:"services"`
	Volumes map[string]any `yaml:"volumes"`
}

func readCompose(t *testing.T) composeFile {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "docker-compose.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var c composeFile
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	if len(c.Services) == 0 {
		t.Fatal("docker-compose.yml has no services")
	}
	return c
}

// bindMounts returns the compose file's bind mounts as target: source in
// the repository; named volumes are checked against the top-level list.
func bindMounts(t *testing.T, c composeFile) map[string]string {
	t.Helper()
	binds := map[string]string{}
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			src, target, _ := strings.Cut(v, ":")
			target, _, _ = strings.Cut(target, ":")
			if !strings.HasPrefix(src, ".") && !strings.HasPrefix(src, "/") {
				if _, ok := c.Volumes[src]; !ok {
					t.Errorf("service %s mounts volume %q, not declared under volumes", name, src)
				}
				continue
			}
			if _, err := os.Stat(filepath.Join(repoRoot, src)); err != nil {
				t.Errorf("service %s mounts %s, which is not in the repository: %v", name, src, err)
			}
			binds[target] = filepath.Clean(src)
		}
	}
	return binds
}

// TestComposeFile: docker-compose.yml builds the gate from the Dockerfile,
// mounts only files the repository has, publishes every port on loopback
// only, and the Prometheus and Grafana configuration it mounts point at
// each other, at the gate's port and at the files where they are mounted.
func TestComposeFile(t *testing.T) {
	c := readCompose(t)
	for name, s := range c.Services {
		for _, p := range s.Ports {
			host, rest, ok := strings.Cut(p, ":")
			if !ok || net.ParseIP(host) == nil || !net.ParseIP(host).IsLoopback() || !strings.Contains(rest, ":") {
				t.Errorf("service %s publishes %q, want 127.0.0.1:host:container", name, p)
			}
		}
		if s.Build.Kind == 0 {
			continue
		}
		context, dockerfile := s.Build.Value, "Dockerfile"
		if s.Build.Kind == yaml.MappingNode {
			var b struct{ Context, Dockerfile string }
			if err := s.Build.Decode(&b); err != nil {
				t.Fatal(err)
			}
			context, dockerfile = b.Context, cmp.Or(b.Dockerfile, dockerfile)
		}
		if _, err := os.Stat(filepath.Join(repoRoot, context, dockerfile)); err != nil {
			t.Errorf("service %s builds from %s in %q: %v", name, dockerfile, context, err)
		}
	}
	if !slices.Contains(serviceNames(c), "gate") || c.Services["gate"].Build.Kind == 0 {
		t.Error("docker-compose.yml has no gate service built from the repository")
	}
	binds := bindMounts(t, c)

	var prom struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	readYAML(t, binds["/etc/prometheus/prometheus.yml"], &prom)
	for _, f := range prom.RuleFiles {
		if _, ok := binds[f]; !ok {
			t.Errorf("prometheus loads rules from %s, which docker-compose.yml does not mount", f)
		}
	}
	if !slices.Contains(prom.RuleFiles, "/etc/prometheus/alerts.yaml") || binds["/etc/prometheus/alerts.yaml"] != filepath.Join("deploy", "prometheus", "alerts.yaml") {
		t.Errorf("prometheus does not load deploy/prometheus/alerts.yaml: rule_files %v", prom.RuleFiles)
	}
	var scrapesGate bool
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			scrapesGate = scrapesGate || slices.Contains(st.Targets, "gate:"+imagePort(t))
		}
	}
	if !scrapesGate {
		t.Errorf("prometheus does not scrape gate:%s", imagePort(t))
	}

	var ds struct {
		Datasources []struct{ UID, Type, URL string } `yaml:"datasources"`
	}
	readYAML(t, filepath.Join("deploy", "grafana", "provisioning", "datasources", "prometheus.yaml"), &ds)
	dashUID := dashboardDatasource(t)
	if len(ds.Datasources) != 1 || ds.Datasources[0].UID != dashUID || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("grafana's data source %+v, want the one prometheus of uid %q the dashboard defaults to", ds.Datasources, dashUID)
	}
	var dp struct {
		Providers []struct {
			Options struct{ Path string } `yaml:"options"`
		} `yaml:"providers"`
	}
	readYAML(t, filepath.Join("deploy", "grafana", "provisioning", "dashboards", "gate.yaml"), &dp)
	if len(dp.Providers) != 1 || binds[dp.Providers[0].Options.Path+"/gate.json"] != filepath.Join("deploy", "grafana", "gate.json") {
		t.Errorf("grafana's dashboard provider %+v does not read deploy/grafana/gate.json where docker-compose.yml mounts it", dp.Providers)
	}
}

func serviceNames(c composeFile) []string {
	var names []string
	for n := range c.Services {
		names = append(names, n)
	}
	return names
}

// readYAML decodes the repository's file path into out (a partial view:
// the keys the checks read). An empty path is a bind mount the caller
// looked up and docker-compose.yml does not have.
func readYAML(t *testing.T, path string, out any) {
	t.Helper()
	if path == "" {
		t.Fatal("docker-compose.yml does not mount the file")
	}
	data, err := os.ReadFile(filepath.Join(repoRoot, path))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, out); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// dashboardDatasource is the data source uid the dashboard's $datasource
// variable starts on.
func dashboardDatasource(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(dashboardPath)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Templating struct {
			List []struct {
				Name    string
				Current struct{ Value string }
			}
		}
	}
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatal(err)
	}
	for _, v := range d.Templating.List {
		if v.Name == "datasource" {
			return v.Current.Value
		}
	}
	t.Fatal("the dashboard has no datasource variable")
	return ""
}

// dockerInstruction is one instruction of a Dockerfile, continuation lines
// joined.
type dockerInstruction struct{ op, args string }

func readDockerfile(t *testing.T) []dockerInstruction {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRoot, "Dockerfile"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []dockerInstruction
	var cur string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "#") || line == "" && cur == "" {
			continue
		}
		if strings.HasSuffix(line, "\\") {
			cur += strings.TrimSuffix(line, "\\") + " "
			continue
		}
		cur += line
		op, args, _ := strings.Cut(cur, " ")
		out = append(out, dockerInstruction{strings.ToUpper(op), strings.Join(strings.Fields(args), " ")})
		cur = ""
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// imageEnv is the environment the Dockerfile's ENV instructions set
// (KEY=value pairs without spaces or quotes, as it writes them).
func imageEnv(t *testing.T) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, in := range readDockerfile(t) {
		if in.op != "ENV" {
			continue
		}
		for _, kv := range strings.Fields(in.args) {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				t.Fatalf("Dockerfile ENV %s: want KEY=value pairs", in.args)
			}
			env[k] = v
		}
	}
	return env
}

// imagePort is the port the image's GATE_HTTP_ADDR listens on.
func imagePort(t *testing.T) string {
	t.Helper()
	v, ok := imageEnv(t)["GATE_HTTP_ADDR"]
	if !ok {
		t.Fatal("the Dockerfile sets no GATE_HTTP_ADDR")
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil || host != "0.0.0.0" {
		t.Fatalf("the image's GATE_HTTP_ADDR is %q, want 0.0.0.0:port (inside a container loopback is unreachable)", v)
	}
	return port
}

// composeVar is a ${NAME...} of docker-compose.yml, taken from .env.
var composeVar = regexp.MustCompile(`\$\{[A-Z_]+[^}]*\}`)

// TestImageAndComposeSettings: the image's settings listen on 0.0.0.0 and
// so refuse to start without a token (the image never opens the API by
// itself), start with one; and docker-compose.yml's over them carry a
// token and refuse to start without one.
func TestImageAndComposeSettings(t *testing.T) {
	image := imageEnv(t)
	if _, err := parseConfig(nil, func(k string) string { return image[k] }, io.Discard); err == nil || !strings.Contains(err.Error(), "GATE_API_TOKEN is empty") {
		t.Errorf("the image's settings without a token: %v, want the gate to refuse to start", err)
	}
	withToken := maps.Clone(image)
	withToken["GATE_API_TOKEN"] = "from-env"
	c, err := parseConfig(nil, func(k string) string { return withToken[k] }, io.Discard)
	if err != nil {
		t.Fatalf("gate serve refuses the image's settings with a token: %v", err)
	}
	if c.HTTPAllowNoToken {
		t.Error("the image sets GATE_HTTP_ALLOW_NO_TOKEN: it would serve the API open on 0.0.0.0 whenever a token is forgotten")
	}

	compose := maps.Clone(image)
	for k, v := range readCompose(t).Services["gate"].Environment {
		compose[k] = composeVar.ReplaceAllString(v, "from-env")
	}
	if c, err = parseConfig(nil, func(k string) string { return compose[k] }, io.Discard); err != nil {
		t.Fatalf("gate serve refuses docker-compose.yml's settings: %v", err)
	}
	if c.APIToken == "" {
		t.Error("docker-compose.yml runs the gate without GATE_API_TOKEN")
	}
	compose["GATE_API_TOKEN"] = ""
	if _, err := parseConfig(nil, func(k string) string { return compose[k] }, io.Discard); err == nil || !strings.Contains(err.Error(), "GATE_API_TOKEN is empty") {
		t.Errorf("docker-compose.yml's settings with an empty GATE_API_TOKEN: %v, want the gate to refuse to start", err)
	}
}

// TestDockerfile: the image is a static binary on distroless or scratch,
// runs as a non-root user, carries the rules folder, has no HEALTHCHECK
// (the orchestrator probes /healthz and /readyz), and exposes the port
// GATE_HTTP_ADDR listens on.
func TestDockerfile(t *testing.T) {
	ins := readDockerfile(t)
	port := imagePort(t)
	var final []dockerInstruction // the last stage's
	var build string
	for _, in := range ins {
		switch in.op {
		case "FROM":
			final = nil
		case "HEALTHCHECK":
			t.Errorf("the Dockerfile has HEALTHCHECK %s: probes are the orchestrator's, over HTTP", in.args)
		case "RUN":
			if strings.Contains(in.args, "go build") {
				build = in.args
			}
		}
		final = append(final, in)
	}
	if !strings.Contains(build, "CGO_ENABLED=0") || !strings.Contains(build, "-trimpath") || !strings.Contains(build, "./cmd/gate") {
		t.Errorf("the build is %q, want CGO_ENABLED=0 go build -trimpath ... ./cmd/gate", build)
	}
	if len(final) == 0 || final[0].op != "FROM" {
		t.Fatal("the Dockerfile has no FROM")
	}
	if base := final[0].args; !strings.HasPrefix(base, "gcr.io/distroless/static") && base != "scratch" {
		t.Errorf("the image is built FROM %s, want distroless static or scratch", base)
	}
	user, exposed, rules := "", false, false
	for _, in := range final {
		switch in.op {
		case "USER":
			user = in.args
		case "EXPOSE":
			exposed = exposed || slices.Contains(strings.Fields(in.args), port)
		case "COPY":
			rules = rules || strings.HasSuffix(in.args, "rules /rules")
		}
	}
	if name, _, _ := strings.Cut(user, ":"); name == "" || name == "root" || name == "0" {
		t.Errorf("the image runs as user %q, want a non-root USER", user)
	}
	if !exposed {
		t.Errorf("the image does not EXPOSE %s, the port of its GATE_HTTP_ADDR", port)
	}
	if !rules {
		t.Error("the image does not carry the rules folder at /rules")
	}
}
