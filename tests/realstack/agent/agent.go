package main

import (
	"context"
	"fmt"
	"net"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/blang/semver/v4"
	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	cloudv1 "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/cloud/api/v1alpha1"
	inmemoryclient "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/runtime/client"
)

// neverJoins is the marker that makes a server never join its cluster: an image (filter name, ID
// or ORC image reference) or flavor containing it boots "a server whose kubelet never comes up".
const neverJoins = "never-joins"

const (
	requeueSteady  = 10 * time.Second // everything is as it should be: look again now and then
	requeuePending = 2 * time.Second  // waiting for something the agent does not watch (Secrets)
)

// Agent reconciles Clusters: the workload API on each Cluster's controlPlaneEndpoint, and there a
// Node (and, for control-plane machines, kubeadm's static Pods and an etcd member) for every
// server that has booted: a Machine whose infrastructure machine is provisioned and whose
// bootstrap data exists.
type Agent struct {
	client.Client               // the management cluster, cached
	reader        client.Reader // the management cluster, uncached (Secrets are not cached)
	mapper        meta.RESTMapper
	workloads     *Workloads

	mu        sync.Mutex
	locks     map[types.NamespacedName]*sync.Mutex
	clusters  map[types.NamespacedName]*Workload
	bootstrap sync.Map // "<namespace>/<secret>" of bootstrap data seen to exist
	skipped   sync.Map // never-joins servers already logged
	nudged    sync.Map // UIDs of deleting Clusters whose control plane was told the workers are gone
}

func newAgent(c client.Client, reader client.Reader, mapper meta.RESTMapper, w *Workloads) *Agent {
	return &Agent{Client: c, reader: reader, mapper: mapper, workloads: w,
		locks: map[types.NamespacedName]*sync.Mutex{}, clusters: map[types.NamespacedName]*Workload{}}
}

func (a *Agent) lock(key types.NamespacedName) func() {
	a.mu.Lock()
	l, ok := a.locks[key]
	if !ok {
		l = &sync.Mutex{}
		a.locks[key] = l
	}
	a.mu.Unlock()
	l.Lock()
	return l.Unlock
}

// stopAll closes every workload API (the agent is stopping).
func (a *Agent) stopAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for key, wl := range a.clusters {
		a.workloads.stop(wl)
		delete(a.clusters, key)
	}
}

