package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/util/uuid"
	"sigs.k8s.io/controller-runtime/pkg/client"

	inmemoryruntime "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime"
	inmemoryclient "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime/client"
	inmemoryapi "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/server/api"
	inmemoryetcd "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/server/etcd"
)

// Workloads serves every workload cluster's API (and, behind it, its etcd members): one TLS
// listener per cluster on the cluster's own controlPlaneEndpoint, all sharing one handler that
// tells the clusters apart by the local address a request came in on. The objects live in Cluster
// API's in-memory store (one resource group per cluster), served by its fake API server and etcd
// handlers; this file adds what a real kube-apiserver does around them: TLS with certificates from
// the cluster's CAs, client-certificate authentication, strategic-merge and JSON patches,
// unconditional updates, UIDs, resource versions that survive an agent restart (rv.go), watch-lists
// from any version, the eviction subresource, /version and port-forwards to Pods that exist only.
type Workloads struct {
	log     logr.Logger
	manager inmemoryruntime.Manager
	scheme  *runtime.Scheme
	codecs  serializer.CodecFactory
	rvs     resourceVersions
	kinds   map[schema.GroupVersionResource]schema.GroupVersionKind

	mu     sync.RWMutex
	byAddr map[string]*Workload // "host:port" -> workload

	api  http.Handler
	etcd http.Handler
}

// Workload is one workload cluster's API server.
type Workload struct {
	group string // the resource group: "<namespace>/<name>" of the Cluster
	addr  string // host:port it listens on
	host  string
	uid   types.UID // the Cluster's

	certMu      sync.Mutex // guards the CAs, certificates, TLS configuration, etcd members, version
	clusterCA   *ca
	etcdCA      *ca // nil until the <cluster>-etcd Secret exists
	apiCert     *tls.Certificate
	tls         *tls.Config
	etcdCerts   map[string]*tls.Certificate // etcd Pod name -> serving certificate
	etcdMembers map[string]bool             // etcd Pods of running control-plane servers

	srv *http.Server

	// What the agent keeps about the servers it plays (see agent.go); guarded by the agent's
	// per-cluster lock.
	servers       map[string]*server
	initialized   bool // kubeadm init ran (cluster-wide objects exist)
	etcdClusterID string

	version string // the newest control-plane version, for /version (under certMu)
}

func (wl *Workload) setVersion(v string) {
	wl.certMu.Lock()
	defer wl.certMu.Unlock()
	wl.version = v
}

func (wl *Workload) getVersion() string {
	wl.certMu.Lock()
	defer wl.certMu.Unlock()
	return wl.version
}

func newWorkloads(log logr.Logger, scheme *runtime.Scheme) *Workloads {
	w := &Workloads{
		log:     log,
		manager: inmemoryruntime.NewManager(scheme),
		scheme:  scheme,
		codecs:  serializer.NewCodecFactory(scheme),
		rvs:     newResourceVersions(),
		kinds:   map[schema.GroupVersionResource]schema.GroupVersionKind{},
		byAddr:  map[string]*Workload{},
	}
	for gvk := range scheme.AllKnownTypes() {
		if strings.HasSuffix(gvk.Kind, "List") || gvk.Version == runtime.APIVersionInternal {
			continue
		}
		plural, _ := meta.UnsafeGuessKindToResource(gvk)
		w.kinds[plural] = gvk
	}
	resolver := func(host string) (string, error) {
		w.mu.RLock()
		defer w.mu.RUnlock()
		if wl, ok := w.byAddr[host]; ok {
			return wl.group, nil
		}
		return "", fmt.Errorf("no workload cluster serves %s", host)
	}
	w.api = inmemoryapi.NewAPIServerHandler(w.manager, log.WithName("api"), resolver)
	w.etcd = inmemoryetcd.NewEtcdServerHandler(w.manager, log.WithName("etcd"), resolver)
	return w
}

func (w *Workloads) start(ctx context.Context) error { return w.manager.Start(ctx) }

