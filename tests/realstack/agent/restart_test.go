package main

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	controlplanev1 "sigs.k8s.io/cluster-api/api/controlplane/kubeadm/v1beta2"
	clusterv1 "sigs.k8s.io/cluster-api/api/core/v1beta2"
)

// TestNodeAgentManyClustersAndRestart: three clusters at once, each on its own loopback address
// (one with RSA CAs), served by one agent; the agent is restarted (SIGTERM, then started again)
// and rebuilds every workload cluster from the management cluster, while the real controllers
// keep their control planes healthy and go on scaling (their caches follow the new incarnation).
func TestNodeAgentManyClustersAndRestart(t *testing.T) {
	e, step := setup(t, false)
	defer e.dumpOnFailure()
	e.startAgent()
	defer e.stopAgent()
	clusters := []clusterSpec{
		{name: "many-1", host: "127.100.1.1", workers: 1},
		{name: "many-2", host: "127.100.1.2", workers: 1, useRSA: true},
		{name: "many-3", host: "127.100.1.3", workers: 1},
	}
	for _, c := range clusters {
		e.createCluster(c)
	}
	step("3 clusters created (1 control-plane machine and 1 worker each; many-2 with RSA CAs)")
	for _, c := range clusters {
		e.waitKCP(c.name, "1 ready replica, healthy", 3*time.Minute, func(k *controlplanev1.KubeadmControlPlane) bool {
			return ptr.Deref(k.Status.ReadyReplicas, 0) == 1 && healthy(k)
		})
		e.waitMD(c.name, "md-0", 1)
	}
	step("every cluster: control plane healthy, 1 ready worker")

	e.stopAgent()
	for _, c := range clusters {
		if conn, err := net.DialTimeout("tcp", net.JoinHostPort(c.host, "6443"), time.Second); err == nil {
			_ = conn.Close()
			t.Fatalf("%s: the workload API still answers with the agent stopped", c.name)
		}
	}
	e.startAgent()
	step("agent restarted")
	for _, c := range clusters {
		e.checkWorkload(c.name, 1, fromVersion, 1)
		e.waitKCP(c.name, "1 ready replica, healthy after the restart", 2*time.Minute, func(k *controlplanev1.KubeadmControlPlane) bool {
			return ptr.Deref(k.Status.ReadyReplicas, 0) == 1 && healthy(k)
		})
	}
	step("every workload cluster rebuilt; every control plane healthy")

	// The controllers' caches of the workload clusters follow the new incarnation: new Nodes are
	// seen, Machines get their nodeRef.
	for _, c := range clusters {
		md := &clusterv1.MachineDeployment{}
		e.must(e.c.Get(e.ctx, client.ObjectKey{Namespace: e.ns, Name: c.name + "-md-0"}, md))
		patch := client.MergeFrom(md.DeepCopy())
		md.Spec.Replicas = ptr.To(int32(2))
		e.must(e.c.Patch(e.ctx, md, patch))
	}
	for _, c := range clusters {
		e.waitMD(c.name, "md-0", 2)
		e.checkWorkload(c.name, 1, fromVersion, 2)
	}
	step("every cluster scaled to 2 workers after the restart")

	for _, c := range clusters {
		e.must(e.c.Delete(e.ctx, &clusterv1.Cluster{ObjectMeta: clusterMeta(e.ns, c.name)}))
	}
	for _, c := range clusters {
		e.waitDeleted(c.name)
	}
	step("every cluster deleted, every workload API closed")
}

// startAgent runs bin/node-agent as stackctl would, its log beside the stack's.
func (e *env) startAgent() {
	e.t.Helper()
	port := freePort(e.t)
	logPath := filepath.Join(e.dir, "logs", "node-agent.log")
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	e.must(err)
	cmd := exec.Command(filepath.Join(e.build, "bin", "node-agent"), "--kubeconfig="+e.ready.Kubeconfig,
		fmt.Sprintf("--health-addr=127.0.0.1:%d", port))
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	e.must(cmd.Start())
	_ = f.Close()
	e.agent = cmd
	e.agentLog = logPath
	e.eventually("the node agent ready", time.Minute, func() (bool, string) {
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
		if err != nil {
			return false, err.Error()
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})
}

// stopAgent stops the test's node agent as a service manager would (SIGTERM) and waits for it.
func (e *env) stopAgent() {
	if e.agent == nil {
		return
	}
	cmd := e.agent
	e.agent = nil
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			e.t.Errorf("the node agent exited with %v on SIGTERM", err)
		}
	case <-time.After(20 * time.Second):
		_ = cmd.Process.Kill()
		<-done
		e.t.Errorf("the node agent did not stop within 20s of SIGTERM")
	}
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = l.Close() }()
	return l.Addr().(*net.TCPAddr).Port
}
