package main

// The proof that the node agent makes the real Cluster API controllers see healthy machines: the
// real management stack (stackctl, from the build directory tests/realstack/build.sh prints, in
// $REALSTACK_BUILD) with the CAPI core, kubeadm bootstrap and kubeadm control-plane managers and
// the node agent; this test plays CAPO (it provisions OpenStackClusters and OpenStackMachines as
// CAPO would, minus the cloud). A cluster is created with one control-plane machine, scaled to
// three, its MachineDeployment brought to two ready workers, upgraded one Kubernetes minor (KCP
// rolls every control-plane machine and updates kubeadm-config, kube-proxy and CoreDNS in the
// workload cluster), scaled down to one (etcd members removed) and deleted.
//
//	export REALSTACK_BUILD=$(bash tests/realstack/build.sh)
//	(cd tests/realstack/agent && go test -count=1 -v ./...)

import (
	"bufio"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/uuid"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

const (
	fromVersion    = "v1.35.3"
	toVersion      = "v1.36.3"
	fromCoreDNSTag = "v1.13.1" // kubeadm v1.35's
	toCoreDNSTag   = "v1.14.2" // kubeadm v1.36's
	infraGroup     = "infrastructure.cluster.x-k8s.io"
)

var (
	oscGVK  = schema.GroupVersionKind{Group: infraGroup, Version: "v1beta1", Kind: "OpenStackCluster"}
	osmGVK  = schema.GroupVersionKind{Group: infraGroup, Version: "v1beta1", Kind: "OpenStackMachine"}
	osmtGVK = schema.GroupVersionKind{Group: infraGroup, Version: "v1beta1", Kind: "OpenStackMachineTemplate"}
)

func TestNodeAgentRealStack(t *testing.T) {
	e, step := setup(t, true)
	defer e.dumpOnFailure()
	const cl = "e2e"
	e.createCluster(clusterSpec{name: cl, host: "127.100.0.7", workers: 2, neverJoins: true})
	step("cluster created: 1 control-plane machine, MachineDeployment of 2, one never-joins worker")

	// One control-plane machine: kubeadm init.
	e.waitKCP(cl, "initialized with 1 ready replica", 3*time.Minute, func(k *controlplanev1.KubeadmControlPlane) bool {
		return ptr.Deref(k.Status.Initialization.ControlPlaneInitialized, false) && ptr.Deref(k.Status.ReadyReplicas, 0) == 1
	})
	step("control plane initialized")

	// Scale to three.
	e.patchKCP(cl, func(k *controlplanev1.KubeadmControlPlane) { k.Spec.Replicas = ptr.To(int32(3)) })
	e.waitKCP(cl, "3 ready, available, up-to-date replicas and Available", 3*time.Minute, func(k *controlplanev1.KubeadmControlPlane) bool {
		return ptr.Deref(k.Status.Replicas, 0) == 3 && ptr.Deref(k.Status.ReadyReplicas, 0) == 3 &&
			ptr.Deref(k.Status.AvailableReplicas, 0) == 3 && ptr.Deref(k.Status.UpToDateReplicas, 0) == 3 &&
			healthy(k)
	})
	step("control plane: 3 ready replicas, Available, etcd and components healthy")
	e.waitMD(cl, "md-0", 2)
	step("MachineDeployment md-0: 2 ready replicas")
	e.checkWorkload(cl, 3, fromVersion, 2)
	e.checkNeverJoins(cl)
	step("workload cluster: 3 control-plane Nodes, 3 etcd members, 2 workers; the never-joins server has no Node")

	// Upgrade one minor: KCP rolls every machine and updates the cluster-wide objects.
	oldMachines := e.controlPlaneMachines(cl)
	e.patchKCP(cl, func(k *controlplanev1.KubeadmControlPlane) {
		k.Spec.Version = toVersion
		k.Spec.KubeadmConfigSpec.ClusterConfiguration.DNS.ImageTag = toCoreDNSTag
	})
	e.waitKCP(cl, "3 ready replicas of "+toVersion+", the old machines gone", 4*time.Minute, func(k *controlplanev1.KubeadmControlPlane) bool {
		if ptr.Deref(k.Status.Replicas, 0) != 3 || ptr.Deref(k.Status.ReadyReplicas, 0) != 3 ||
			ptr.Deref(k.Status.UpToDateReplicas, 0) != 3 || !healthy(k) {
			return false
		}
		for _, m := range e.controlPlaneMachines(cl) {
			if oldMachines[m.Name] != nil || m.Spec.Version != toVersion {
				return false
			}
		}
		return true
	})
	step("upgraded to %s: every control-plane machine replaced", toVersion)
	e.checkWorkload(cl, 3, toVersion, 2)
	e.checkUpgradedAddons(cl)
	step("workload cluster: kubeadm-config, kube-proxy and CoreDNS upgraded by KCP")

	// Scale down to one: KCP moves etcd leadership and removes members.
	e.patchKCP(cl, func(k *controlplanev1.KubeadmControlPlane) { k.Spec.Replicas = ptr.To(int32(1)) })
	e.waitKCP(cl, "1 ready replica", 3*time.Minute, func(k *controlplanev1.KubeadmControlPlane) bool {
		return ptr.Deref(k.Status.Replicas, 0) == 1 && ptr.Deref(k.Status.ReadyReplicas, 0) == 1 &&
			len(e.controlPlaneMachines(cl)) == 1 && healthy(k)
	})
	e.checkWorkload(cl, 1, toVersion, 2)
	step("scaled down to 1: one control-plane Node and one etcd member left")

	// Delete the cluster: everything goes.
	e.deleteCluster(cl)
	step("cluster deleted: no Machines, no OpenStackMachines, workload API closed")
}

// healthy: KCP says the control plane is Available, etcd and the control-plane components
// healthy.
func healthy(k *controlplanev1.KubeadmControlPlane) bool {
	return conditionTrue(k.Status.Conditions, controlplanev1.KubeadmControlPlaneAvailableCondition) &&
		conditionTrue(k.Status.Conditions, controlplanev1.KubeadmControlPlaneEtcdClusterHealthyCondition) &&
		conditionTrue(k.Status.Conditions, controlplanev1.KubeadmControlPlaneControlPlaneComponentsHealthyCondition)
}

// setup starts the stack (with stackctl's node agent or without it) in a directory kept when the
// test fails, and CAPO's part.
func setup(t *testing.T, withAgent bool) (*env, func(string, ...any)) {
	build := os.Getenv("REALSTACK_BUILD")
	if build == "" {
		t.Fatal("REALSTACK_BUILD is not set: this test needs the real stack; run\n" +
			"  export REALSTACK_BUILD=$(bash tests/realstack/build.sh)\nfirst")
	}
	for _, b := range []string{"stackctl", "node-agent", "kube-apiserver", "capi-manager",
		"kubeadm-bootstrap-manager", "kubeadm-control-plane-manager"} {
		if _, err := os.Stat(filepath.Join(build, "bin", b)); err != nil {
			t.Fatalf("REALSTACK_BUILD=%s has no bin/%s (%v): run tests/realstack/build.sh", build, b, err)
		}
	}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	t.Cleanup(cancel)
	step := func(format string, args ...any) {
		t.Logf("[%6.1fs] %s", time.Since(t0).Seconds(), fmt.Sprintf(format, args...))
	}
	dir, err := os.MkdirTemp("", "realstack-agent-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() || os.Getenv("REALSTACK_KEEP") != "" {
			t.Logf("the stack's logs are kept in %s/logs", dir)
			return
		}
		_ = os.RemoveAll(dir)
	})
	ready := startStack(t, build, dir, withAgent)
	step("stack up (%s): %s", ready.StartedIn, dir)
	e := newEnv(t, ctx, ready, step)
	e.build, e.dir = build, dir
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "agent-e2e"}}
	e.must(e.c.Create(ctx, ns))
	e.ns = ns.Name
	go e.playCAPO(ctx)
	t.Cleanup(func() {
		if d := time.Since(t0); d > 4*time.Minute {
			t.Logf("%s took %s (more than the 4 minutes it should)", t.Name(), d.Round(time.Second))
		}
	})
	return e, step
}

