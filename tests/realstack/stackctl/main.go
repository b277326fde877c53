// Command stackctl starts the real management stack of magnum-capi's real-stack test tier, every
// part on loopback, and keeps it running until it is told to stop (SIGTERM/SIGINT) or its parent
// dies:
//
//   - a private PKI (one CA; the apiserver's and the webhooks' serving certificates; the admin's
//     client certificate; the service-account signing key);
//   - etcd, kube-apiserver (RBAC on) and kube-controller-manager (garbage collector and namespace
//     controllers only), built from their Go modules by tests/realstack/build.sh;
//   - each provider's CRDs and webhook configurations exactly as its own config/ kustomizations
//     build them (the contract labels and conversion patches included), with the webhooks'
//     Service references turned into loopback URLs of the managers' webhook servers;
//   - the CAPI core, kubeadm bootstrap, kubeadm control-plane, CAPO and CAAPH managers, with
//     their webhooks served and leader election off;
//   - the node agent (bin/node-agent, tests/realstack/agent), which plays every server CAPO
//     creates: the workload cluster's API on its controlPlaneEndpoint, its Nodes, static Pods and
//     etcd members.
//
// When everything answers it writes <dir>/ready.json (the admin kubeconfig, the apiserver's URL
// and every part's log and ports) and waits. Usage:
//
//	stackctl up --stack <build dir> --dir <state dir> [--providers capi-core,...] [--crds capo,...]
//	            [--node-agent=false]
//
// --crds names providers whose CRDs are applied without starting their manager (a test that plays
// the provider itself; their conversion webhooks are left out, so only their storage versions are
// usable); --node-agent=false leaves the node agent to the caller (a test that restarts it).
package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// provider is one Cluster API manager with its manifests (a config/ folder under manifests/).
type provider struct {
	name      string   // its name in logs, ready.json and webhook configuration names
	binary    string   // under bin/
	manifests string   // under manifests/
	extraCRDs []string // plain CRD files under manifests/, applied with the provider's own
	args      []string // its own flags
}

// ignition holds the feature gates of the kubeadm bootstrap and control-plane managers: the one
// Flatcar clusters need (clusterctl's EXP_KUBEADM_BOOTSTRAP_FORMAT_IGNITION=true), as the README,
// the devstack plugin and deploy/capi-operator tell an operator to set, and ClusterTopology, which
// clusterctl's CLUSTER_TOPOLOGY=true turns on for them too (their webhooks refuse the
// KubeadmControlPlaneTemplate of a ClusterClass without it).
var ignition = []string{"--feature-gates=KubeadmBootstrapFormatIgnition=true,ClusterTopology=true"}

// topology is the feature gate of ClusterClass clusters (clusterctl's CLUSTER_TOPOLOGY=true),
// which magnum-cluster-api requires on its management cluster: the clusters magnum-capi adopts
// from it are topology clusters.
var topology = []string{"--feature-gates=ClusterTopology=true"}

var providers = []provider{
	{name: "capi-core", binary: "capi-manager", manifests: "capi-core", args: topology},
	{name: "capi-bootstrap", binary: "kubeadm-bootstrap-manager", manifests: "capi-bootstrap", args: ignition},
	{name: "capi-controlplane", binary: "kubeadm-control-plane-manager", manifests: "capi-controlplane", args: ignition},
	{name: "capo", binary: "capo-manager", manifests: "capo", extraCRDs: []string{"orc/openstack.k-orc.cloud_images.yaml"}},
	{name: "caaph", binary: "caaph-manager", manifests: "caaph"},
}

// Ready is what ready.json holds.
type Ready struct {
	Kubeconfig string           `json:"kubeconfig"`
	Server     string           `json:"server"`
	CACert     string           `json:"ca_cert"`
	CAKey      string           `json:"ca_key"`
	Parts      map[string]*Part `json:"parts"`
	StartedIn  string           `json:"started_in"`
}