// client returns the in-memory client of a workload's objects.
func (w *Workloads) client(wl *Workload) inmemoryclient.Client {
	return groupClient{Client: w.manager.GetResourceGroup(wl.group).GetClient()}
}

// serve starts wl's listener. The resource group must not exist yet: a new listener starts an
// empty cluster.
func (w *Workloads) serve(wl *Workload) error {
	w.manager.AddResourceGroup(wl.group)
	wl.srv = &http.Server{
		Handler:           w,
		ReadHeaderTimeout: 30 * time.Second,
		TLSConfig: &tls.Config{
			MinVersion:         tls.VersionTLS12,
			GetCertificate:     wl.certificate,
			GetConfigForClient: wl.tlsConfig,
		},
	}
	ln, err := net.Listen("tcp", wl.addr)
	if err != nil {
		w.manager.DeleteResourceGroup(wl.group)
		return err
	}
	w.mu.Lock()
	w.byAddr[wl.addr] = wl
	w.mu.Unlock()
	go func() {
		if err := wl.srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			w.log.Error(err, "workload API server stopped", "cluster", wl.group, "address", wl.addr)
		}
	}()
	return nil
}

// stop closes wl's listener and every connection to it and forgets its objects.
func (w *Workloads) stop(wl *Workload) {
	w.mu.Lock()
	if w.byAddr[wl.addr] == wl {
		delete(w.byAddr, wl.addr)
	}
	w.mu.Unlock()
	if wl.srv != nil {
		_ = wl.srv.Close()
	}
	w.manager.DeleteResourceGroup(wl.group)
}

// setCAs (re)issues the serving certificates when the cluster's CAs are new or rotated.
func (wl *Workload) setCAs(clusterCA, etcdCA *ca, serviceIP net.IP, dnsDomain string) error {
	wl.certMu.Lock()
	defer wl.certMu.Unlock()
	if wl.etcdCerts == nil {
		wl.etcdCerts, wl.etcdMembers = map[string]*tls.Certificate{}, map[string]bool{}
	}
	sameEtcd := (wl.etcdCA == nil) == (etcdCA == nil) && (etcdCA == nil || bytes.Equal(wl.etcdCA.pem, etcdCA.pem))
	if wl.clusterCA != nil && bytes.Equal(wl.clusterCA.pem, clusterCA.pem) && sameEtcd {
		return nil
	}
	apiCert, err := clusterCA.issue(apiServerLeaf(wl.host, serviceIP, dnsDomain))
	if err != nil {
		return err
	}
	// Every certificate of each Secret's tls.crt is trusted, as kubeadm installs the bundle as a
	// machine's CA file: during a CA rotation clients signed by the old or the new CA both pass.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(clusterCA.pem)
	if etcdCA != nil {
		pool.AppendCertsFromPEM(etcdCA.pem)
	}
	wl.clusterCA, wl.etcdCA, wl.apiCert = clusterCA, etcdCA, apiCert
	if !sameEtcd {
		wl.etcdCerts = map[string]*tls.Certificate{}
	}
	wl.tls = &tls.Config{
		MinVersion:     tls.VersionTLS12,
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      pool,
		GetCertificate: wl.certificate,
		// Set here: the server's own NextProtos do not apply to a config from GetConfigForClient.
		// etcd's gRPC needs HTTP/2, port-forwards (SPDY) HTTP/1.1.
		NextProtos: []string{"h2", "http/1.1"},
	}
	return nil
}

func (wl *Workload) tlsConfig(*tls.ClientHelloInfo) (*tls.Config, error) {
	wl.certMu.Lock()
	defer wl.certMu.Unlock()
	return wl.tls, nil
}

func (wl *Workload) cas() (clusterCA, etcdCA *ca) {
	wl.certMu.Lock()
	defer wl.certMu.Unlock()
	return wl.clusterCA, wl.etcdCA
}

