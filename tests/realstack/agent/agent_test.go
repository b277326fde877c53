package main

// Unit tests of the agent's parts (no stack needed).

import (
	"bytes"
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"math/big"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/go-logr/logr"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Both kinds of CA sign: magnum-capi's ECDSA (SEC 1 or PKCS#8) and Cluster API's RSA (PKCS#1).
func TestCAKinds(t *testing.T) {
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	ecDER, _ := x509.MarshalECPrivateKey(ecKey)
	pkcs8, _ := x509.MarshalPKCS8PrivateKey(ecKey)
	for name, c := range map[string]struct {
		cert, key []byte
	}{
		"ecdsa":  {newCAOf(t, ecKey), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER})},
		"pkcs8":  {newCAOf(t, ecKey), pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8})},
		"rsa":    {newCAOf(t, rsaKey), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(rsaKey)})},
		"rsa+ec": {newCAOf(t, rsaKey), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: ecDER})},
	} {
		t.Run(name, func(t *testing.T) {
			ca, err := parseCA(c.cert, c.key)
			if name == "rsa+ec" {
				if err == nil {
					t.Fatal("a key that is not the certificate's was accepted")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			leaf, err := ca.issue(apiServerLeaf("127.100.0.9", firstServiceIP("10.96.0.0/12"), "cluster.local"))
			if err != nil {
				t.Fatal(err)
			}
			pool := x509.NewCertPool()
			pool.AddCert(ca.cert)
			if _, err := leaf.Leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.100.0.9"}); err != nil {
				t.Fatalf("the serving certificate does not verify for the endpoint: %v", err)
			}
			if leaf.Leaf.Subject.CommonName != "kube-apiserver" {
				t.Fatalf("CN %q, KCP looks for kube-apiserver", leaf.Leaf.Subject.CommonName)
			}
			if got := firstServiceIP("10.96.0.0/12").String(); got != "10.96.0.1" {
				t.Fatalf("first service IP %s", got)
			}
		})
	}
}

func newCAOf(t *testing.T, key crypto.Signer) []byte {
	t.Helper()
	tmpl := &x509.Certificate{SerialNumber: bigOne(), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign, NotBefore: timeNow().Add(-3600e9), NotAfter: timeNow().Add(3600e9 * 24)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

func TestNeverJoins(t *testing.T) {
	for spec, want := range map[string]bool{
		`{"image":{"filter":{"name":"ubuntu-never-joins"}},"flavor":"m1.small"}`:  true,
		`{"image":{"id":"never-joins-1234"},"flavor":"m1.small"}`:                 true,
		`{"image":{"imageRef":{"name":"img-never-joins"}},"flavor":"m1.small"}`:   true,
		`{"image":{"filter":{"name":"ubuntu"}},"flavor":"m1.never-joins"}`:        true,
		`{"image":{"filter":{"name":"ubuntu"}},"flavorID":"never-joins"}`:         true,
		`{"image":{"filter":{"name":"ubuntu","tags":["a"]}},"flavor":"m1.small"}`: false,
	} {
		u := &unstructured.Unstructured{Object: map[string]any{}}
		var m map[string]any
		if err := json.Unmarshal([]byte(spec), &m); err != nil {
			t.Fatal(err)
		}
		u.Object["spec"] = m
		if got := neverJoinsReason(u) != ""; got != want {
			t.Errorf("%s: never joins %v, want %v", spec, got, want)
		}
	}
}

func TestParsePath(t *testing.T) {
	for path, want := range map[string]apiPath{
		"/api/v1/nodes/n1":                                  {version: "v1", resource: "nodes", name: "n1"},
		"/api/v1/namespaces/kube-system":                    {version: "v1", resource: "namespaces", name: "kube-system"},
		"/api/v1/namespaces/ns1/status":                     {version: "v1", resource: "namespaces", name: "ns1", subresource: "status"},
		"/api/v1/namespaces/kube-system/pods/p/portforward": {version: "v1", namespace: "kube-system", resource: "pods", name: "p", subresource: "portforward"},
		"/apis/apps/v1/namespaces/kube-system/deployments":  {group: "apps", version: "v1", namespace: "kube-system", resource: "deployments"},
		"/apis/rbac.authorization.k8s.io/v1/clusterroles/x": {group: "rbac.authorization.k8s.io", version: "v1", resource: "clusterroles", name: "x"},
	} {
		if got := parsePath(path); got != want {
			t.Errorf("%s: %+v, want %+v", path, got, want)
		}
	}
}

// A strategic-merge patch that removes one taint keeps the others (the in-memory store alone
// would replace the list); resource versions go out offset and come back in.
func TestStrategicMergePatchAndVersions(t *testing.T) {
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	w := newWorkloads(testLogger(), scheme)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := w.start(ctx); err != nil {
		t.Fatal(err)
	}
	wl := &Workload{group: "ns/c", addr: "127.0.0.1:1"}
	w.manager.AddResourceGroup(wl.group)
	w.byAddr[wl.addr] = wl
	c := w.client(wl)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: corev1.NodeSpec{Taints: []corev1.Taint{
		{Key: "a", Effect: corev1.TaintEffectNoSchedule}, {Key: "node.cluster.x-k8s.io/uninitialized", Effect: corev1.TaintEffectNoSchedule}}}}
	if err := c.Create(ctx, node); err != nil {
		t.Fatal(err)
	}
	if node.UID == "" {
		t.Fatal("no UID")
	}
	// The patch the Machine controller sends when it drops the uninitialized taint.
	before, _ := json.Marshal(node)
	dropped := node.DeepCopy()
	dropped.Spec.Taints = dropped.Spec.Taints[:1]
	after, _ := json.Marshal(dropped)
	patch, err := strategicpatch.CreateTwoWayMergePatch(before, after, &corev1.Node{})
	if err != nil {
		t.Fatal(err)
	}
	req := httptest.NewRequest(http.MethodPatch, "/api/v1/nodes/n1", bytes.NewReader(patch))
	req.Header.Set("Content-Type", "application/strategic-merge-patch+json")
	if err := w.normalizePatch(req, wl, parsePath(req.URL.Path)); err != nil {
		t.Fatal(err)
	}
	body := new(bytes.Buffer)
	_, _ = body.ReadFrom(req.Body)
	if err := c.Patch(ctx, node, client.RawPatch("application/merge-patch+json", body.Bytes())); err != nil {
		t.Fatal(err)
	}
	got := &corev1.Node{}
	if err := c.Get(ctx, client.ObjectKey{Name: "n1"}, got); err != nil {
		t.Fatal(err)
	}
	if len(got.Spec.Taints) != 1 || got.Spec.Taints[0].Key != "a" {
		t.Fatalf("taints after the patch: %v", got.Spec.Taints)
	}

	rvs := w.rvs
	ext := rvs.external(got.ResourceVersion)
	if in, ok := rvs.internal(ext); !ok || in != got.ResourceVersion {
		t.Fatalf("%s -> %s -> %s", got.ResourceVersion, ext, in)
	}
	if _, ok := rvs.internal(got.ResourceVersion); ok {
		t.Fatal("a version of an earlier incarnation was taken for this one's")
	}
}

func bigOne() *big.Int        { return big.NewInt(1) }
func timeNow() time.Time      { return time.Now() }
func testLogger() logr.Logger { return logr.Discard() }