// Part is one process of the stack.
type Part struct {
	Pid         int    `json:"pid"`
	Log         string `json:"log"`
	WebhookPort int    `json:"webhook_port,omitempty"`
	HealthPort  int    `json:"health_port,omitempty"`
	cmd         *exec.Cmd
}

func main() {
	if len(os.Args) < 2 || os.Args[1] != "up" {
		fmt.Fprintln(os.Stderr, "usage: stackctl up --stack DIR --dir DIR [--providers a,b]")
		os.Exit(2)
	}
	fs := flag.NewFlagSet("up", flag.ExitOnError)
	stack := fs.String("stack", "", "the directory tests/realstack/build.sh printed")
	dir := fs.String("dir", "", "a directory for this stack's state, certificates and logs")
	only := fs.String("providers", "", "comma-separated providers to start (default: all)")
	crdsOnly := fs.String("crds", "", "comma-separated providers whose CRDs only are applied")
	nodeAgent := fs.Bool("node-agent", true, "start the node agent (a test may run its own)")
	_ = fs.Parse(os.Args[2:])
	if *stack == "" || *dir == "" {
		fmt.Fprintln(os.Stderr, "stackctl up: --stack and --dir are required")
		os.Exit(2)
	}
	s := &Stack{bin: filepath.Join(*stack, "bin"), manifests: filepath.Join(*stack, "manifests"),
		dir: *dir, parts: map[string]*Part{}, nodeAgent: *nodeAgent}
	if *only != "" {
		s.only = map[string]bool{}
		for _, p := range strings.Split(*only, ",") {
			s.only[strings.TrimSpace(p)] = true
		}
	}
	s.crdsOnly = map[string]bool{}
	for _, p := range strings.Split(*crdsOnly, ",") {
		if p = strings.TrimSpace(p); p != "" {
			s.crdsOnly[p] = true
		}
	}
	ctx, cancel := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer cancel()
	err := s.up(ctx)
	if err == nil {
		fmt.Fprintf(os.Stderr, "stackctl: ready (%s)\n", filepath.Join(s.dir, "ready.json"))
		err = s.watch(ctx)
	}
	s.stop()
	if err != nil && !errors.Is(err, context.Canceled) {
		fmt.Fprintf(os.Stderr, "stackctl: %v\n", err)
		os.Exit(1)
	}
}

// Stack is the running stack.
type Stack struct {
	bin, manifests, dir string
	only                map[string]bool
	crdsOnly            map[string]bool
	nodeAgent           bool
	parts               map[string]*Part
	pki                 *pki
	server              string
	config              *rest.Config
}