// ---- the stack --------------------------------------------------------------------------------

type readyFile struct {
	Kubeconfig string `json:"kubeconfig"`
	StartedIn  string `json:"started_in"`
	Parts      map[string]struct {
		Pid        int    `json:"pid"`
		Log        string `json:"log"`
		HealthPort int    `json:"health_port"`
	} `json:"parts"`
}

func startStack(t *testing.T, build, dir string, withAgent bool) *readyFile {
	t.Helper()
	cmd := exec.Command(filepath.Join(build, "bin", "stackctl"), "up", "--stack", build, "--dir", dir,
		"--providers", "capi-core,capi-bootstrap,capi-controlplane", "--crds", "capo",
		fmt.Sprintf("--node-agent=%v", withAgent))
	out, err := os.Create(filepath.Join(dir, "stackctl.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting stackctl: %v", err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(15 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	})
	deadline := time.After(3 * time.Minute)
	for {
		select {
		case err := <-exited:
			b, _ := os.ReadFile(filepath.Join(dir, "stackctl.log"))
			t.Fatalf("stackctl exited (%v) before it was ready:\n%s", err, b)
		case <-deadline:
			t.Fatalf("stackctl was not ready within 3 minutes (%s)", filepath.Join(dir, "stackctl.log"))
		case <-time.After(200 * time.Millisecond):
		}
		b, err := os.ReadFile(filepath.Join(dir, "ready.json"))
		if err != nil {
			continue
		}
		r := &readyFile{}
		if err := json.Unmarshal(b, r); err != nil {
			t.Fatalf("ready.json: %v", err)
		}
		if _, ok := r.Parts["node-agent"]; !ok && withAgent {
			t.Fatalf("ready.json has no node-agent part: %s", b)
		}
		return r
	}
}

// ---- the test's environment ---------------------------------------------------------------------

type env struct {
	t        *testing.T
	ctx      context.Context
	c        client.Client
	ready    *readyFile
	step     func(string, ...any)
	ns       string
	build    string
	dir      string
	agent    *exec.Cmd // the test's own node agent, if it runs one
	agentLog string

	mu       sync.Mutex
	hosts    map[string]string // cluster -> its API server's "floating IP"
	capoErrs []string
}

func newEnv(t *testing.T, ctx context.Context, ready *readyFile, step func(string, ...any)) *env {
	cfg, err := clientcmd.BuildConfigFromFlags("", ready.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 100, 200
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme,
		bootstrapv1.AddToScheme, controlplanev1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	ctrllog.SetLogger(logr.Discard()) // the clients' warnings (deprecated fields) are not the test's
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return &env{t: t, ctx: ctx, c: c, ready: ready, step: step, hosts: map[string]string{}}
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

func conditionTrue(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

// eventually polls f until it is true; on timeout it fails with f's last word.
func (e *env) eventually(what string, timeout time.Duration, f func() (bool, string)) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, msg := f()
		if ok {
			return
		}
		last = msg
		if time.Now().After(deadline) || e.ctx.Err() != nil {
			e.t.Fatalf("not within %s: %s\nlast seen: %s", timeout, what, last)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// ---- the objects magnum-capi would create -------------------------------------------------------

func newCA(cn string, useRSA bool) (certPEM, keyPEM []byte) {
	var signer crypto.Signer
	var keyBlock *pem.Block
	if useRSA {
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			panic(err)
		}
		signer, keyBlock = key, &pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}
	} else {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		der, _ := x509.MarshalECPrivateKey(key)
		signer, keyBlock = key, &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(10 * 365 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, signer.Public(), signer)
	if err != nil {
		panic(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(keyBlock)
}

func (e *env) secret(cl, name string, data map[string][]byte) {
	e.must(e.c.Create(e.ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: name, Labels: map[string]string{clusterv1.ClusterNameLabel: cl}},
		Type:       clusterv1.ClusterSecretType, Data: data,
	}))
}

func (e *env) unstructured(cl string, gvk schema.GroupVersionKind, name string, spec map[string]any) {
	u := &unstructured.Unstructured{Object: map[string]any{"spec": spec}}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(e.ns)
	u.SetName(name)
	u.SetLabels(map[string]string{clusterv1.ClusterNameLabel: cl})
	e.must(e.c.Create(e.ctx, u))
}

func clusterMeta(ns, name string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: ns, Name: name}
}

func ref(group, kind, name string) clusterv1.ContractVersionedObjectReference {
	return clusterv1.ContractVersionedObjectReference{APIGroup: group, Kind: kind, Name: name}
}

// clusterSpec is a cluster as magnum-capi would create it.
type clusterSpec struct {
	name       string
	host       string // the API server's floating IP CAPO will report
	useRSA     bool   // RSA CAs (Cluster API's own kind) instead of magnum-capi's ECDSA ones
	workers    int32  // md-0's replicas
	neverJoins bool   // and a MachineDeployment md-nj of one server that never joins
}

func (e *env) createCluster(spec clusterSpec) {
	cl := spec.name
	e.mu.Lock()
	e.hosts[cl] = spec.host
	e.mu.Unlock()
	for _, n := range []string{"ca", "etcd", "proxy"} {
		crt, key := newCA(cl+"-"+n, spec.useRSA)
		e.secret(cl, cl+"-"+n, map[string][]byte{"tls.crt": crt, "tls.key": key})
	}
	saKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	saDER, _ := x509.MarshalECPrivateKey(saKey)
	saPub, _ := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	e.secret(cl, cl+"-sa", map[string][]byte{
		"tls.crt": pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: saPub}),
		"tls.key": pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: saDER}),
	})

	e.unstructured(cl, oscGVK, cl, map[string]any{
		"identityRef":                map[string]any{"cloudName": "openstack", "name": cl + "-cloud-config"},
		"disableAPIServerFloatingIP": false,
	})
	machineSpec := func(flavor string) map[string]any {
		return map[string]any{"template": map[string]any{"spec": map[string]any{
			"flavor": flavor, "image": map[string]any{"filter": map[string]any{"name": "ubuntu-2404-kube-" + fromVersion}},
		}}}
	}
	e.unstructured(cl, osmtGVK, cl+"-control-plane", machineSpec("m1.medium"))

	nodeRegistration := bootstrapv1.NodeRegistrationOptions{
		Name:             "{{ local_hostname }}",
		KubeletExtraArgs: []bootstrapv1.Arg{{Name: "cloud-provider", Value: ptr.To("external")}},
	}
	e.must(e.c.Create(e.ctx, &controlplanev1.KubeadmControlPlane{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: cl + "-control-plane"},
		Spec: controlplanev1.KubeadmControlPlaneSpec{
			Replicas: ptr.To(int32(1)),
			Version:  fromVersion,
			MachineTemplate: controlplanev1.KubeadmControlPlaneMachineTemplate{
				Spec: controlplanev1.KubeadmControlPlaneMachineTemplateSpec{
					InfrastructureRef: ref(infraGroup, "OpenStackMachineTemplate", cl+"-control-plane"),
				},
			},
			KubeadmConfigSpec: bootstrapv1.KubeadmConfigSpec{
				ClusterConfiguration: bootstrapv1.ClusterConfiguration{
					DNS: bootstrapv1.DNS{ImageTag: fromCoreDNSTag},
				},
				InitConfiguration: bootstrapv1.InitConfiguration{NodeRegistration: nodeRegistration},
				JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nodeRegistration},
			},
		},
	}))
	type md struct {
		name     string
		replicas int32
		flavor   string
	}
	mds := []md{{"md-0", spec.workers, "m1.small"}}
	if spec.neverJoins {
		mds = append(mds, md{"md-nj", 1, "m1.small-never-joins"})
	}
	for _, md := range mds {
		e.unstructured(cl, osmtGVK, cl+"-"+md.name, machineSpec(md.flavor))
		e.must(e.c.Create(e.ctx, &bootstrapv1.KubeadmConfigTemplate{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: cl + "-" + md.name},
			Spec: bootstrapv1.KubeadmConfigTemplateSpec{Template: bootstrapv1.KubeadmConfigTemplateResource{
				Spec: bootstrapv1.KubeadmConfigSpec{JoinConfiguration: bootstrapv1.JoinConfiguration{NodeRegistration: nodeRegistration}},
			}},
		}))
		labels := map[string]string{clusterv1.ClusterNameLabel: cl, "nodegroup": md.name}
		e.must(e.c.Create(e.ctx, &clusterv1.MachineDeployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: cl + "-" + md.name, Labels: labels},
			Spec: clusterv1.MachineDeploymentSpec{
				ClusterName: cl,
				Replicas:    ptr.To(md.replicas),
				Selector:    metav1.LabelSelector{MatchLabels: labels},
				Template: clusterv1.MachineTemplateSpec{
					ObjectMeta: clusterv1.ObjectMeta{Labels: labels},
					Spec: clusterv1.MachineSpec{
						ClusterName: cl,
						Version:     fromVersion,
						Bootstrap: clusterv1.Bootstrap{ConfigRef: ref(bootstrapv1.GroupVersion.Group, "KubeadmConfigTemplate",
							cl+"-"+md.name)},
						InfrastructureRef: ref(infraGroup, "OpenStackMachineTemplate", cl+"-"+md.name),
					},
				},
			},
		}))
	}
	e.must(e.c.Create(e.ctx, &clusterv1.Cluster{
		ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: cl},
		Spec: clusterv1.ClusterSpec{
			ClusterNetwork: clusterv1.ClusterNetwork{
				Pods:     clusterv1.NetworkRanges{CIDRBlocks: []string{"10.100.0.0/16"}},
				Services: clusterv1.NetworkRanges{CIDRBlocks: []string{"10.254.0.0/16"}},
			},
			ControlPlaneRef:   ref(controlplanev1.GroupVersion.Group, "KubeadmControlPlane", cl+"-control-plane"),
			InfrastructureRef: ref(infraGroup, "OpenStackCluster", cl),
		},
	}))
}

