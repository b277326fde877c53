// Command node-agent plays every server Cluster API's OpenStack provider creates in magnum-capi's
// real-stack test tier, where no VM can boot: it watches the management cluster's Clusters,
// Machines and OpenStackMachines and, for each Cluster with a controlPlaneEndpoint, serves that
// cluster's API on exactly that address (a 127.x address on loopback) with certificates from the
// cluster's own CAs; in it, every server that has booted registers its Node, and every
// control-plane server kubeadm's static Pods and an etcd member (reached, as KCP reaches it,
// through a port-forward to its etcd Pod). The real KubeadmControlPlane, MachineSet,
// MachineDeployment and MachineHealthCheck controllers then see machines as on a real cloud.
// A server whose image or flavor names "never-joins" never comes up.
//
// The workload objects live in Cluster API's in-memory store and are served by its fake API
// server and etcd (sigs.k8s.io/cluster-api/test/infrastructure/inmemory), behind this agent's own
// listeners, TLS and authentication. They are kept in memory: a restarted agent builds every
// workload cluster again from the management cluster.
//
//	node-agent --kubeconfig admin.kubeconfig --health-addr 127.0.0.1:PORT
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	bootstrapv1 "sigs.k8s.io/cluster-api/api/bootstrap/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// openStackMachine is watched when its CRD exists; other infrastructure kinds are looked at on
// every (periodic) reconcile of their Cluster.
var openStackMachine = schema.GroupKind{Group: "infrastructure.cluster.x-k8s.io", Kind: "OpenStackMachine"}

func main() {
	// --kubeconfig (the management cluster's; default: $KUBECONFIG or in-cluster) is
	// controller-runtime's own flag.
	healthAddr := flag.String("health-addr", "127.0.0.1:9440", "address of the /healthz and /readyz endpoints")
	concurrency := flag.Int("concurrency", 4, "Clusters reconciled at once")
	opts := zap.Options{Development: false}
	opts.BindFlags(flag.CommandLine)
	flag.Parse()
	ctrl.SetLogger(zap.New(zap.UseFlagOptions(&opts)))
	if err := run(*healthAddr, *concurrency); err != nil {
		fmt.Fprintf(os.Stderr, "node-agent: %v\n", err)
		os.Exit(1)
	}
}

func run(healthAddr string, concurrency int) error {
	log := ctrl.Log.WithName("node-agent")
	restConfig, err := ctrl.GetConfig()
	if err != nil {
		return err
	}
	restConfig.QPS, restConfig.Burst = 100, 200
	restConfig.UserAgent = "realstack-node-agent"

	mgmtScheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, clusterv1.AddToScheme, bootstrapv1.AddToScheme} {
		if err := add(mgmtScheme); err != nil {
			return err
		}
	}
	workloadScheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, apiextensionsv1.AddToScheme} {
		if err := add(workloadScheme); err != nil {
			return err
		}
	}

	mgr, err := ctrl.NewManager(restConfig, ctrl.Options{
		Scheme:                 mgmtScheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: healthAddr,
		LeaderElection:         false,
	})
	if err != nil {
		return err
	}
	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("ping", healthz.Ping); err != nil {
		return err
	}

	workloads := newWorkloads(ctrl.Log.WithName("workload"), workloadScheme)
	agent := newAgent(mgr.GetClient(), mgr.GetAPIReader(), mgr.GetRESTMapper(), workloads)

	toCluster := func(_ context.Context, o client.Object) []reconcile.Request {
		name := o.GetLabels()[clusterv1.ClusterNameLabel]
		if m, ok := o.(*clusterv1.Machine); ok && m.Spec.ClusterName != "" {
			name = m.Spec.ClusterName
		}
		if name == "" {
			return nil
		}
		return []reconcile.Request{{NamespacedName: client.ObjectKey{Namespace: o.GetNamespace(), Name: name}}}
	}
	b := ctrl.NewControllerManagedBy(mgr).
		Named("nodeagent").
		For(&clusterv1.Cluster{}).
		Watches(&clusterv1.Machine{}, handler.EnqueueRequestsFromMapFunc(toCluster)).
		WithOptions(controller.Options{MaxConcurrentReconciles: concurrency})
	if mapping, err := mgr.GetRESTMapper().RESTMapping(openStackMachine); err == nil {
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(mapping.GroupVersionKind)
		b = b.Watches(u, handler.EnqueueRequestsFromMapFunc(toCluster))
	} else {
		log.Info("OpenStackMachines are not served: infrastructure machines are only looked at periodically", "error", err.Error())
	}
	if err := b.Complete(agent); err != nil {
		return err
	}

	ctx := ctrl.SetupSignalHandler()
	if err := workloads.start(ctx); err != nil {
		return err
	}
	defer agent.stopAll()
	log.Info("Starting")
	return mgr.Start(ctx)
}