func (s *Stack) up(ctx context.Context) error {
	t0 := time.Now()
	for _, d := range []string{"pki", "logs", "webhook-certs"} {
		if err := os.MkdirAll(filepath.Join(s.dir, d), 0o700); err != nil {
			return err
		}
	}
	var err error
	if s.pki, err = newPKI(filepath.Join(s.dir, "pki")); err != nil {
		return fmt.Errorf("pki: %w", err)
	}
	if err := s.pki.writeServing(filepath.Join(s.dir, "webhook-certs")); err != nil {
		return err
	}
	if err := s.startEtcd(ctx); err != nil {
		return err
	}
	if err := s.startAPIServer(ctx); err != nil {
		return err
	}
	if err := s.startControllerManager(ctx); err != nil {
		return err
	}
	dyn, mapper, err := s.clients()
	if err != nil {
		return err
	}
	// CRDs first (every provider's: the managers' informers need each other's kinds), then the
	// managers, then each one's webhook configurations once its webhook server answers.
	// Each webhook port is held (listened on) from the moment it is written into the CRDs'
	// conversion configuration until just before its manager starts: another process picking
	// a free port meanwhile (the test harness starts many) cannot take it.
	webhookPorts := map[string]int{}
	held := map[string]net.Listener{}
	defer func() {
		for _, l := range held {
			_ = l.Close()
		}
	}()
	for _, p := range providers {
		if !s.wanted(p) && !s.crdsOnly[p.name] {
			continue
		}
		port, l := holdPort()
		webhookPorts[p.name], held[p.name] = port, l
		if err := s.applyCRDs(ctx, dyn, mapper, p, webhookPorts[p.name], s.wanted(p)); err != nil {
			return fmt.Errorf("%s CRDs: %w", p.name, err)
		}
	}
	mapper.Reset()
	for _, p := range providers {
		if !s.wanted(p) {
			continue
		}
		_ = held[p.name].Close()
		delete(held, p.name)
		if err := s.startManager(p, webhookPorts[p.name]); err != nil {
			return err
		}
	}
	for _, p := range providers {
		if !s.wanted(p) {
			continue
		}
		part := s.parts[p.name]
		if err := waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", part.HealthPort), nil, part, 3*time.Minute); err != nil {
			return fmt.Errorf("%s never became ready: %w", p.name, err)
		}
		if err := waitTLS(ctx, part.WebhookPort, part, time.Minute); err != nil {
			return fmt.Errorf("%s webhook server: %w", p.name, err)
		}
		if err := s.applyWebhooks(ctx, dyn, mapper, p, part.WebhookPort); err != nil {
			return fmt.Errorf("%s webhooks: %w", p.name, err)
		}
	}
	// The node agent last: it watches the providers' kinds.
	if s.nodeAgent {
		if err := s.startNodeAgent(ctx); err != nil {
			return err
		}
	}
	ready := Ready{
		Kubeconfig: filepath.Join(s.dir, "admin.kubeconfig"),
		Server:     s.server,
		CACert:     s.pki.caCertPath,
		CAKey:      s.pki.caKeyPath,
		Parts:      s.parts,
		StartedIn:  time.Since(t0).Round(time.Millisecond).String(),
	}
	b, _ := json.MarshalIndent(ready, "", "  ")
	tmp := filepath.Join(s.dir, "ready.json.tmp")
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.dir, "ready.json"))
}

func (s *Stack) wanted(p provider) bool { return s.only == nil || s.only[p.name] }

// watch returns when ctx ends or a part exits.
func (s *Stack) watch(ctx context.Context) error {
	exited := make(chan string, len(s.parts))
	for name, p := range s.parts {
		go func() {
			_ = p.cmd.Wait()
			exited <- name
		}()
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case name := <-exited:
		return fmt.Errorf("%s exited (%s)", name, s.parts[name].Log)
	}
}