// certificate picks the serving certificate as a kubeadm node would answer: the etcd member's own
// one when the client asks for "etcd-<node>" (KCP's etcd client, through a port-forward), the
// kube-apiserver's otherwise.
func (wl *Workload) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := hello.ServerName
	wl.certMu.Lock()
	defer wl.certMu.Unlock()
	if wl.etcdCA == nil || !strings.HasPrefix(name, "etcd-") {
		return wl.apiCert, nil
	}
	if c, ok := wl.etcdCerts[name]; ok {
		return c, nil
	}
	if !wl.etcdMembers[name] {
		return wl.apiCert, nil
	}
	c, err := wl.etcdCA.issue(etcdLeaf(name, wl.host))
	if err != nil {
		return nil, err
	}
	wl.etcdCerts[name] = c
	return c, nil
}

// setEtcdMember adds or removes an etcd Pod whose name a client may ask the TLS server for.
func (wl *Workload) setEtcdMember(pod string, member bool) {
	wl.certMu.Lock()
	defer wl.certMu.Unlock()
	if member {
		wl.etcdMembers[pod] = true
		return
	}
	delete(wl.etcdMembers, pod)
	delete(wl.etcdCerts, pod)
}

// ---- the handler ------------------------------------------------------------------------------

func (w *Workloads) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	local, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if local == nil {
		http.Error(rw, "no local address", http.StatusInternalServerError)
		return
	}
	w.mu.RLock()
	wl := w.byAddr[local.String()]
	w.mu.RUnlock()
	if wl == nil {
		writeStatus(rw, apierrors.NewServiceUnavailable("this workload cluster is not served any more"))
		return
	}
	grpc := r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc")
	if !authenticated(r, wl, grpc) {
		writeStatus(rw, apierrors.NewUnauthorized("Unauthorized"))
		return
	}
	// The in-memory handlers find the cluster (and the port-forward target) by Host.
	r.Host = local.String()
	if grpc {
		w.etcd.ServeHTTP(rw, r)
		return
	}
	switch r.URL.Path {
	case "/version":
		w.version(rw, wl)
		return
	case "/healthz", "/readyz", "/livez":
		rw.Header().Set("Content-Type", "text/plain")
		_, _ = rw.Write([]byte("ok"))
		return
	case "/openapi/v2", "/openapi/v3":
		serveOpenAPI(rw, r, wl.getVersion())
		return
	}
	p := parsePath(r.URL.Path)
	switch {
	case p.subresource == "portforward":
		// A real kube-apiserver forwards to a Pod that exists only (KCP's etcd client relies on
		// that to skip a member whose Pod is gone).
		if !w.podExists(r.Context(), wl, p.namespace, p.name) {
			writeStatus(rw, apierrors.NewNotFound(corev1.Resource("pods"), p.name))
			return
		}
		w.api.ServeHTTP(rw, r)
		return
	case p.subresource == "eviction" && r.Method == http.MethodPost:
		w.evict(rw, r, wl, p)
		return
	case p.subresource == "status" && (r.Method == http.MethodPut || r.Method == http.MethodPatch || r.Method == http.MethodGet):
		// No status subresource in the in-memory handler: the object itself is updated.
		r.URL.Path = strings.TrimSuffix(r.URL.Path, "/status")
		r.URL.RawPath = ""
		p.subresource = ""
	}

	q := r.URL.Query()
	watch := q.Get("watch") == "true" || q.Get("watch") == "1"
	if rv := q.Get("resourceVersion"); rv != "" && rv != "0" {
		in, ok := w.rvs.internal(rv)
		switch {
		case !ok && watch:
			writeStatus(rw, apierrors.NewResourceExpired("too old resource version: "+rv))
			return
		case !ok || q.Get("sendInitialEvents") == "true":
			// A list (served from the current state anyway), or a watch-list: it wants every
			// object as ADDED, which the in-memory handler sends for a watch from no version.
			q.Del("resourceVersion")
		default:
			q.Set("resourceVersion", in)
		}
		r.URL.RawQuery = q.Encode()
	}

	if p.subresource == "" && p.name != "" {
		var err error
		switch r.Method {
		case http.MethodPatch:
			err = w.normalizePatch(r, wl, p)
		case http.MethodPut:
			err = w.normalizeUpdate(r, wl, p)
		}
		if err != nil {
			writeStatus(rw, err)
			return
		}
	}
	if r.Method == http.MethodPost && p.subresource == "" && p.name == "" && p.resource != "" {
		if err := w.normalizeCreate(r); err != nil {
			writeStatus(rw, err)
			return
		}
	}
	rvw := &rvWriter{ResponseWriter: rw, t: w.rvs, watch: watch}
	w.api.ServeHTTP(rvw, r)
	rvw.finish()
}

