package main

import (
	"bytes"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/antifatigue/gate/internal/httpapi"
	"github.com/antifatigue/gate/internal/rules"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// manifestDir is the Kubernetes deployment of the gate, from cmd/gate.
const manifestDir = "../../deploy/kubernetes"

// kustomization is the part of a kustomize Kustomization the folder uses;
// decoding into it strictly refuses any other field.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Resources  []string `json:"resources"`
}

// manifests is every object of deploy/kubernetes, each decoded strictly
// into its Kubernetes API type.
type manifests struct {
	deployments []*appsv1.Deployment
	configMaps  map[string]*corev1.ConfigMap
	services    []*corev1.Service
	pdbs        []*policyv1.PodDisruptionBudget
	kustomize   *kustomization
	files       []string // the object files, kustomization.yaml aside
}

// loadManifests decodes every document of every *.yaml file of
// manifestDir, refusing unknown fields, duplicate fields and kinds the
// gate's deployment does not use.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(manifestDir, "*.yaml"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no manifests in %s: %v", manifestDir, err)
	}
	m := &manifests{configMaps: map[string]*corev1.ConfigMap{}}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		name := filepath.Base(path)
		if name != "kustomization.yaml" {
			m.files = append(m.files, name)
		}
		for i, doc := range bytes.Split(data, []byte("\n---\n")) {
			m.decode(t, name+" document "+strconv.Itoa(i+1), doc)
		}
	}
	return m
}

func (m *manifests) decode(t *testing.T, where string, doc []byte) {
	t.Helper()
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal(doc, &head); err != nil {
		t.Fatalf("%s: %v", where, err)
	}
	var obj any
	switch head.APIVersion + " " + head.Kind {
	case "apps/v1 Deployment":
		d := &appsv1.Deployment{}
		m.deployments, obj = append(m.deployments, d), d
	case "v1 ConfigMap":
		c := &corev1.ConfigMap{}
		obj = c
		defer func() { m.configMaps[c.Name] = c }()
	case "v1 Service":
		s := &corev1.Service{}
		m.services, obj = append(m.services, s), s
	case "policy/v1 PodDisruptionBudget":
		p := &policyv1.PodDisruptionBudget{}
		m.pdbs, obj = append(m.pdbs, p), p
	case "kustomize.config.k8s.io/v1beta1 Kustomization":
		m.kustomize = &kustomization{}
		obj = m.kustomize
	default:
		t.Fatalf("%s: unexpected apiVersion %q kind %q", where, head.APIVersion, head.Kind)
	}
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		t.Fatalf("%s: strict decoding into %T: %v", where, obj, err)
	}
}

// TestManifestsDecodeStrictly: every manifest is a valid object of the
// Kubernetes API (no unknown or misspelt field), and the kustomization
// lists exactly the files of the folder.
func TestManifestsDecodeStrictly(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	if len(m.deployments) != 1 || len(m.services) != 1 || len(m.pdbs) != 1 || m.configMaps["gate-config"] == nil || m.configMaps["gate-rules"] == nil {
		t.Fatalf("want one Deployment, one Service, one PodDisruptionBudget and the ConfigMaps gate-config and gate-rules; got %d, %d, %d and %d ConfigMaps",
			len(m.deployments), len(m.services), len(m.pdbs), len(m.configMaps))
	}
	if m.kustomize == nil {
		t.Fatal("no kustomization.yaml")
	}
	got, want := slices.Sorted(slices.Values(m.kustomize.Resources)), slices.Sorted(slices.Values(m.files))
	if !slices.Equal(got, want) {
		t.Errorf("kustomization.yaml lists %v, the folder has %v", got, want)
	}
}

// gateContainer is the Deployment's container named gate.
func gateContainer(t *testing.T, d *appsv1.Deployment) *corev1.Container {
	t.Helper()
	for i, c := range d.Spec.Template.Spec.Containers {
		if c.Name == "gate" {
			return &d.Spec.Template.Spec.Containers[i]
		}
	}
	t.Fatalf("deployment %s has no container named gate", d.Name)
	return nil
}

// secretPlaceholders stand for the Secret's values, which are not shipped,
// when the manifests' settings are parsed.
var secretPlaceholders = map[string]string{
	"GATE_DATABASE_URL":   "postgres://gate:secret@postgres:5432/gate",
	"GATE_REDIS_URL":      "redis://:secret@redis:6379/0",
	"GATE_API_TOKEN":      "secret",
	"GATE_NACOS_PASSWORD": "",
}