func (s *Stack) stop() {
	for _, p := range s.parts {
		if p.cmd != nil && p.cmd.Process != nil {
			_ = p.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for _, p := range s.parts {
		if p.cmd == nil || p.cmd.Process == nil {
			continue
		}
		for time.Now().Before(deadline) && syscall.Kill(p.cmd.Process.Pid, 0) == nil {
			time.Sleep(50 * time.Millisecond)
		}
		_ = p.cmd.Process.Kill()
	}
}

// start runs bin/<binary> with args as part name (its output in logs/<name>.log); it dies with
// stackctl.
func (s *Stack) start(name, binary string, env []string, args ...string) (*Part, error) {
	logPath := filepath.Join(s.dir, "logs", name+".log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(filepath.Join(s.bin, binary), args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &Part{Pid: cmd.Process.Pid, Log: logPath, cmd: cmd}
	s.parts[name] = p
	return p, nil
}

func (s *Stack) startEtcd(ctx context.Context) error {
	client, peer := freePort(), freePort()
	p, err := s.start("etcd", "etcd", nil,
		"--name=default",
		"--data-dir="+filepath.Join(s.dir, "etcd"),
		fmt.Sprintf("--listen-client-urls=http://127.0.0.1:%d", client),
		fmt.Sprintf("--advertise-client-urls=http://127.0.0.1:%d", client),
		fmt.Sprintf("--listen-peer-urls=http://127.0.0.1:%d", peer),
		fmt.Sprintf("--initial-advertise-peer-urls=http://127.0.0.1:%d", peer),
		fmt.Sprintf("--initial-cluster=default=http://127.0.0.1:%d", peer),
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return err
	}
	p.HealthPort = client
	return waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/health", client), nil, p, time.Minute)
}

func (s *Stack) startAPIServer(ctx context.Context) error {
	port := freePort()
	etcd := s.parts["etcd"].HealthPort
	pk := s.pki
	p, err := s.start("kube-apiserver", "kube-apiserver", nil,
		fmt.Sprintf("--etcd-servers=http://127.0.0.1:%d", etcd),
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir="+filepath.Join(s.dir, "apiserver"),
		"--tls-cert-file="+pk.servingCertPath,
		"--tls-private-key-file="+pk.servingKeyPath,
		"--client-ca-file="+pk.caCertPath,
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file="+pk.saPubPath,
		"--service-account-signing-key-file="+pk.saKeyPath,
		"--api-audiences=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=10.96.0.0/24",
		"--authorization-mode=RBAC",
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--v=1",
	)
	if err != nil {
		return err
	}
	p.HealthPort = port
	s.server = fmt.Sprintf("https://127.0.0.1:%d", port)
	kubeconfig := filepath.Join(s.dir, "admin.kubeconfig")
	if err := pk.writeKubeconfig(kubeconfig, s.server); err != nil {
		return err
	}
	if s.config, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
		return err
	}
	s.config.QPS, s.config.Burst = 200, 400
	tlsConfig, err := rest.TLSConfigFor(s.config)
	if err != nil {
		return err
	}
	return waitHTTP(ctx, s.server+"/readyz", tlsConfig, p, 2*time.Minute)
}

func (s *Stack) startControllerManager(ctx context.Context) error {
	port := freePort()
	p, err := s.start("kube-controller-manager", "kube-controller-manager", nil,
		"--kubeconfig="+filepath.Join(s.dir, "admin.kubeconfig"),
		"--authentication-kubeconfig="+filepath.Join(s.dir, "admin.kubeconfig"),
		"--authorization-kubeconfig="+filepath.Join(s.dir, "admin.kubeconfig"),
		"--controllers=garbage-collector-controller,namespace-controller",
		"--leader-elect=false",
		"--bind-address=127.0.0.1",
		fmt.Sprintf("--secure-port=%d", port),
		"--cert-dir="+filepath.Join(s.dir, "controller-manager"),
		"--concurrent-gc-syncs=5",
		"--v=1",
	)
	if err != nil {
		return err
	}
	p.HealthPort = port
	insecure := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // its own self-signed certificate
	return waitHTTP(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), insecure, p, time.Minute)
}

// startManager starts a provider's manager with its webhook server on webhookPort.
func (s *Stack) startManager(p provider, webhookPort int) error {
	health, diagnostics := freePort(), freePort()
	args := append([]string{
		"--leader-elect=false",
		fmt.Sprintf("--health-addr=127.0.0.1:%d", health),
		fmt.Sprintf("--diagnostics-address=127.0.0.1:%d", diagnostics),
		"--insecure-diagnostics",
		fmt.Sprintf("--webhook-port=%d", webhookPort),
		"--webhook-cert-dir=" + filepath.Join(s.dir, "webhook-certs"),
		"--v=2",
	}, p.args...)
	part, err := s.start(p.name, p.binary,
		// HOME in the stack's directory: CAAPH's Helm keeps its cache and repositories, and
		// client-go its discovery cache, under it, not in the user's home.
		[]string{"KUBECONFIG=" + filepath.Join(s.dir, "admin.kubeconfig"), "POD_NAMESPACE=" + p.name + "-system",
			"HOME=" + filepath.Join(s.dir, "home", p.name)},
		args...)
	if err != nil {
		return err
	}
	part.HealthPort, part.WebhookPort = health, webhookPort
	return nil
}

// startNodeAgent starts the node agent with the admin kubeconfig and waits until it is ready.
func (s *Stack) startNodeAgent(ctx context.Context) error {
	health := freePort()
	part, err := s.start("node-agent", "node-agent", nil,
		"--kubeconfig="+filepath.Join(s.dir, "admin.kubeconfig"),
		fmt.Sprintf("--health-addr=127.0.0.1:%d", health),
	)
	if err != nil {
		return err
	}
	part.HealthPort = health
	if err := waitHTTP(ctx, fmt.Sprintf("http://127.0.0.1:%d/readyz", health), nil, part, time.Minute); err != nil {
		return fmt.Errorf("node-agent never became ready: %w", err)
	}
	return nil
}

func (s *Stack) clients() (dynamic.Interface, *restmapper.DeferredDiscoveryRESTMapper, error) {
	dyn, err := dynamic.NewForConfig(s.config)
	if err != nil {
		return nil, nil, err
	}
	dc, err := discovery.NewDiscoveryClientForConfig(s.config)
	if err != nil {
		return nil, nil, err
	}
	return dyn, restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc)), nil
}