// authenticated: a client certificate from the cluster CA for the API (the admin kubeconfig KCP
// and CAPI use), from the etcd CA for etcd (KCP's etcd client). A TLS handshake without a client
// certificate is accepted, as the kube-apiserver accepts it (KCP reads the serving certificate's
// expiry that way), but no request is served to it.
func authenticated(r *http.Request, wl *Workload, grpc bool) bool {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		return false
	}
	want, etcdCA := wl.cas()
	if grpc {
		want = etcdCA
	}
	if want == nil {
		return false
	}
	for _, chain := range r.TLS.VerifiedChains {
		if chain[len(chain)-1].Equal(want.cert) {
			return true
		}
	}
	return false
}

func writeStatus(rw http.ResponseWriter, err error) {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		status = apierrors.NewInternalError(err)
	}
	s := status.Status()
	s.Kind, s.APIVersion = "Status", "v1"
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(int(s.Code))
	_ = json.NewEncoder(rw).Encode(s)
}

func (w *Workloads) version(rw http.ResponseWriter, wl *Workload) {
	v := wl.getVersion()
	if v == "" {
		v = "v0.0.0"
	}
	major, minor := "1", ""
	if parts := strings.Split(strings.TrimPrefix(v, "v"), "."); len(parts) > 1 {
		major, minor = parts[0], parts[1]
	}
	rw.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(rw).Encode(map[string]string{
		"major": major, "minor": minor, "gitVersion": v, "gitTreeState": "clean",
		"goVersion": "go1.26", "compiler": "gc", "platform": "linux/amd64",
	})
}

// apiPath is a parsed kube-apiserver request path.
type apiPath struct {
	group, version, namespace, resource, name, subresource string
}

func parsePath(path string) apiPath {
	parts := strings.Split(strings.Trim(path, "/"), "/")
	var p apiPath
	switch {
	case len(parts) >= 2 && parts[0] == "api":
		p.version, parts = parts[1], parts[2:]
	case len(parts) >= 3 && parts[0] == "apis":
		p.group, p.version, parts = parts[1], parts[2], parts[3:]
	default:
		return p
	}
	if len(parts) >= 2 && parts[0] == "namespaces" {
		// /api/v1/namespaces/<name>[/status|/finalize]: the Namespace itself.
		if len(parts) == 2 || (len(parts) == 3 && p.group == "" && (parts[2] == "status" || parts[2] == "finalize")) {
			p.resource, p.name = "namespaces", parts[1]
			if len(parts) == 3 {
				p.subresource = parts[2]
			}
			return p
		}
		p.namespace, parts = parts[1], parts[2:]
	}
	if len(parts) > 0 {
		p.resource = parts[0]
	}
	if len(parts) > 1 {
		p.name = parts[1]
	}
	if len(parts) > 2 {
		p.subresource = parts[2]
	}
	return p
}

func (w *Workloads) gvk(p apiPath) (schema.GroupVersionKind, bool) {
	gvk, ok := w.kinds[schema.GroupVersionResource{Group: p.group, Version: p.version, Resource: p.resource}]
	return gvk, ok
}