func (a *Agent) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	defer a.lock(req.NamespacedName)()
	log := ctrl.LoggerFrom(ctx)

	cluster := &clusterv1.Cluster{}
	if err := a.Get(ctx, req.NamespacedName, cluster); err != nil {
		if apierrors.IsNotFound(err) {
			a.teardown(log, req.NamespacedName, "the Cluster is gone")
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if err := a.nudgeControlPlane(ctx, cluster); err != nil {
		return ctrl.Result{}, err
	}
	ep := cluster.Spec.ControlPlaneEndpoint
	if ep.Host == "" {
		a.teardown(log, req.NamespacedName, "the Cluster has no controlPlaneEndpoint")
		return ctrl.Result{}, nil
	}
	port := ep.Port
	if port == 0 {
		port = 6443
	}
	addr := net.JoinHostPort(ep.Host, strconv.Itoa(int(port)))

	clusterCA, err := a.readCA(ctx, cluster.Namespace, cluster.Name+"-ca")
	if err != nil {
		log.Info("Waiting for the cluster CA", "reason", err.Error())
		return ctrl.Result{RequeueAfter: requeuePending}, nil
	}
	etcdCA, err := a.readCA(ctx, cluster.Namespace, cluster.Name+"-etcd")
	if err != nil {
		etcdCA = nil // etcd members are served once it exists
	}
	serviceCIDR, _, dnsDomain := initInput{cluster: cluster}.network()

	a.mu.Lock()
	wl := a.clusters[req.NamespacedName]
	a.mu.Unlock()
	if wl != nil && (wl.addr != addr || wl.uid != cluster.UID) {
		a.teardown(log, req.NamespacedName, "the Cluster's endpoint or identity changed")
		wl = nil
	}
	if wl == nil {
		wl = &Workload{group: req.String(), addr: addr, host: ep.Host, uid: cluster.UID,
			servers: map[string]*server{}, etcdClusterID: strconv.FormatUint(stableID(string(cluster.UID)), 10)}
		if err := wl.setCAs(clusterCA, etcdCA, firstServiceIP(serviceCIDR), dnsDomain); err != nil {
			return ctrl.Result{}, err
		}
		if err := a.workloads.serve(wl); err != nil {
			log.Error(err, "Cannot serve the workload API yet", "address", addr)
			return ctrl.Result{RequeueAfter: 5 * time.Second}, nil
		}
		if err := a.ensureNamespaces(ctx, a.workloads.client(wl)); err != nil {
			a.workloads.stop(wl)
			return ctrl.Result{}, err
		}
		a.mu.Lock()
		a.clusters[req.NamespacedName] = wl
		a.mu.Unlock()
		log.Info("Serving the workload API", "address", addr)
	} else if err := wl.setCAs(clusterCA, etcdCA, firstServiceIP(serviceCIDR), dnsDomain); err != nil {
		return ctrl.Result{}, err
	}

	desired, pending, err := a.desired(ctx, cluster)
	if err != nil {
		return ctrl.Result{}, err
	}
	if err := a.sync(ctx, log, wl, cluster, desired, clusterCA); err != nil {
		return ctrl.Result{}, err
	}
	if pending || etcdCA == nil {
		return ctrl.Result{RequeueAfter: requeuePending}, nil
	}
	return ctrl.Result{RequeueAfter: requeueSteady}, nil
}

// workersGone is the annotation nudgeControlPlane sets on a deleting Cluster's control plane.
const workersGone = "realstack.magnum-capi.test/workers-gone"

// nudgeControlPlane: KCP deletes the machines of a deleting Cluster only once no worker Machine is
// left, and it looks again only on its fixed 30 s requeue (it does not watch the workers). The
// agent watches every Machine: the moment the last worker of a deleting Cluster is gone it
// annotates the control plane, so that KCP looks then. KCP decides as it would at its next look;
// a delete on the real stack takes what the controllers need, not KCP's timer.
func (a *Agent) nudgeControlPlane(ctx context.Context, cluster *clusterv1.Cluster) error {
	ref := cluster.Spec.ControlPlaneRef
	if cluster.DeletionTimestamp.IsZero() || !ref.IsDefined() {
		return nil
	}
	if _, done := a.nudged.Load(cluster.UID); done {
		return nil
	}
	machines := &clusterv1.MachineList{}
	if err := a.List(ctx, machines, client.InNamespace(cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}); err != nil {
		return err
	}
	for i := range machines.Items {
		if !isControlPlane(&machines.Items[i]) {
			return nil // workers left: the Machine watch brings the agent back when they go
		}
	}
	mapping, err := a.mapper.RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
	if err != nil {
		return err
	}
	cp := &unstructured.Unstructured{}
	cp.SetGroupVersionKind(mapping.GroupVersionKind)
	cp.SetNamespace(cluster.Namespace)
	cp.SetName(ref.Name)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, workersGone, time.Now().UTC().Format(time.RFC3339))
	if err := a.Patch(ctx, cp, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	a.nudged.Store(cluster.UID, true)
	ctrl.LoggerFrom(ctx).Info("Told the control plane the workers are gone", "controlPlane", ref.Name)
	return nil
}

func (a *Agent) teardown(log logr.Logger, key types.NamespacedName, why string) {
	a.mu.Lock()
	wl := a.clusters[key]
	delete(a.clusters, key)
	a.mu.Unlock()
	if wl == nil {
		return
	}
	a.workloads.stop(wl)
	log.Info("Stopped serving the workload API", "address", wl.addr, "reason", why)
}

func (a *Agent) readCA(ctx context.Context, namespace, name string) (*ca, error) {
	s := &corev1.Secret{}
	if err := a.reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		return nil, err
	}
	c, err := parseCA(s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey])
	if err != nil {
		return nil, fmt.Errorf("secret %s/%s: %w", namespace, name, err)
	}
	return c, nil
}

func (a *Agent) ensureNamespaces(ctx context.Context, c inmemoryclient.Client) error {
	for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespacePublic, metav1.NamespaceSystem, corev1.NamespaceNodeLease} {
		obj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: map[string]string{corev1.LabelMetadataName: ns}},
			Spec:   corev1.NamespaceSpec{Finalizers: []corev1.FinalizerName{corev1.FinalizerKubernetes}},
			Status: corev1.NamespaceStatus{Phase: corev1.NamespaceActive}}
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	return nil
}