// kustomize builds dir as kustomize would and returns its objects.
func kustomize(dir string) ([]*unstructured.Unstructured, error) {
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	m, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, r := range m.Resources() {
		b, err := r.MarshalJSON()
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(b); err != nil {
			return nil, err
		}
		out = append(out, u)
	}
	return out, nil
}

func readObjects(path string) ([]*unstructured.Unstructured, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var out []*unstructured.Unstructured
	for _, doc := range strings.Split(string(b), "\n---") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		j, err := yaml.YAMLToJSON([]byte(doc))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		if u.GetKind() != "" {
			out = append(out, u)
		}
	}
	return out, nil
}

// applyCRDs applies the provider's CRDs as config/crd builds them, their conversion webhook
// pointed at the provider's webhook server (left out when its manager does not run), and waits
// until each is established.
func (s *Stack) applyCRDs(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, p provider, webhookPort int, served bool) error {
	objs, err := kustomize(filepath.Join(s.manifests, p.manifests, "crd"))
	if err != nil {
		return err
	}
	for _, extra := range p.extraCRDs {
		more, err := readObjects(filepath.Join(s.manifests, extra))
		if err != nil {
			return err
		}
		objs = append(objs, more...)
	}
	var names []string
	for _, o := range objs {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		if !served {
			unstructured.RemoveNestedField(o.Object, "spec", "conversion")
		} else if _, found, _ := unstructured.NestedMap(o.Object, "spec", "conversion", "webhook", "clientConfig"); found {
			cc := map[string]any{
				"url":      fmt.Sprintf("https://127.0.0.1:%d/convert", webhookPort),
				"caBundle": s.pki.caBundle(),
			}
			if err := unstructured.SetNestedMap(o.Object, cc, "spec", "conversion", "webhook", "clientConfig"); err != nil {
				return err
			}
		}
		// cert-manager is not here: its injection annotations would mean nothing.
		ann := o.GetAnnotations()
		delete(ann, "cert-manager.io/inject-ca-from")
		o.SetAnnotations(ann)
		if err := apply(ctx, dyn, mapper, o); err != nil {
			return err
		}
		names = append(names, o.GetName())
	}
	gvr := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	for _, n := range names {
		if err := waitFor(ctx, time.Minute, func() (bool, error) {
			crd, err := dyn.Resource(gvr).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)
				if m["type"] == "Established" && m["status"] == "True" {
					return true, nil
				}
			}
			return false, nil
		}); err != nil {
			return fmt.Errorf("CRD %s not established: %w", n, err)
		}
	}
	return nil
}

