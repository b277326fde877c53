package main

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/blang/semver/v4"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
	kubeadmtypes "sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types"
	"sigs.k8s.io/cluster-api/bootstrap/kubeadm/pkg/types/upstream"
	cloudv1 "sigs.k8s.io/cluster-api/test/infrastructure/inmemory/pkg/cloud/api/v1alpha1"
)

// server is one server the agent plays: what kubeadm and the kubelet would make of it.
type server struct {
	node          string // the Node's name: the infrastructure machine's (CAPO's server) name
	machine       string
	providerID    string
	controlPlane  bool
	version       string // the Machine's spec.version
	addresses     []corev1.NodeAddress
	taints        []corev1.Taint
	registry      string // image repository (ClusterConfiguration.imageRepository)
	memberRemoved bool   // KCP already removed its etcd member (seen after an agent restart)
}

const (
	criSocket       = "unix:///var/run/containerd/containerd.sock"
	defaultRegistry = "registry.k8s.io"
	kubeadmCleanup  = clusterv1.PreTerminateDeleteHookAnnotationPrefix + "/kcp-cleanup"
)

// kubeadm's image versions per Kubernetes minor (cmd/kubeadm/app/constants of each release).
var (
	etcdVersions    = map[uint64]string{33: "3.5.21-0", 34: "3.6.4-0", 35: "3.6.6-0", 36: "3.6.8-0"}
	corednsVersions = map[uint64]string{33: "v1.12.0", 34: "v1.12.1", 35: "v1.13.1", 36: "v1.14.2"}
)

func minor(version string) uint64 {
	v, err := semver.ParseTolerant(version)
	if err != nil {
		return 0
	}
	return v.Minor
}

func etcdImageTag(version string) string {
	if t, ok := etcdVersions[minor(version)]; ok {
		return t
	}
	return "3.6.8-0"
}

func corednsImageTag(version string) string {
	if t, ok := corednsVersions[minor(version)]; ok {
		return t
	}
	return "v1.14.2"
}

// stableID is a positive, non-zero ID derived from s (etcd cluster and member IDs): the same
// after an agent restart.
func stableID(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	id := h.Sum64() & (1<<62 - 1)
	if id == 0 {
		id = 1
	}
	return id
}

func hash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:16])
}

func internalIP(s *server) string {
	for _, a := range s.addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	return ""
}

// nodeFor is the Node the kubelet registers (kubeadm init/join, then the kubelet's status).
func nodeFor(s *server) *corev1.Node {
	now := metav1.Now()
	labels := map[string]string{
		corev1.LabelHostname:      s.node,
		corev1.LabelOSStable:      "linux",
		corev1.LabelArchStable:    "amd64",
		"beta.kubernetes.io/os":   "linux",
		"beta.kubernetes.io/arch": "amd64",
	}
	if s.controlPlane {
		labels["node-role.kubernetes.io/control-plane"] = ""
		labels[corev1.LabelNodeExcludeBalancers] = ""
	}
	addresses := append([]corev1.NodeAddress{}, s.addresses...)
	addresses = append(addresses, corev1.NodeAddress{Type: corev1.NodeHostName, Address: s.node})
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:              resource.MustParse("2"),
		corev1.ResourceMemory:           resource.MustParse("4030532Ki"),
		corev1.ResourceEphemeralStorage: resource.MustParse("20134592Ki"),
		corev1.ResourcePods:             resource.MustParse("110"),
	}
	cond := func(t corev1.NodeConditionType, st corev1.ConditionStatus, reason, msg string) corev1.NodeCondition {
		return corev1.NodeCondition{Type: t, Status: st, Reason: reason, Message: msg,
			LastHeartbeatTime: now, LastTransitionTime: now}
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:   s.node,
			Labels: labels,
			Annotations: map[string]string{
				"kubeadm.alpha.kubernetes.io/cri-socket":                 criSocket,
				"node.alpha.kubernetes.io/ttl":                           "0",
				"volumes.kubernetes.io/controller-managed-attach-detach": "true",
			},
		},
		Spec: corev1.NodeSpec{ProviderID: s.providerID, Taints: s.taints},
		Status: corev1.NodeStatus{
			Capacity:    capacity,
			Allocatable: capacity,
			Phase:       corev1.NodeRunning,
			Conditions: []corev1.NodeCondition{
				cond(corev1.NodeMemoryPressure, corev1.ConditionFalse, "KubeletHasSufficientMemory", "kubelet has sufficient memory available"),
				cond(corev1.NodeDiskPressure, corev1.ConditionFalse, "KubeletHasNoDiskPressure", "kubelet has no disk pressure"),
				cond(corev1.NodePIDPressure, corev1.ConditionFalse, "KubeletHasSufficientPID", "kubelet has sufficient PID available"),
				cond(corev1.NodeReady, corev1.ConditionTrue, "KubeletReady", "kubelet is posting ready status"),
			},
			Addresses:       addresses,
			DaemonEndpoints: corev1.NodeDaemonEndpoints{KubeletEndpoint: corev1.DaemonEndpoint{Port: 10250}},
			NodeInfo: corev1.NodeSystemInfo{
				MachineID:               hash("machine-id/" + s.providerID),
				SystemUUID:              strings.TrimPrefix(s.providerID, "openstack:///"),
				BootID:                  hash("boot-id/" + s.providerID),
				KernelVersion:           "6.8.0-60-generic",
				OSImage:                 "Ubuntu 24.04.2 LTS",
				ContainerRuntimeVersion: "containerd://2.1.4",
				KubeletVersion:          s.version,
				OperatingSystem:         "linux",
				Architecture:            "amd64",
			},
		},
	}
}