// ---- CAPO's part --------------------------------------------------------------------------------

const capoFinalizer = "openstackmachine.infrastructure.cluster.x-k8s.io"

// playCAPO does what CAPO does with a cloud that answers at once: an OpenStackCluster gets its
// API server "floating IP" (a loopback address) and becomes ready; an OpenStackMachine whose
// Machine has bootstrap data gets a server (providerID, addresses) and becomes ready; a deleted
// one loses its server and CAPO's finalizer.
func (e *env) playCAPO(ctx context.Context) {
	ip := 10
	for ctx.Err() == nil {
		if err := e.capoOnce(ctx, &ip); err != nil && ctx.Err() == nil {
			e.mu.Lock()
			if len(e.capoErrs) < 20 {
				e.capoErrs = append(e.capoErrs, err.Error())
			}
			e.mu.Unlock()
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (e *env) capoOnce(ctx context.Context, ip *int) error {
	oscs := &unstructured.UnstructuredList{}
	oscs.SetGroupVersionKind(oscGVK)
	if err := e.c.List(ctx, oscs, client.InNamespace(e.ns)); err != nil {
		return err
	}
	for i := range oscs.Items {
		o := &oscs.Items[i]
		if o.GetDeletionTimestamp() != nil {
			if err := removeFinalizers(ctx, e.c, o); err != nil {
				return err
			}
			continue
		}
		if ready, _, _ := unstructured.NestedBool(o.Object, "status", "ready"); ready {
			continue
		}
		e.mu.Lock()
		host := e.hosts[o.GetName()]
		e.mu.Unlock()
		if host == "" {
			continue
		}
		patch := client.MergeFrom(o.DeepCopy())
		o.SetFinalizers([]string{"openstackcluster.infrastructure.cluster.x-k8s.io"})
		_ = unstructured.SetNestedMap(o.Object, map[string]any{"host": host, "port": int64(6443)}, "spec", "controlPlaneEndpoint")
		if err := e.c.Patch(ctx, o, patch); err != nil {
			return err
		}
		patch = client.MergeFrom(o.DeepCopy())
		_ = unstructured.SetNestedField(o.Object, true, "status", "ready")
		_ = unstructured.SetNestedField(o.Object, true, "status", "initialization", "provisioned")
		if err := e.c.Status().Patch(ctx, o, patch); err != nil {
			return err
		}
	}

	osms := &unstructured.UnstructuredList{}
	osms.SetGroupVersionKind(osmGVK)
	if err := e.c.List(ctx, osms, client.InNamespace(e.ns)); err != nil {
		return err
	}
	for i := range osms.Items {
		o := &osms.Items[i]
		if o.GetDeletionTimestamp() != nil {
			if err := removeFinalizers(ctx, e.c, o); err != nil {
				return err
			}
			continue
		}
		if ready, _, _ := unstructured.NestedBool(o.Object, "status", "ready"); ready {
			continue
		}
		// CAPO creates the server once the Machine's bootstrap data exists.
		var machine *clusterv1.Machine
		for _, or := range o.GetOwnerReferences() {
			if or.Kind == "Machine" {
				m := &clusterv1.Machine{}
				if err := e.c.Get(ctx, client.ObjectKey{Namespace: e.ns, Name: or.Name}, m); err == nil {
					machine = m
				}
			}
		}
		if machine == nil || machine.Spec.Bootstrap.DataSecretName == nil {
			continue
		}
		patch := client.MergeFrom(o.DeepCopy())
		o.SetFinalizers([]string{capoFinalizer})
		_ = unstructured.SetNestedField(o.Object, "openstack:///"+string(uuid.NewUUID()), "spec", "providerID")
		if err := e.c.Patch(ctx, o, patch); err != nil {
			return err
		}
		*ip++
		patch = client.MergeFrom(o.DeepCopy())
		_ = unstructured.SetNestedField(o.Object, true, "status", "ready")
		_ = unstructured.SetNestedField(o.Object, true, "status", "initialization", "provisioned")
		_ = unstructured.SetNestedField(o.Object, "ACTIVE", "status", "instanceState")
		_ = unstructured.SetNestedSlice(o.Object, []any{
			map[string]any{"type": "InternalIP", "address": fmt.Sprintf("10.6.0.%d", *ip)},
		}, "status", "addresses")
		if err := e.c.Status().Patch(ctx, o, patch); err != nil {
			return err
		}
	}
	return nil
}

func removeFinalizers(ctx context.Context, c client.Client, o *unstructured.Unstructured) error {
	if len(o.GetFinalizers()) == 0 {
		return nil
	}
	patch := client.MergeFrom(o.DeepCopy())
	o.SetFinalizers(nil)
	if err := c.Patch(ctx, o, patch); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return nil
}

// ---- waiting and checking -----------------------------------------------------------------------

func (e *env) kcp(cl string) *controlplanev1.KubeadmControlPlane {
	k := &controlplanev1.KubeadmControlPlane{}
	if err := e.c.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: cl + "-control-plane"}, k); err != nil {
		return nil
	}
	return k
}

func (e *env) patchKCP(cl string, f func(*controlplanev1.KubeadmControlPlane)) {
	e.t.Helper()
	k := e.kcp(cl)
	if k == nil {
		e.t.Fatal("no KubeadmControlPlane")
	}
	patch := client.MergeFrom(k.DeepCopy())
	f(k)
	e.must(e.c.Patch(e.ctx, k, patch))
}

func kcpSummary(k *controlplanev1.KubeadmControlPlane) string {
	var conds []string
	for _, c := range k.Status.Conditions {
		if c.Status != metav1.ConditionTrue || c.Type == controlplanev1.KubeadmControlPlaneAvailableCondition {
			conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, strings.ReplaceAll(c.Message, "\n", " ")))
		}
	}
	return fmt.Sprintf("replicas=%d ready=%d available=%d upToDate=%d version=%s; %s",
		ptr.Deref(k.Status.Replicas, 0), ptr.Deref(k.Status.ReadyReplicas, 0), ptr.Deref(k.Status.AvailableReplicas, 0),
		ptr.Deref(k.Status.UpToDateReplicas, 0), k.Status.Version, strings.Join(conds, "; "))
}