// applyWebhooks applies the provider's webhook configurations as config/webhook builds them,
// named after the provider (kustomize's namePrefix does that in its config/default) and served
// by URL on loopback.
func (s *Stack) applyWebhooks(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, p provider, port int) error {
	dir := filepath.Join(s.manifests, p.manifests, "webhook")
	if _, err := os.Stat(dir); err != nil {
		return nil
	}
	objs, err := kustomize(dir)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.GetKind() != "MutatingWebhookConfiguration" && o.GetKind() != "ValidatingWebhookConfiguration" {
			continue
		}
		o.SetName(p.name + "-" + o.GetName())
		o.SetAnnotations(nil)
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for i, h := range hooks {
			m := h.(map[string]any)
			cc, _ := m["clientConfig"].(map[string]any)
			path := "/"
			if svc, ok := cc["service"].(map[string]any); ok {
				if pth, ok := svc["path"].(string); ok {
					path = pth
				}
			}
			m["clientConfig"] = map[string]any{
				"url":      fmt.Sprintf("https://127.0.0.1:%d%s", port, path),
				"caBundle": s.pki.caBundle(),
			}
			hooks[i] = m
		}
		if err := unstructured.SetNestedSlice(o.Object, hooks, "webhooks"); err != nil {
			return err
		}
		if err := apply(ctx, dyn, mapper, o); err != nil {
			return err
		}
	}
	return nil
}

func apply(ctx context.Context, dyn dynamic.Interface, mapper *restmapper.DeferredDiscoveryRESTMapper, o *unstructured.Unstructured) error {
	gvk := o.GroupVersionKind()
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		mapper.Reset()
		if mapping, err = mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err != nil {
			return fmt.Errorf("%s: %w", gvk, err)
		}
	}
	o.SetManagedFields(nil)
	o.SetResourceVersion("")
	_, err = dyn.Resource(mapping.Resource).Namespace(o.GetNamespace()).Apply(ctx, o.GetName(), o,
		metav1.ApplyOptions{FieldManager: "stackctl", Force: true})
	if err != nil {
		return fmt.Errorf("applying %s %s: %w", gvk.Kind, o.GetName(), err)
	}
	return nil
}

// ---- waiting ----------------------------------------------------------------------------------