// staticPod is the mirror Pod the kubelet makes for a control-plane static Pod of kubeadm.
func staticPod(s *server, component string) *corev1.Pod {
	now := metav1.Now()
	image := fmt.Sprintf("%s/%s:%s", s.registry, component, s.version)
	if component == "etcd" {
		image = fmt.Sprintf("%s/etcd:%s", s.registry, etcdImageTag(s.version))
	}
	ip := internalIP(s)
	annotations := map[string]string{
		corev1.MirrorPodAnnotationKey: hash(component + "/" + s.node + "/" + image),
		"kubernetes.io/config.hash":   hash(component + "/" + s.node + "/" + image),
		"kubernetes.io/config.seen":   now.UTC().Format(time.RFC3339Nano),
		"kubernetes.io/config.source": "file",
	}
	switch component {
	case "kube-apiserver":
		annotations["kubeadm.kubernetes.io/kube-apiserver.advertise-address.endpoint"] = net.JoinHostPort(ip, "6443")
	case "etcd":
		annotations["kubeadm.kubernetes.io/etcd.advertise-client-urls"] = "https://" + net.JoinHostPort(ip, "2379")
	}
	cond := func(t corev1.PodConditionType) corev1.PodCondition {
		return corev1.PodCondition{Type: t, Status: corev1.ConditionTrue, LastTransitionTime: now}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace:   metav1.NamespaceSystem,
			Name:        component + "-" + s.node,
			Labels:      map[string]string{"component": component, "tier": "control-plane"},
			Annotations: annotations,
			// A mirror Pod's owner is its Node, but the in-memory store resolves owners in the
			// owned object's namespace only: no ownerReference (the agent deletes the Pods itself).
		},
		Spec: corev1.PodSpec{
			NodeName:          s.node,
			HostNetwork:       true,
			PriorityClassName: "system-node-critical",
			Priority:          ptr.To(int32(2000001000)),
			Containers: []corev1.Container{{
				Name:            component,
				Image:           image,
				Command:         []string{component},
				ImagePullPolicy: corev1.PullIfNotPresent,
			}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning,
			Conditions: []corev1.PodCondition{
				cond(corev1.PodReadyToStartContainers), cond(corev1.PodInitialized), cond(corev1.PodReady),
				cond(corev1.ContainersReady), cond(corev1.PodScheduled),
			},
			HostIP:    ip,
			PodIP:     ip,
			StartTime: &now,
			QOSClass:  corev1.PodQOSBurstable,
			ContainerStatuses: []corev1.ContainerStatus{{
				Name:        component,
				Ready:       true,
				Started:     ptr.To(true),
				Image:       image,
				ImageID:     image + "@sha256:" + hash(image) + hash(image+"/"),
				ContainerID: "containerd://" + hash(s.node+component) + hash(component+s.node),
				State:       corev1.ContainerState{Running: &corev1.ContainerStateRunning{StartedAt: now}},
			}},
		},
	}
}