// desired lists the servers of the cluster that are up: pending is true when one waits for
// something that brings no event (its bootstrap data Secret).
func (a *Agent) desired(ctx context.Context, cluster *clusterv1.Cluster) (map[string]*server, bool, error) {
	log := ctrl.LoggerFrom(ctx)
	machines := &clusterv1.MachineList{}
	if err := a.List(ctx, machines, client.InNamespace(cluster.Namespace),
		client.MatchingLabels{clusterv1.ClusterNameLabel: cluster.Name}); err != nil {
		return nil, false, err
	}
	out := map[string]*server{}
	pending := false
	for i := range machines.Items {
		m := &machines.Items[i]
		infra, err := a.infraMachine(ctx, m)
		if err != nil || infra == nil {
			if err != nil {
				log.V(2).Info("Cannot read the infrastructure machine", "machine", m.Name, "error", err.Error())
			}
			continue
		}
		if infra.GetDeletionTimestamp() != nil {
			continue // its server is being deleted: it is down
		}
		providerID, _, _ := unstructured.NestedString(infra.Object, "spec", "providerID")
		if providerID == "" || !provisioned(infra) {
			continue
		}
		if reason := neverJoinsReason(infra); reason != "" {
			if _, logged := a.skipped.LoadOrStore(string(infra.GetUID()), true); !logged {
				log.Info("This server never joins", "machine", m.Name, "server", infra.GetName(), "because", reason)
			}
			continue
		}
		if m.Spec.Bootstrap.DataSecretName == nil {
			continue
		}
		if !a.bootstrapDataExists(ctx, m.Namespace, *m.Spec.Bootstrap.DataSecretName) {
			pending = true
			continue
		}
		s := &server{
			node:         infra.GetName(),
			machine:      m.Name,
			providerID:   providerID,
			controlPlane: isControlPlane(m),
			version:      m.Spec.Version,
			addresses:    addresses(infra),
			registry:     defaultRegistry,
		}
		config := a.kubeadmConfig(ctx, m)
		s.registry = registry(config)
		s.taints = nodeTaints(s.controlPlane, config)
		if !m.DeletionTimestamp.IsZero() && s.controlPlane {
			_, hook := m.Annotations[kubeadmCleanup]
			s.memberRemoved = !hook
		}
		out[s.node] = s
	}
	return out, pending, nil
}

func isControlPlane(m *clusterv1.Machine) bool {
	_, ok := m.Labels[clusterv1.MachineControlPlaneLabel]
	return ok
}

// infraMachine reads the Machine's infrastructure machine (an OpenStackMachine), nil if gone.
func (a *Agent) infraMachine(ctx context.Context, m *clusterv1.Machine) (*unstructured.Unstructured, error) {
	ref := m.Spec.InfrastructureRef
	if !ref.IsDefined() {
		return nil, nil
	}
	mapping, err := a.mapper.RESTMapping(schema.GroupKind{Group: ref.APIGroup, Kind: ref.Kind})
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(mapping.GroupVersionKind)
	if err := a.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, u); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, nil
		}
		return nil, err
	}
	return u, nil
}

// provisioned: the v1beta1 contract's status.ready or the v1beta2 one's
// status.initialization.provisioned.
func provisioned(u *unstructured.Unstructured) bool {
	if ready, _, _ := unstructured.NestedBool(u.Object, "status", "ready"); ready {
		return true
	}
	p, _, _ := unstructured.NestedBool(u.Object, "status", "initialization", "provisioned")
	return p
}

// neverJoinsReason says why a server never joins ("" if it does): its image or flavor names the
// marker.
func neverJoinsReason(u *unstructured.Unstructured) string {
	if image, ok, _ := unstructured.NestedFieldNoCopy(u.Object, "spec", "image"); ok {
		if s := findString(image, neverJoins); s != "" {
			return "image " + s
		}
	}
	for _, f := range []string{"flavor", "flavorID"} {
		if s, _, _ := unstructured.NestedString(u.Object, "spec", f); strings.Contains(s, neverJoins) {
			return f + " " + s
		}
	}
	return ""
}

func findString(v any, marker string) string {
	switch v := v.(type) {
	case string:
		if strings.Contains(v, marker) {
			return v
		}
	case map[string]any:
		keys := make([]string, 0, len(v))
		for k := range v {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if s := findString(v[k], marker); s != "" {
				return s
			}
		}
	case []any:
		for _, e := range v {
			if s := findString(e, marker); s != "" {
				return s
			}
		}
	}
	return ""
}

func addresses(u *unstructured.Unstructured) []corev1.NodeAddress {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "addresses")
	var out []corev1.NodeAddress
	for _, e := range list {
		m, _ := e.(map[string]any)
		t, _ := m["type"].(string)
		addr, _ := m["address"].(string)
		if addr == "" || t == string(corev1.NodeHostName) {
			continue
		}
		out = append(out, corev1.NodeAddress{Type: corev1.NodeAddressType(t), Address: addr})
	}
	return out
}