func waitFor(ctx context.Context, timeout time.Duration, f func() (bool, error)) error {
	deadline := time.Now().Add(timeout)
	for {
		ok, err := f()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func exitedErr(p *Part) error {
	if p.cmd.ProcessState != nil || syscall.Kill(p.Pid, 0) != nil {
		tail, _ := os.ReadFile(p.Log)
		if len(tail) > 4000 {
			tail = tail[len(tail)-4000:]
		}
		return fmt.Errorf("exited; the end of %s:\n%s", p.Log, tail)
	}
	return nil
}

// waitHTTP waits until url answers 200, failing early when p exits.
func waitHTTP(ctx context.Context, url string, tlsConfig *tls.Config, p *Part, timeout time.Duration) error {
	c := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	err := waitFor(ctx, timeout, func() (bool, error) {
		if err := exitedErr(p); err != nil {
			return false, err
		}
		resp, err := c.Get(url)
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		return fmt.Errorf("%s: %w (log: %s)", url, err, p.Log)
	}
	return nil
}

// waitTLS waits until a TLS server answers on port.
func waitTLS(ctx context.Context, port int, p *Part, timeout time.Duration) error {
	return waitFor(ctx, timeout, func() (bool, error) {
		if err := exitedErr(p); err != nil {
			return false, err
		}
		conn, err := tls.DialWithDialer(&net.Dialer{Timeout: time.Second}, "tcp",
			fmt.Sprintf("127.0.0.1:%d", port), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // a probe
		if err != nil {
			return false, nil
		}
		_ = conn.Close()
		return true, nil
	})
}

func freePort() int {
	port, l := holdPort()
	_ = l.Close()
	return port
}

// holdPort is a free loopback port and the listener that holds it until closed.
func holdPort() (int, net.Listener) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	return l.Addr().(*net.TCPAddr).Port, l
}

// ---- PKI --------------------------------------------------------------------------------------

type pki struct {
	dir                             string
	ca                              *x509.Certificate
	caKey                           *ecdsa.PrivateKey
	caPEM                           []byte
	caCertPath, caKeyPath           string
	servingCertPath, servingKeyPath string
	adminCertPEM, adminKeyPEM       []byte
	saKeyPath, saPubPath            string
}

func newPKI(dir string) (*pki, error) {
	p := &pki{dir: dir}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "magnum-capi realstack CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(10 * 365 * 24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caKey = key
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	p.caCertPath, p.caKeyPath = filepath.Join(dir, "ca.crt"), filepath.Join(dir, "ca.key")
	if err := os.WriteFile(p.caCertPath, p.caPEM, 0o600); err != nil {
		return nil, err
	}
	if err := writeKey(p.caKeyPath, key); err != nil {
		return nil, err
	}
	// One serving certificate for the apiserver and every webhook server, all on loopback.
	certPEM, keyPEM, err := p.issue(pkix.Name{CommonName: "127.0.0.1"},
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")}, x509.ExtKeyUsageServerAuth)
	if err != nil {
		return nil, err
	}
	p.servingCertPath, p.servingKeyPath = filepath.Join(dir, "serving.crt"), filepath.Join(dir, "serving.key")
	if err := os.WriteFile(p.servingCertPath, certPEM, 0o600); err != nil {
		return nil, err
	}
	if err := os.WriteFile(p.servingKeyPath, keyPEM, 0o600); err != nil {
		return nil, err
	}
	if p.adminCertPEM, p.adminKeyPEM, err = p.issue(pkix.Name{CommonName: "realstack-admin",
		Organization: []string{"system:masters"}}, nil, nil, x509.ExtKeyUsageClientAuth); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	p.saKeyPath, p.saPubPath = filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := writeKey(p.saKeyPath, saKey); err != nil {
		return nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}
	return p, os.WriteFile(p.saPubPath, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func writeKey(path string, key *ecdsa.PrivateKey) error {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der}), 0o600)
}

func (p *pki) issue(subject pkix.Name, dns []string, ips []net.IP, usage x509.ExtKeyUsage) ([]byte, []byte, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: serial,
		Subject:      subject,
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		DNSNames:     dns,
		IPAddresses:  ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.caKey)
	if err != nil {
		return nil, nil, err
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), nil
}

// writeServing puts the serving certificate where controller-runtime's webhook server looks.
func (p *pki) writeServing(dir string) error {
	for from, to := range map[string]string{p.servingCertPath: "tls.crt", p.servingKeyPath: "tls.key"} {
		b, err := os.ReadFile(from)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, to), b, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// caBundle is the CA as a JSON/unstructured []byte field carries it (base64 text).
func (p *pki) caBundle() string {
	b, _ := json.Marshal(p.caPEM)
	return strings.Trim(string(b), `"`)
}

func (p *pki) writeKubeconfig(path, server string) error {
	cfg := map[string]any{
		"apiVersion":      "v1",
		"kind":            "Config",
		"current-context": "realstack",
		"clusters": []any{map[string]any{"name": "realstack", "cluster": map[string]any{
			"server": server, "certificate-authority-data": p.caPEM}}},
		"users": []any{map[string]any{"name": "realstack-admin", "user": map[string]any{
			"client-certificate-data": p.adminCertPEM, "client-key-data": p.adminKeyPEM}}},
		"contexts": []any{map[string]any{"name": "realstack", "context": map[string]any{
			"cluster": "realstack", "user": "realstack-admin"}}},
	}
	b, err := json.Marshal(cfg) // []byte fields become base64, as kubeconfig's *-data fields are
	if err != nil {
		return err
	}
	y, err := yaml.JSONToYAML(b)
	if err != nil {
		return err
	}
	return os.WriteFile(path, y, 0o600)
}