// etcdPod is the etcd static Pod with the in-memory etcd's member annotations (its fake etcd
// answers MemberList/Status/MoveLeader/MemberRemove from them).
func etcdPod(s *server, clusterID string, leader bool) *corev1.Pod {
	pod := staticPod(s, "etcd")
	pod.Annotations[cloudv1.EtcdClusterIDAnnotationName] = clusterID
	pod.Annotations[cloudv1.EtcdMemberIDAnnotationName] = strconv.FormatUint(stableID(s.node), 10)
	if leader {
		pod.Annotations[cloudv1.EtcdLeaderFromAnnotationName] = time.Now().Format(time.RFC3339)
	}
	if s.memberRemoved {
		pod.Annotations[cloudv1.EtcdMemberRemoved] = ""
	}
	return pod
}

// ---- what kubeadm init leaves in the cluster -----------------------------------------------------

// initInput is what kubeadm init knows.
type initInput struct {
	cluster  *clusterv1.Cluster
	config   *bootstrapv1.KubeadmConfig // the first control-plane machine's
	version  string
	endpoint string // host:port
	caPEM    []byte
}

func (in initInput) network() (serviceCIDR, podCIDR, dnsDomain string) {
	n := in.cluster.Spec.ClusterNetwork
	serviceCIDR, dnsDomain = "10.96.0.0/12", "cluster.local"
	if len(n.Services.CIDRBlocks) > 0 {
		serviceCIDR = n.Services.CIDRBlocks[0]
	}
	if len(n.Pods.CIDRBlocks) > 0 {
		podCIDR = strings.Join(n.Pods.CIDRBlocks, ",")
	}
	if n.ServiceDomain != "" {
		dnsDomain = n.ServiceDomain
	}
	return
}

func registry(config *bootstrapv1.KubeadmConfig) string {
	if config != nil && config.Spec.ClusterConfiguration.ImageRepository != "" {
		return strings.TrimSuffix(config.Spec.ClusterConfiguration.ImageRepository, "/")
	}
	return defaultRegistry
}

// clusterConfiguration is the ClusterConfiguration kubeadm init uploads to kube-system/kubeadm-config,
// in the kubeadm API version of the Kubernetes version, with kubeadm's defaults filled in.
func clusterConfiguration(in initInput) (string, error) {
	cc := bootstrapv1.ClusterConfiguration{}
	if in.config != nil {
		cc = *in.config.Spec.ClusterConfiguration.DeepCopy()
	}
	if cc.ControlPlaneEndpoint == "" {
		cc.ControlPlaneEndpoint = in.endpoint
	}
	if cc.ImageRepository == "" {
		cc.ImageRepository = defaultRegistry
	}
	if cc.CertificatesDir == "" {
		cc.CertificatesDir = "/etc/kubernetes/pki"
	}
	if !cc.Etcd.External.IsDefined() && cc.Etcd.Local.DataDir == "" {
		cc.Etcd.Local.DataDir = "/var/lib/etcd"
	}
	if cc.EncryptionAlgorithm == "" {
		cc.EncryptionAlgorithm = bootstrapv1.EncryptionAlgorithmRSA2048
	}
	if cc.CertificateValidityPeriodDays == 0 {
		cc.CertificateValidityPeriodDays = 365
	}
	if cc.CACertificateValidityPeriodDays == 0 {
		cc.CACertificateValidityPeriodDays = 3650
	}
	v, err := semver.ParseTolerant(in.version)
	if err != nil {
		return "", err
	}
	serviceCIDR, podCIDR, dnsDomain := in.network()
	data := &upstream.AdditionalData{
		KubernetesVersion: ptr.To(in.version),
		ClusterName:       ptr.To(in.cluster.Name),
		DNSDomain:         ptr.To(dnsDomain),
		ServiceSubnet:     ptr.To(serviceCIDR),
	}
	if podCIDR != "" {
		data.PodSubnet = ptr.To(podCIDR)
	}
	return kubeadmtypes.MarshalClusterConfigurationForVersion(&cc, v, data)
}