// podEnv is the gate container's environment as the kubelet would build
// it, with secretPlaceholders for the Secret's values. It fails on a
// variable the gate does not know, a secret setting in a ConfigMap or a
// plain value, and a ConfigMap that is not in the folder.
func podEnv(t *testing.T, m *manifests, c *corev1.Container) map[string]string {
	t.Helper()
	known := map[string]bool{}
	secret := map[string]bool{}
	for _, s := range settings(&config{}) {
		known[s.env] = true
		secret[s.env] = s.secret
	}
	env := map[string]string{}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			t.Fatalf("envFrom other than a ConfigMap: %+v", from)
		}
		cm := m.configMaps[from.ConfigMapRef.Name]
		if cm == nil {
			t.Fatalf("envFrom ConfigMap %q is not in %s", from.ConfigMapRef.Name, manifestDir)
		}
		for k, v := range cm.Data {
			if !known[k] {
				t.Errorf("ConfigMap %s sets %s, which is not a setting of gate serve", cm.Name, k)
			}
			if secret[k] {
				t.Errorf("ConfigMap %s holds the secret %s: take it from a Secret by reference", cm.Name, k)
			}
			env[k] = v
		}
	}
	for _, e := range c.Env {
		if !known[e.Name] {
			t.Errorf("env %s is not a setting of gate serve", e.Name)
		}
		switch {
		case e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil:
			v, ok := secretPlaceholders[e.Name]
			if !ok {
				t.Errorf("env %s from a Secret has no placeholder in this test", e.Name)
			}
			env[e.Name] = v
		case secret[e.Name]:
			t.Errorf("env %s is a secret: take it from a Secret by reference (secretKeyRef)", e.Name)
		default:
			env[e.Name] = e.Value
		}
	}
	for name := range secretPlaceholders {
		if _, ok := env[name]; !ok {
			t.Errorf("%s is not taken from the Secret", name)
		}
	}
	return env
}

// TestManifestsMatchGateSettings: the manifests' settings are ones gate
// serve accepts, and the probes, ports, rules folder and grace period
// agree with them.
func TestManifestsMatchGateSettings(t *testing.T) {
	t.Parallel()
	m := loadManifests(t)
	d := m.deployments[0]
	pod := d.Spec.Template.Spec
	c := gateContainer(t, d)
	env := podEnv(t, m, c)
	cfg, err := parseConfig(nil, func(k string) string { return env[k] }, io.Discard)
	if err != nil {
		t.Fatalf("gate serve refuses the manifests' settings: %v", err)
	}
	// A Secret whose token is empty must stop the pod, not open the API on
	// 0.0.0.0 (the image allows that for a bare docker run).
	noToken := func(k string) string {
		if k == "GATE_API_TOKEN" {
			return ""
		}
		return env[k]
	}
	if _, err := parseConfig(nil, noToken, io.Discard); err == nil || !strings.Contains(err.Error(), "GATE_API_TOKEN is empty") {
		t.Errorf("the manifests' settings with an empty GATE_API_TOKEN: %v, want the gate to refuse to start", err)
	}

	host, port, err := net.SplitHostPort(cfg.HTTPAddr)
	if err != nil || host != "0.0.0.0" {
		t.Fatalf("GATE_HTTP_ADDR = %q: in a pod it must listen on 0.0.0.0:<port> (%v)", cfg.HTTPAddr, err)
	}
	var containerPort int32
	for _, p := range c.Ports {
		if p.Name == "http" {
			containerPort = p.ContainerPort
		}
	}
	if strconv.Itoa(int(containerPort)) != port {
		t.Errorf("container port http = %d, GATE_HTTP_ADDR's port = %s", containerPort, port)
	}
	served := openAPIPaths(t)
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil {
			t.Errorf("%s probe: want an httpGet probe", p.name)
			continue
		}
		g := p.probe.HTTPGet
		if g.Path != p.path || !served[g.Path] {
			t.Errorf("%s probe path = %q, want %s, a route the gate serves", p.name, g.Path, p.path)
		}
		if g.Port.String() != port && g.Port.String() != "http" {
			t.Errorf("%s probe port = %s, GATE_HTTP_ADDR's port = %s", p.name, g.Port.String(), port)
		}
	}

	grace := pod.TerminationGracePeriodSeconds
	if grace == nil || time.Duration(*grace)*time.Second <= cfg.ShutdownTimeout {
		t.Errorf("terminationGracePeriodSeconds = %v, want more than GATE_SHUTDOWN_TIMEOUT (%s)", grace, cfg.ShutdownTimeout)
	}
	checkRulesVolume(t, m, pod, c, cfg.Rules)

	if cpu := c.Resources.Requests.Cpu(); cpu.IsZero() {
		t.Error("no CPU request: size it from docs/benchmarks.md")
	}
	if sc := pod.SecurityContext; sc == nil || sc.RunAsNonRoot == nil || !*sc.RunAsNonRoot {
		t.Error("the pod must run as non-root (securityContext.runAsNonRoot)")
	}

	labels := d.Spec.Template.Labels
	for sel, what := range map[string]map[string]string{
		"Service":             m.services[0].Spec.Selector,
		"PodDisruptionBudget": m.pdbs[0].Spec.Selector.MatchLabels,
		"Deployment":          d.Spec.Selector.MatchLabels,
	} {
		if len(what) == 0 {
			t.Errorf("%s selects no labels", sel)
		}
		for k, v := range what {
			if labels[k] != v {
				t.Errorf("%s selector %s=%s does not select the gate's pods (labels %v)", sel, k, v, labels)
			}
		}
	}
	if tp := m.services[0].Spec.Ports[0].TargetPort; tp.String() != "http" && tp.String() != port {
		t.Errorf("Service targetPort = %s, want the container port http", tp.String())
	}
}