func (e *env) waitKCP(cl, what string, timeout time.Duration, ok func(*controlplanev1.KubeadmControlPlane) bool) {
	e.t.Helper()
	e.eventually(cl+": KubeadmControlPlane "+what, timeout, func() (bool, string) {
		k := e.kcp(cl)
		if k == nil {
			return false, "no KubeadmControlPlane"
		}
		return ok(k), kcpSummary(k)
	})
}

func (e *env) waitMD(cl, name string, ready int32) {
	e.t.Helper()
	e.eventually(fmt.Sprintf("%s: MachineDeployment %s with %d ready replicas", cl, name, ready), 3*time.Minute, func() (bool, string) {
		md := &clusterv1.MachineDeployment{}
		if err := e.c.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: cl + "-" + name}, md); err != nil {
			return false, err.Error()
		}
		return ptr.Deref(md.Status.ReadyReplicas, 0) == ready && ptr.Deref(md.Status.AvailableReplicas, 0) == ready,
			fmt.Sprintf("replicas=%d ready=%d available=%d", ptr.Deref(md.Status.Replicas, 0),
				ptr.Deref(md.Status.ReadyReplicas, 0), ptr.Deref(md.Status.AvailableReplicas, 0))
	})
}

func (e *env) controlPlaneMachines(cl string) map[string]*clusterv1.Machine {
	ms := &clusterv1.MachineList{}
	if err := e.c.List(e.ctx, ms, client.InNamespace(e.ns), client.HasLabels{clusterv1.MachineControlPlaneLabel},
		client.MatchingLabels{clusterv1.ClusterNameLabel: cl}); err != nil {
		return nil
	}
	out := map[string]*clusterv1.Machine{}
	for i := range ms.Items {
		out[ms.Items[i].Name] = &ms.Items[i]
	}
	return out
}