// kubeletConfiguration is kube-system/kubelet-config's "kubelet" (the KubeletConfiguration kubeadm
// init uploads, its defaults written out).
func kubeletConfiguration(dnsDomain, clusterDNS string) string {
	cfg := map[string]any{
		"apiVersion": "kubelet.config.k8s.io/v1beta1",
		"kind":       "KubeletConfiguration",
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"cacheTTL": "0s", "enabled": true},
			"x509":      map[string]any{"clientCAFile": "/etc/kubernetes/pki/ca.crt"},
		},
		"authorization": map[string]any{
			"mode":    "Webhook",
			"webhook": map[string]any{"cacheAuthorizedTTL": "0s", "cacheUnauthorizedTTL": "0s"},
		},
		"cgroupDriver":                     "systemd",
		"clusterDNS":                       []string{clusterDNS},
		"clusterDomain":                    dnsDomain,
		"containerRuntimeEndpoint":         "",
		"cpuManagerReconcilePeriod":        "0s",
		"crashLoopBackOff":                 map[string]any{},
		"evictionPressureTransitionPeriod": "0s",
		"fileCheckFrequency":               "0s",
		"healthzBindAddress":               "127.0.0.1",
		"healthzPort":                      10248,
		"httpCheckFrequency":               "0s",
		"imageMaximumGCAge":                "0s",
		"imageMinimumGCAge":                "0s",
		"logging": map[string]any{"flushFrequency": 0, "options": map[string]any{
			"json": map[string]any{"infoBufferSize": "0"}, "text": map[string]any{"infoBufferSize": "0"}},
			"verbosity": 0},
		"memorySwap":                      map[string]any{},
		"nodeStatusReportFrequency":       "0s",
		"nodeStatusUpdateFrequency":       "0s",
		"rotateCertificates":              true,
		"runtimeRequestTimeout":           "0s",
		"shutdownGracePeriod":             "0s",
		"shutdownGracePeriodCriticalPods": "0s",
		"staticPodPath":                   "/etc/kubernetes/manifests",
		"streamingConnectionIdleTimeout":  "0s",
		"syncFrequency":                   "0s",
		"volumeStatsAggPeriod":            "0s",
	}
	b, _ := yaml.Marshal(cfg)
	return string(b)
}

// nthIP is the n-th address of a CIDR (the kubernetes Service is the 1st, kube-dns the 10th).
func nthIP(cidr string, n byte) net.IP {
	_, ipnet, err := net.ParseCIDR(cidr)
	if err != nil {
		return nil
	}
	ip := make(net.IP, len(ipnet.IP))
	copy(ip, ipnet.IP)
	ip[len(ip)-1] += n
	return ip
}

// corefile is the Corefile kubeadm writes (the classic default CoreDNS migrations start from).
func corefile(dnsDomain string) string {
	return `.:53 {
    errors
    health {
       lameduck 5s
    }
    ready
    kubernetes ` + dnsDomain + ` in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
       ttl 30
    }
    prometheus :9153
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    cache 30
    loop
    reload
    loadbalance
}
`
}