func (w *Workloads) podExists(ctx context.Context, wl *Workload, namespace, name string) bool {
	pod := &corev1.Pod{}
	err := w.client(wl).Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, pod)
	return err == nil && pod.DeletionTimestamp.IsZero()
}

// current reads the stored object a request names, as JSON.
func (w *Workloads) current(ctx context.Context, wl *Workload, p apiPath) (runtime.Object, []byte, error) {
	gvk, ok := w.gvk(p)
	if !ok {
		return nil, nil, apierrors.NewNotFound(schema.GroupResource{Group: p.group, Resource: p.resource}, p.name)
	}
	obj, err := w.scheme.New(gvk)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	if err := w.client(wl).Get(ctx, client.ObjectKey{Namespace: p.namespace, Name: p.name}, obj.(client.Object)); err != nil {
		return nil, nil, err
	}
	obj.GetObjectKind().SetGroupVersionKind(gvk)
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, nil, apierrors.NewInternalError(err)
	}
	return obj, b, nil
}

// normalizePatch turns a strategic-merge or JSON patch into the JSON merge patch that gives the
// same result: the in-memory store treats a strategic-merge patch as a merge patch (it replaces
// lists, e.g. a Node's taints, where the kube-apiserver merges them by key).
func (w *Workloads) normalizePatch(r *http.Request, wl *Workload, p apiPath) (err error) {
	defer func() {
		// strategicpatch panics on some malformed patches: a bad request, not a dead handler.
		if v := recover(); v != nil {
			err = apierrors.NewBadRequest(fmt.Sprintf("invalid patch: %v", v))
		}
	}()
	ct := r.Header.Get("Content-Type")
	if i := strings.Index(ct, ";"); i >= 0 {
		ct = ct[:i]
	}
	switch types.PatchType(ct) {
	case types.MergePatchType:
		body, err := io.ReadAll(r.Body)
		_ = r.Body.Close()
		if err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
		setBody(r, w.rvs.inbound(body))
		return nil
	case types.StrategicMergePatchType, types.JSONPatchType:
	case types.ApplyYAMLPatchType, types.ApplyCBORPatchType:
		return apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{Group: p.group, Resource: p.resource}, p.name,
			"server-side apply is not supported by the realstack node agent", 0, false)
	default:
		return apierrors.NewGenericServerResponse(http.StatusUnsupportedMediaType, "patch", schema.GroupResource{Group: p.group, Resource: p.resource}, p.name,
			fmt.Sprintf("unsupported patch type %q", ct), 0, false)
	}
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if types.PatchType(ct) == types.StrategicMergePatchType {
		body = w.rvs.inbound(body)
	}
	obj, original, err := w.current(r.Context(), wl, p)
	if err != nil {
		return err
	}
	var patched []byte
	if types.PatchType(ct) == types.JSONPatchType {
		jp, err := jsonpatch.DecodePatch(body)
		if err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
		if patched, err = jp.Apply(original); err != nil {
			return apierrors.NewInvalid(schema.GroupKind{Group: p.group, Kind: p.resource}, p.name, nil)
		}
	} else {
		if patched, err = strategicpatch.StrategicMergePatch(original, body, obj); err != nil {
			return apierrors.NewBadRequest(err.Error())
		}
	}
	merge, err := jsonpatch.CreateMergePatch(original, patched)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	// A precondition the patch carried (an optimistic lock) must still be checked.
	var want struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(patched, &want)
	if rv := want.Metadata.ResourceVersion; rv != "" {
		var m map[string]any
		_ = json.Unmarshal(merge, &m)
		md, _ := m["metadata"].(map[string]any)
		if md == nil {
			md = map[string]any{}
			m["metadata"] = md
		}
		md["resourceVersion"] = rv
		merge, _ = json.Marshal(m)
	}
	setBody(r, merge)
	r.Header.Set("Content-Type", string(types.MergePatchType))
	return nil
}