// workload is a client of the workload cluster, from the kubeconfig KCP wrote.
func (e *env) workload(cl string) client.Client {
	e.t.Helper()
	s := &corev1.Secret{}
	e.must(e.c.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: cl + "-kubeconfig"}, s))
	cfg, err := clientcmd.RESTConfigFromKubeConfig(s.Data["value"])
	e.must(err)
	e.mu.Lock()
	host := e.hosts[cl]
	e.mu.Unlock()
	if !strings.Contains(cfg.Host, host) {
		e.t.Fatalf("the kubeconfig points at %s, not at %s", cfg.Host, host)
	}
	c, err := client.New(cfg, client.Options{})
	e.must(err)
	return c
}

// checkWorkload: the workload cluster has cp control-plane Nodes of version, as many etcd members
// (Pods) and static Pods, and workers Ready worker Nodes; every Node is Ready and carries the
// providerID of a Machine.
func (e *env) checkWorkload(cl string, cp int, version string, workers int) {
	e.t.Helper()
	wc := e.workload(cl)
	e.eventually(fmt.Sprintf("%s: %d control-plane Nodes of %s and %d workers in the workload cluster", cl, cp, version, workers), time.Minute, func() (bool, string) {
		nodes := &corev1.NodeList{}
		if err := wc.List(e.ctx, nodes); err != nil {
			return false, err.Error()
		}
		ms := &clusterv1.MachineList{}
		if err := e.c.List(e.ctx, ms, client.InNamespace(e.ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cl}); err != nil {
			return false, err.Error()
		}
		providerIDs := map[string]string{}
		for _, m := range ms.Items {
			providerIDs[m.Spec.ProviderID] = m.Name
		}
		gotCP, gotWorkers := 0, 0
		var seen []string
		for _, n := range nodes.Items {
			_, isCP := n.Labels["node-role.kubernetes.io/control-plane"]
			seen = append(seen, fmt.Sprintf("%s(cp=%v,%s)", n.Name, isCP, n.Status.NodeInfo.KubeletVersion))
			if providerIDs[n.Spec.ProviderID] == "" {
				return false, fmt.Sprintf("Node %s has providerID %q of no Machine", n.Name, n.Spec.ProviderID)
			}
			if isCP && n.Status.NodeInfo.KubeletVersion != version {
				return false, "control-plane Node of another version: " + strings.Join(seen, " ")
			}
			if isCP {
				gotCP++
			} else {
				gotWorkers++
			}
		}
		if gotCP != cp || gotWorkers != workers {
			return false, "Nodes: " + strings.Join(seen, " ")
		}
		pods := &corev1.PodList{}
		if err := wc.List(e.ctx, pods, client.InNamespace(metav1.NamespaceSystem), client.MatchingLabels{"tier": "control-plane"}); err != nil {
			return false, err.Error()
		}
		count := map[string]int{}
		for _, p := range pods.Items {
			count[p.Labels["component"]]++
		}
		for _, c := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			if count[c] != cp {
				return false, fmt.Sprintf("static Pods: %v", count)
			}
		}
		return true, ""
	})
}