// initObjects is what kubeadm init leaves in a new cluster once the first control-plane node is
// up: the uploaded configuration, the bootstrap RBAC, cluster-info, and the CoreDNS and kube-proxy
// add-ons (Deployments and DaemonSets only: nothing schedules their Pods here).
func initObjects(in initInput) ([]client.Object, error) {
	cc, err := clusterConfiguration(in)
	if err != nil {
		return nil, fmt.Errorf("ClusterConfiguration: %w", err)
	}
	serviceCIDR, podCIDR, dnsDomain := in.network()
	dnsIP := nthIP(serviceCIDR, 10)
	reg := registry(in.config)
	ks := metav1.NamespaceSystem
	cm := func(ns, name string, data map[string]string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: data}
	}
	role := func(ns, name string, rules ...rbacv1.PolicyRule) client.Object {
		if ns == "" {
			return &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}
		}
		return &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Rules: rules}
	}
	binding := func(ns, name, roleKind, roleName string, subjects ...rbacv1.Subject) client.Object {
		ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: roleKind, Name: roleName}
		if ns == "" {
			return &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name}, RoleRef: ref, Subjects: subjects}
		}
		return &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, RoleRef: ref, Subjects: subjects}
	}
	group := func(name string) rbacv1.Subject {
		return rbacv1.Subject{Kind: rbacv1.GroupKind, APIGroup: rbacv1.GroupName, Name: name}
	}
	bootstrappers := group("system:bootstrappers:kubeadm:default-node-token")
	nodes := group("system:nodes")

	clusterInfo, err := yaml.Marshal(map[string]any{
		"apiVersion": "v1", "kind": "Config", "preferences": map[string]any{}, "users": nil, "contexts": nil,
		"current-context": "",
		"clusters": []any{map[string]any{"name": "", "cluster": map[string]any{
			"certificate-authority-data": in.caPEM, "server": "https://" + in.endpoint}}},
	})
	if err != nil {
		return nil, err
	}
	proxyConfig, _ := yaml.Marshal(map[string]any{
		"apiVersion": "kubeproxy.config.k8s.io/v1alpha1", "kind": "KubeProxyConfiguration",
		"bindAddress": "0.0.0.0", "clusterCIDR": podCIDR, "mode": "",
		"clientConnection": map[string]any{"kubeconfig": "/var/lib/kube-proxy/kubeconfig.conf"},
	})
	proxyKubeconfig := `apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority: /var/run/secrets/kubernetes.io/serviceaccount/ca.crt
    server: https://` + in.endpoint + `
  name: default
contexts:
- context:
    cluster: default
    namespace: default
    user: default
  name: default
current-context: default
users:
- name: default
  user:
    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token
`
	dnsLabels := map[string]string{"k8s-app": "kube-dns"}
	proxyLabels := map[string]string{"k8s-app": "kube-proxy"}
	cpToleration := corev1.Toleration{Key: "node-role.kubernetes.io/control-plane", Effect: corev1.TaintEffectNoSchedule}
	objs := []client.Object{
		cm(ks, "kubeadm-config", map[string]string{"ClusterConfiguration": cc}),
		cm(ks, "kubelet-config", map[string]string{"kubelet": kubeletConfiguration(dnsDomain, dnsIP.String())}),
		cm(metav1.NamespacePublic, "cluster-info", map[string]string{"kubeconfig": string(clusterInfo)}),
		role(ks, "kubeadm:nodes-kubeadm-config", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""},
			Resources: []string{"configmaps"}, ResourceNames: []string{"kubeadm-config"}}),
		binding(ks, "kubeadm:nodes-kubeadm-config", "Role", "kubeadm:nodes-kubeadm-config", bootstrappers, nodes),
		role(ks, "kubeadm:kubelet-config", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""},
			Resources: []string{"configmaps"}, ResourceNames: []string{"kubelet-config"}}),
		binding(ks, "kubeadm:kubelet-config", "Role", "kubeadm:kubelet-config", bootstrappers, nodes),
		role("", "kubeadm:get-nodes", rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}}),
		binding("", "kubeadm:get-nodes", "ClusterRole", "kubeadm:get-nodes", bootstrappers),
		binding("", "kubeadm:kubelet-bootstrap", "ClusterRole", "system:node-bootstrapper", bootstrappers),
		binding("", "kubeadm:node-autoapprove-bootstrap", "ClusterRole",
			"system:certificates.k8s.io:certificatesigningrequests:nodeclient", bootstrappers),
		binding("", "kubeadm:node-autoapprove-certificate-rotation", "ClusterRole",
			"system:certificates.k8s.io:certificatesigningrequests:selfnodeclient", nodes),
		binding("", "kubeadm:cluster-admins", "ClusterRole", "cluster-admin", group("kubeadm:cluster-admins")),
		binding("", "kubeadm:node-proxier", "ClusterRole", "system:node-proxier",
			rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "kube-proxy", Namespace: ks}),
		role(metav1.NamespacePublic, "kubeadm:bootstrap-signer-clusterinfo", rbacv1.PolicyRule{Verbs: []string{"get"},
			APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"cluster-info"}}),
		binding(metav1.NamespacePublic, "kubeadm:bootstrap-signer-clusterinfo", "Role", "kubeadm:bootstrap-signer-clusterinfo",
			rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: "system:anonymous"}),
		role("", "system:coredns",
			rbacv1.PolicyRule{Verbs: []string{"list", "watch"}, APIGroups: []string{""}, Resources: []string{"endpoints", "services", "pods", "namespaces"}},
			rbacv1.PolicyRule{Verbs: []string{"get"}, APIGroups: []string{""}, Resources: []string{"nodes"}},
			rbacv1.PolicyRule{Verbs: []string{"list", "watch"}, APIGroups: []string{"discovery.k8s.io"}, Resources: []string{"endpointslices"}}),
		binding("", "system:coredns", "ClusterRole", "system:coredns",
			rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Name: "coredns", Namespace: ks}),
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ks, Name: "coredns"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ks, Name: "kube-proxy"}},
		cm(ks, "coredns", map[string]string{"Corefile": corefile(dnsDomain)}),
		&appsv1.Deployment{
			ObjectMeta: metav1.ObjectMeta{Namespace: ks, Name: "coredns", Labels: dnsLabels},
			Spec: appsv1.DeploymentSpec{
				Replicas: ptr.To(int32(2)),
				Selector: &metav1.LabelSelector{MatchLabels: dnsLabels},
				Strategy: appsv1.DeploymentStrategy{Type: appsv1.RollingUpdateDeploymentStrategyType,
					RollingUpdate: &appsv1.RollingUpdateDeployment{MaxUnavailable: ptr.To(intstr.FromInt32(1))}},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: dnsLabels},
					Spec: corev1.PodSpec{
						PriorityClassName:  "system-cluster-critical",
						ServiceAccountName: "coredns",
						Tolerations:        []corev1.Toleration{{Key: "CriticalAddonsOnly", Operator: corev1.TolerationOpExists}, cpToleration},
						NodeSelector:       map[string]string{corev1.LabelOSStable: "linux"},
						DNSPolicy:          corev1.DNSDefault,
						Containers: []corev1.Container{{
							Name:            "coredns",
							Image:           fmt.Sprintf("%s/coredns/coredns:%s", reg, corednsImageTag(in.version)),
							ImagePullPolicy: corev1.PullIfNotPresent,
							Args:            []string{"-conf", "/etc/coredns/Corefile"},
							VolumeMounts:    []corev1.VolumeMount{{Name: "config-volume", MountPath: "/etc/coredns", ReadOnly: true}},
							Ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP},
								{Name: "dns-tcp", ContainerPort: 53, Protocol: corev1.ProtocolTCP},
								{Name: "metrics", ContainerPort: 9153, Protocol: corev1.ProtocolTCP}},
						}},
						Volumes: []corev1.Volume{{Name: "config-volume", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "coredns"},
							Items:                []corev1.KeyToPath{{Key: "Corefile", Path: "Corefile"}},
						}}}},
					},
				},
			},
		},
		&corev1.Service{
			ObjectMeta: metav1.ObjectMeta{Namespace: ks, Name: "kube-dns", Labels: map[string]string{
				"k8s-app": "kube-dns", "kubernetes.io/cluster-service": "true", "kubernetes.io/name": "CoreDNS"}},
			Spec: corev1.ServiceSpec{
				ClusterIP: dnsIP.String(), ClusterIPs: []string{dnsIP.String()}, Selector: dnsLabels,
				Ports: []corev1.ServicePort{{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP, TargetPort: intstr.FromInt32(53)},
					{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(53)},
					{Name: "metrics", Port: 9153, Protocol: corev1.ProtocolTCP, TargetPort: intstr.FromInt32(9153)}},
			},
		},
		cm(ks, "kube-proxy", map[string]string{"config.conf": string(proxyConfig), "kubeconfig.conf": proxyKubeconfig}),
		&appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Namespace: ks, Name: "kube-proxy", Labels: proxyLabels},
			Spec: appsv1.DaemonSetSpec{
				Selector:       &metav1.LabelSelector{MatchLabels: proxyLabels},
				UpdateStrategy: appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType},
				Template: corev1.PodTemplateSpec{
					ObjectMeta: metav1.ObjectMeta{Labels: proxyLabels},
					Spec: corev1.PodSpec{
						PriorityClassName:  "system-node-critical",
						ServiceAccountName: "kube-proxy",
						HostNetwork:        true,
						NodeSelector:       map[string]string{corev1.LabelOSStable: "linux"},
						Tolerations:        []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
						Containers: []corev1.Container{{
							Name:            "kube-proxy",
							Image:           fmt.Sprintf("%s/kube-proxy:%s", reg, in.version),
							ImagePullPolicy: corev1.PullIfNotPresent,
							Command:         []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"},
							Env: []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{
								FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "spec.nodeName"}}}},
							SecurityContext: &corev1.SecurityContext{Privileged: ptr.To(true)},
							VolumeMounts:    []corev1.VolumeMount{{Name: "kube-proxy", MountPath: "/var/lib/kube-proxy"}},
						}},
						Volumes: []corev1.Volume{{Name: "kube-proxy", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: "kube-proxy"}}}}},
					},
				},
			},
		},
	}
	return objs, nil
}