func (a *Agent) bootstrapDataExists(ctx context.Context, namespace, name string) bool {
	key := namespace + "/" + name
	if _, ok := a.bootstrap.Load(key); ok {
		return true
	}
	s := &metav1.PartialObjectMetadata{}
	s.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Secret"))
	if err := a.reader.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, s); err != nil {
		return false
	}
	a.bootstrap.Store(key, true)
	return true
}

func (a *Agent) kubeadmConfig(ctx context.Context, m *clusterv1.Machine) *bootstrapv1.KubeadmConfig {
	ref := m.Spec.Bootstrap.ConfigRef
	if ref.Kind != "KubeadmConfig" || ref.APIGroup != bootstrapv1.GroupVersion.Group {
		return nil
	}
	c := &bootstrapv1.KubeadmConfig{}
	if err := a.Get(ctx, client.ObjectKey{Namespace: m.Namespace, Name: ref.Name}, c); err != nil {
		return nil
	}
	return c
}

// nodeTaints are the taints kubeadm registers the Node with: nodeRegistration.taints when given,
// kubeadm's control-plane taint otherwise; a worker also carries the "uninitialized" taint CABPK
// adds to every join configuration (the Machine controller removes it once it synced labels).
func nodeTaints(controlPlane bool, config *bootstrapv1.KubeadmConfig) []corev1.Taint {
	var given *[]corev1.Taint
	if config != nil {
		if config.Spec.JoinConfiguration.IsDefined() && config.Spec.JoinConfiguration.NodeRegistration.Taints != nil {
			given = config.Spec.JoinConfiguration.NodeRegistration.Taints
		}
		if config.Spec.InitConfiguration.IsDefined() && config.Spec.InitConfiguration.NodeRegistration.Taints != nil {
			given = config.Spec.InitConfiguration.NodeRegistration.Taints
		}
	}
	var out []corev1.Taint
	switch {
	case given != nil:
		out = append(out, *given...)
	case controlPlane:
		out = append(out, corev1.Taint{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule})
	}
	if !controlPlane {
		has := false
		for _, t := range out {
			has = has || t.Key == clusterv1.NodeUninitializedTaint.Key
		}
		if !has {
			out = append(out, clusterv1.NodeUninitializedTaint)
		}
	}
	return out
}

// sync makes the workload cluster show the desired servers.
func (a *Agent) sync(ctx context.Context, log logr.Logger, wl *Workload, cluster *clusterv1.Cluster, desired map[string]*server, clusterCA *ca) error {
	c := a.workloads.client(wl)
	// Servers that went down.
	for name, s := range wl.servers {
		if _, ok := desired[name]; ok {
			continue
		}
		if err := a.stopServer(ctx, c, wl, s); err != nil {
			return err
		}
		log.Info("Server down: Node, static Pods and etcd member removed", "node", name, "machine", s.machine)
	}
	// Servers that are up: control plane first (kubeadm init before any join).
	names := make([]string, 0, len(desired))
	for n := range desired {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool {
		si, sj := desired[names[i]], desired[names[j]]
		if si.controlPlane != sj.controlPlane {
			return si.controlPlane
		}
		return si.node < sj.node
	})
	for _, n := range names {
		s := desired[n]
		_, known := wl.servers[n]
		if err := a.runServer(ctx, c, wl, s); err != nil {
			return fmt.Errorf("server %s: %w", n, err)
		}
		if !known {
			log.Info("Server up: Node registered", "node", n, "machine", s.machine, "controlPlane", s.controlPlane, "version", s.version)
		}
		if s.controlPlane && !wl.initialized {
			if err := a.kubeadmInit(ctx, c, wl, cluster, s, clusterCA); err != nil {
				return fmt.Errorf("kubeadm init objects: %w", err)
			}
			wl.initialized = true
			log.Info("kubeadm init objects created", "node", n, "version", s.version)
		}
	}
	if err := ensureEtcdLeader(ctx, c); err != nil {
		return err
	}
	version := ""
	for _, s := range wl.servers {
		if s.controlPlane && newer(s.version, version) {
			version = s.version
		}
	}
	wl.setVersion(version)
	return nil
}

func newer(a, b string) bool {
	va, err := semver.ParseTolerant(a)
	if err != nil {
		return false
	}
	vb, err := semver.ParseTolerant(b)
	return err != nil || va.GT(vb)
}