// checkUpgradedAddons: KCP updated kubeadm-config, the kube-proxy DaemonSet and CoreDNS (its
// Deployment and its Corefile, migrated with a backup) in the workload cluster.
func (e *env) checkUpgradedAddons(cl string) {
	e.t.Helper()
	wc := e.workload(cl)
	e.eventually("kubeadm-config, kube-proxy and CoreDNS upgraded", time.Minute, func() (bool, string) {
		cm := &corev1.ConfigMap{}
		if err := wc.Get(e.ctx, client.ObjectKey{Namespace: "kube-system", Name: "kubeadm-config"}, cm); err != nil {
			return false, err.Error()
		}
		if !strings.Contains(cm.Data["ClusterConfiguration"], "kubernetesVersion: "+toVersion) {
			return false, "kubeadm-config: " + cm.Data["ClusterConfiguration"]
		}
		if !strings.Contains(cm.Data["ClusterConfiguration"], "imageTag: "+toCoreDNSTag) {
			return false, "kubeadm-config (dns): " + cm.Data["ClusterConfiguration"]
		}
		ds := &unstructured.Unstructured{}
		ds.SetGroupVersionKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "DaemonSet"})
		if err := wc.Get(e.ctx, client.ObjectKey{Namespace: "kube-system", Name: "kube-proxy"}, ds); err != nil {
			return false, err.Error()
		}
		if img := firstImage(ds); img != "registry.k8s.io/kube-proxy:"+toVersion {
			return false, "kube-proxy image " + img
		}
		dep := &unstructured.Unstructured{}
		dep.SetGroupVersionKind(schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"})
		if err := wc.Get(e.ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, dep); err != nil {
			return false, err.Error()
		}
		if img := firstImage(dep); img != "registry.k8s.io/coredns/coredns:"+toCoreDNSTag {
			return false, "coredns image " + img
		}
		core := &corev1.ConfigMap{}
		if err := wc.Get(e.ctx, client.ObjectKey{Namespace: "kube-system", Name: "coredns"}, core); err != nil {
			return false, err.Error()
		}
		if core.Data["Corefile-backup"] == "" || !strings.Contains(core.Data["Corefile"], "kubernetes cluster.local") {
			return false, fmt.Sprintf("coredns ConfigMap: %v", core.Data)
		}
		return true, ""
	})
}