// decodeBody reads a request's object, JSON or protobuf (controller-runtime sends built-in kinds
// as protobuf); nil when it is neither, the body left for the handler to answer.
func (w *Workloads) decodeBody(r *http.Request) (client.Object, error) {
	body, err := io.ReadAll(r.Body)
	_ = r.Body.Close()
	if err != nil {
		return nil, apierrors.NewBadRequest(err.Error())
	}
	obj, gvk, err := w.codecs.UniversalDeserializer().Decode(body, nil, nil)
	co, ok := obj.(client.Object)
	if err != nil || !ok {
		setBody(r, body)
		return nil, nil
	}
	co.GetObjectKind().SetGroupVersionKind(*gvk)
	return co, nil
}

// encodeBody makes obj the request's body, as JSON.
func encodeBody(r *http.Request, obj client.Object) error {
	b, err := json.Marshal(obj)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	setBody(r, b)
	r.Header.Set("Content-Type", runtime.ContentTypeJSON)
	return nil
}

// normalizeUpdate makes an update without metadata.resourceVersion unconditional, as the
// kube-apiserver does (KCP updates the CoreDNS ConfigMap that way); the in-memory store would
// answer it with a conflict. It also keeps the object's UID.
func (w *Workloads) normalizeUpdate(r *http.Request, wl *Workload, p apiPath) error {
	obj, err := w.decodeBody(r)
	if err != nil || obj == nil {
		return err
	}
	if rv := obj.GetResourceVersion(); rv != "" {
		in, ok := w.rvs.internal(rv)
		if !ok {
			in = "0" // a version of an earlier incarnation: a conflict
		}
		obj.SetResourceVersion(in)
	}
	if obj.GetResourceVersion() == "" || obj.GetUID() == "" {
		cur, _, err := w.current(r.Context(), wl, p)
		if err != nil {
			return err
		}
		c := cur.(client.Object)
		if obj.GetResourceVersion() == "" {
			obj.SetResourceVersion(c.GetResourceVersion())
		}
		if obj.GetUID() == "" {
			obj.SetUID(c.GetUID())
		}
	}
	return encodeBody(r, obj)
}

// normalizeCreate gives a new object its UID (the in-memory store leaves it empty) and its name
// when it has a generateName.
func (w *Workloads) normalizeCreate(r *http.Request) error {
	obj, err := w.decodeBody(r)
	if err != nil || obj == nil {
		return err
	}
	if obj.GetUID() == "" {
		obj.SetUID(uuid.NewUUID())
	}
	if obj.GetName() == "" && obj.GetGenerateName() != "" {
		obj.SetName(obj.GetGenerateName() + utilrand.String(5))
	}
	return encodeBody(r, obj)
}

// evict answers a policy/v1 Eviction by deleting the Pod (there are no PodDisruptionBudgets to
// honour: nothing runs).
func (w *Workloads) evict(rw http.ResponseWriter, r *http.Request, wl *Workload, p apiPath) {
	c := w.client(wl)
	pod := &corev1.Pod{}
	if err := c.Get(r.Context(), client.ObjectKey{Namespace: p.namespace, Name: p.name}, pod); err != nil {
		writeStatus(rw, err)
		return
	}
	if err := c.Delete(r.Context(), pod); err != nil {
		writeStatus(rw, err)
		return
	}
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(http.StatusCreated)
	_ = json.NewEncoder(rw).Encode(metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"},
		Status: metav1.StatusSuccess, Code: http.StatusCreated})
}

func setBody(r *http.Request, b []byte) {
	r.Body = io.NopCloser(bytes.NewReader(b))
	r.ContentLength = int64(len(b))
	r.Header.Set("Content-Length", strconv.Itoa(len(b)))
}

// groupClient is the in-memory client of one resource group, with the UIDs the in-memory store
// does not give.
type groupClient struct {
	inmemoryclient.Client
}

func (c groupClient) Create(ctx context.Context, obj client.Object) error {
	if obj.GetUID() == "" {
		obj.SetUID(uuid.NewUUID())
	}
	return c.Client.Create(ctx, obj)
}