// checkRulesVolume: GATE_RULES is the mount of the rules ConfigMap, and
// that ConfigMap is a rule document the gate accepts.
func checkRulesVolume(t *testing.T, m *manifests, pod corev1.PodSpec, c *corev1.Container, rulesPath string) {
	t.Helper()
	var volume string
	for _, vm := range c.VolumeMounts {
		if vm.MountPath == rulesPath {
			volume = vm.Name
		}
	}
	var cm *corev1.ConfigMap
	for _, v := range pod.Volumes {
		if v.Name == volume && v.ConfigMap != nil {
			cm = m.configMaps[v.ConfigMap.Name]
		}
	}
	if cm == nil {
		t.Fatalf("GATE_RULES (%s) is not the mount of a ConfigMap of %s", rulesPath, manifestDir)
	}
	dir := t.TempDir()
	for name, doc := range cm.Data {
		if !strings.HasSuffix(name, ".yaml") {
			t.Errorf("ConfigMap %s key %s: the gate reads only *.yaml and *.yml files", cm.Name, name)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(doc), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := rules.LoadPath(dir); err != nil {
		t.Errorf("ConfigMap %s is not a rule document the gate accepts: %v", cm.Name, err)
	}
}

// openAPIPaths are the paths of the gate's OpenAPI document, which
// internal/httpapi's tests hold to the routes it serves.
func openAPIPaths(t *testing.T) map[string]bool {
	t.Helper()
	var doc struct {
		Paths map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(httpapi.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for p := range doc.Paths {
		out[p] = true
	}
	return out
}

// TestProbesAnswerAnyHost: the kubelet probes with the pod's IP as Host,
// which is not an allowed host; /healthz and /readyz must answer it.
func TestProbesAnswerAnyHost(t *testing.T) {
	t.Parallel()
	e := newEnv(t, stackEmbedded, "scenes: {}\n")
	g := e.start(map[string]string{"GATE_API_TOKEN": "secret"})
	for _, path := range []string{"/healthz", "/readyz"} {
		req, _ := http.NewRequest(http.MethodGet, g.base+path, nil)
		req.Host = "10.244.1.7:8080"
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("GET %s with Host 10.244.1.7:8080: %d, want 200", path, resp.StatusCode)
		}
	}
}

// TestRulesFollowConfigMapSwap: the kubelet updates a ConfigMap volume by
// writing a new hidden folder and swapping the ..data link to it, the
// files themselves being links through ..data. A gate whose GATE_RULES is
// such a folder puts the new document in force.
func TestRulesFollowConfigMapSwap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	version := func(name, scene string) {
		t.Helper()
		if err := os.Mkdir(filepath.Join(dir, name), 0o755); err != nil {
			t.Fatal(err)
		}
		doc := "scenes:\n  " + scene + ":\n    limits: [{window: 1h, max: 1}]\n"
		if err := os.WriteFile(filepath.Join(dir, name, "rules.yaml"), []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(name, filepath.Join(dir, "..data_tmp")); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(filepath.Join(dir, "..data_tmp"), filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	version("..2026_01_01_00_00_00.1", "k.first")
	if err := os.Symlink("..data/rules.yaml", filepath.Join(dir, "rules.yaml")); err != nil {
		t.Fatal(err)
	}
	e := newEnv(t, stackEmbedded, "scenes: {}\n")
	g := e.start(map[string]string{"GATE_RULES": dir})
	rulesHave := func(scene string) bool {
		code, body := g.get("/v1/rules", nil, "")
		return code == http.StatusOK && bytes.Contains(body, []byte(scene))
	}
	if !rulesHave("k.first") {
		t.Fatal("the gate did not start with the mounted rules")
	}
	version("..2026_01_01_00_01_00.2", "k.second")
	if err := os.RemoveAll(filepath.Join(dir, "..2026_01_01_00_00_00.1")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !rulesHave("k.second") {
		if time.Now().After(deadline) {
			t.Fatal("the rules swapped in by the ConfigMap update are not in force after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