func firstImage(u *unstructured.Unstructured) string {
	cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
	if len(cs) == 0 {
		return ""
	}
	img, _ := cs[0].(map[string]any)["image"].(string)
	return img
}

// checkNeverJoins: the never-joins worker's server is up (its Machine has a providerID) but it has
// no Node, so its Machine has no nodeRef.
func (e *env) checkNeverJoins(cl string) {
	e.t.Helper()
	ms := &clusterv1.MachineList{}
	e.must(e.c.List(e.ctx, ms, client.InNamespace(e.ns), client.MatchingLabels{"nodegroup": "md-nj", clusterv1.ClusterNameLabel: cl}))
	if len(ms.Items) != 1 {
		e.t.Fatalf("%d never-joins Machines, want 1", len(ms.Items))
	}
	m := ms.Items[0]
	if m.Spec.ProviderID == "" {
		e.t.Fatalf("the never-joins Machine %s has no providerID: its server was never provisioned", m.Name)
	}
	if m.Status.NodeRef.IsDefined() {
		e.t.Fatalf("the never-joins Machine %s has a Node: %s", m.Name, m.Status.NodeRef.Name)
	}
	nodes := &corev1.NodeList{}
	e.must(e.workload(cl).List(e.ctx, nodes))
	for _, n := range nodes.Items {
		if n.Spec.ProviderID == m.Spec.ProviderID {
			e.t.Fatalf("the never-joins server has Node %s", n.Name)
		}
	}
}