// runServer makes sure the server's Node (and static Pods) exist: a kubelet re-registers a Node
// deleted while it runs, and static Pods come back with it.
func (a *Agent) runServer(ctx context.Context, c inmemoryclient.Client, wl *Workload, s *server) error {
	node := &corev1.Node{}
	err := c.Get(ctx, client.ObjectKey{Name: s.node}, node)
	switch {
	case apierrors.IsNotFound(err):
		node = nodeFor(s)
		if err := c.Create(ctx, node); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	case err != nil:
		return err
	case !node.DeletionTimestamp.IsZero():
		return nil // being deleted: created again once gone
	}
	if s.controlPlane {
		for _, component := range []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			if err := createIfMissing(ctx, c, staticPod(s, component)); err != nil {
				return err
			}
		}
		pod := &corev1.Pod{}
		err := c.Get(ctx, client.ObjectKey{Namespace: metav1.NamespaceSystem, Name: "etcd-" + s.node}, pod)
		if apierrors.IsNotFound(err) {
			leader, err := noEtcdLeader(ctx, c)
			if err != nil {
				return err
			}
			if err := c.Create(ctx, etcdPod(s, wl.etcdClusterID, leader && !s.memberRemoved)); err != nil && !apierrors.IsAlreadyExists(err) {
				return err
			}
		} else if err != nil {
			return err
		}
		wl.setEtcdMember("etcd-"+s.node, true)
	}
	wl.servers[s.node] = s
	return nil
}

func createIfMissing(ctx context.Context, c inmemoryclient.Client, obj client.Object) error {
	probe := obj.DeepCopyObject().(client.Object)
	if err := c.Get(ctx, client.ObjectKeyFromObject(obj), probe); err == nil {
		return nil
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// stopServer removes what a server that went down leaves: its Node (the Machine controller deletes
// it too, once the infrastructure is gone), its static Pods and its etcd member.
func (a *Agent) stopServer(ctx context.Context, c inmemoryclient.Client, wl *Workload, s *server) error {
	if s.controlPlane {
		wl.setEtcdMember("etcd-"+s.node, false)
		for _, component := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler"} {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: metav1.NamespaceSystem, Name: component + "-" + s.node}}
			if err := c.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: s.node}}
	if err := c.Delete(ctx, node); err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	delete(wl.servers, s.node)
	return nil
}

func etcdPods(ctx context.Context, c inmemoryclient.Client) ([]corev1.Pod, error) {
	pods := &corev1.PodList{}
	if err := c.List(ctx, pods, client.InNamespace(metav1.NamespaceSystem),
		client.MatchingLabels{"component": "etcd", "tier": "control-plane"}); err != nil {
		return nil, err
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	return pods.Items, nil
}

// noEtcdLeader is true when no etcd member (not removed) has ever been the leader.
func noEtcdLeader(ctx context.Context, c inmemoryclient.Client) (bool, error) {
	pods, err := etcdPods(ctx, c)
	if err != nil {
		return false, err
	}
	for _, p := range pods {
		if _, removed := p.Annotations[cloudv1.EtcdMemberRemoved]; removed || !p.DeletionTimestamp.IsZero() {
			continue
		}
		if _, ok := p.Annotations[cloudv1.EtcdLeaderFromAnnotationName]; ok {
			return false, nil
		}
	}
	return true, nil
}

// ensureEtcdLeader elects a leader when the members left have none (the leader went down or was
// removed without moving leadership first): a real etcd cluster with quorum elects one by itself.
func ensureEtcdLeader(ctx context.Context, c inmemoryclient.Client) error {
	none, err := noEtcdLeader(ctx, c)
	if err != nil || !none {
		return err
	}
	pods, err := etcdPods(ctx, c)
	if err != nil {
		return err
	}
	for i := range pods {
		p := &pods[i]
		if _, removed := p.Annotations[cloudv1.EtcdMemberRemoved]; removed || !p.DeletionTimestamp.IsZero() {
			continue
		}
		updated := p.DeepCopy()
		updated.Annotations[cloudv1.EtcdLeaderFromAnnotationName] = time.Now().Format(time.RFC3339)
		return c.Patch(ctx, updated, client.MergeFrom(p))
	}
	return nil
}

// kubeadmInit creates what kubeadm init leaves, from the first control-plane server's Machine.
func (a *Agent) kubeadmInit(ctx context.Context, c inmemoryclient.Client, wl *Workload, cluster *clusterv1.Cluster, s *server, clusterCA *ca) error {
	m := &clusterv1.Machine{}
	if err := a.Get(ctx, client.ObjectKey{Namespace: cluster.Namespace, Name: s.machine}, m); err != nil {
		return err
	}
	objs, err := initObjects(initInput{cluster: cluster, config: a.kubeadmConfig(ctx, m), version: s.version,
		endpoint: wl.addr, caPEM: clusterCA.pem})
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := createIfMissing(ctx, c, o); err != nil {
			return fmt.Errorf("%T %s: %w", o, o.GetName(), err)
		}
	}
	return nil
}