func (e *env) deleteCluster(cl string) {
	e.t.Helper()
	e.must(e.c.Delete(e.ctx, &clusterv1.Cluster{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: cl}}))
	e.waitDeleted(cl)
}

func (e *env) waitDeleted(cl string) {
	e.t.Helper()
	e.eventually(cl+": the Cluster, its Machines and OpenStackMachines gone", 3*time.Minute, func() (bool, string) {
		var left []string
		if err := e.c.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: cl}, &clusterv1.Cluster{}); err == nil {
			left = append(left, "Cluster")
		}
		ms := &clusterv1.MachineList{}
		if err := e.c.List(e.ctx, ms, client.InNamespace(e.ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cl}); err == nil {
			for _, m := range ms.Items {
				left = append(left, "Machine/"+m.Name)
			}
		}
		osms := &unstructured.UnstructuredList{}
		osms.SetGroupVersionKind(osmGVK)
		if err := e.c.List(e.ctx, osms, client.InNamespace(e.ns), client.MatchingLabels{clusterv1.ClusterNameLabel: cl}); err == nil {
			for _, o := range osms.Items {
				left = append(left, "OpenStackMachine/"+o.GetName())
			}
		}
		return len(left) == 0, "left: " + strings.Join(left, ", ")
	})
	e.mu.Lock()
	host := e.hosts[cl]
	e.mu.Unlock()
	e.eventually(cl+": the workload API closed", 30*time.Second, func() (bool, string) {
		conn, err := net.DialTimeout("tcp", net.JoinHostPort(host, "6443"), time.Second)
		if err != nil {
			return true, ""
		}
		_ = conn.Close()
		return false, "still accepting connections on " + host + ":6443"
	})
}

// dumpOnFailure shows what the controllers said: the Machines' conditions and the end of every
// part's log.
func (e *env) dumpOnFailure() {
	if !e.t.Failed() {
		return
	}
	e.mu.Lock()
	if len(e.capoErrs) > 0 {
		e.t.Logf("CAPO's part saw errors:\n  %s", strings.Join(e.capoErrs, "\n  "))
	}
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ms := &clusterv1.MachineList{}
	if e.ns != "" && e.c.List(ctx, ms, client.InNamespace(e.ns)) == nil {
		for _, m := range ms.Items {
			var conds []string
			for _, c := range m.Status.Conditions {
				if c.Status != metav1.ConditionTrue {
					conds = append(conds, fmt.Sprintf("%s=%s(%s: %s)", c.Type, c.Status, c.Reason, strings.ReplaceAll(c.Message, "\n", " ")))
				}
			}
			e.t.Logf("Machine %s phase=%s node=%s: %s", m.Name, m.Status.Phase, m.Status.NodeRef.Name, strings.Join(conds, "; "))
		}
	}
	logs := []string{}
	for n, p := range e.ready.Parts {
		if n != "etcd" && n != "kube-apiserver" && n != "kube-controller-manager" {
			logs = append(logs, p.Log)
		}
	}
	if e.agentLog != "" {
		logs = append(logs, e.agentLog)
	}
	sort.Strings(logs)
	for _, l := range logs {
		e.t.Logf("---- the end of %s ----\n%s", l, tail(l, 40))
	}
}

func tail(path string, n int) string {
	f, err := os.Open(path)
	if err != nil {
		return err.Error()
	}
	defer func() { _ = f.Close() }()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
		if len(lines) > n {
			lines = lines[1:]
		}
	}
	return strings.Join(lines, "\n")
}
