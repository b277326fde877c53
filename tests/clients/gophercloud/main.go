// Command gophercloud-check drives every containerinfra call of gophercloud v2 against a
// Magnum API found in a real Keystone's catalog, with real tokens, and checks that gophercloud's
// own result types decode each answer and carry the values that were sent.
//
// It is run by tests/it/client_gophercloud.rs, which starts the service, Keystone and the fake
// cloud, and passes everything through GC_* environment variables (see config). Each step prints
// "ok <step>"; the first failure prints "FAIL <step>: <why>" and exits 1.
package main

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gophercloud/gophercloud/v2"
	"github.com/gophercloud/gophercloud/v2/openstack"
	"github.com/gophercloud/gophercloud/v2/openstack/containerinfra/apiversions"
	"github.com/gophercloud/gophercloud/v2/openstack/containerinfra/v1/certificates"
	"github.com/gophercloud/gophercloud/v2/openstack/containerinfra/v1/clusters"
	"github.com/gophercloud/gophercloud/v2/openstack/containerinfra/v1/clustertemplates"
	"github.com/gophercloud/gophercloud/v2/openstack/containerinfra/v1/nodegroups"
	"github.com/gophercloud/gophercloud/v2/openstack/containerinfra/v1/quotas"
	"github.com/gophercloud/gophercloud/v2/openstack/identity/v3/tokens"
	"github.com/gophercloud/gophercloud/v2/pagination"
)

// config is what the test passes in the environment.
type config struct {
	authURL, region, domain          string
	user, password, project          string
	adminUser, adminPass, adminProj  string
	image, nextImage, nextKube, kube string
	keypair, network                 string
	flavor, masterFlavor             string
	wait                             time.Duration
}

func env(name string) string {
	v := os.Getenv(name)
	if v == "" {
		fmt.Fprintf(os.Stderr, "gophercloud-check: %s is not set\n", name)
		os.Exit(2)
	}
	return v
}

func configFromEnv() config {
	secs, err := strconv.Atoi(env("GC_WAIT_SECONDS"))
	if err != nil {
		fmt.Fprintf(os.Stderr, "gophercloud-check: GC_WAIT_SECONDS: %v\n", err)
		os.Exit(2)
	}
	return config{
		authURL: env("GC_AUTH_URL"), region: env("GC_REGION"), domain: env("GC_DOMAIN"),
		user: env("GC_USER"), password: env("GC_PASSWORD"), project: env("GC_PROJECT"),
		adminUser: env("GC_ADMIN_USER"), adminPass: env("GC_ADMIN_PASSWORD"),
		adminProj: env("GC_ADMIN_PROJECT"),
		image:     env("GC_IMAGE"), kube: env("GC_KUBE_TAG"),
		nextImage: env("GC_NEXT_IMAGE"), nextKube: env("GC_NEXT_KUBE_TAG"),
		keypair: env("GC_KEYPAIR"), network: env("GC_EXTERNAL_NETWORK"),
		flavor: env("GC_FLAVOR"), masterFlavor: env("GC_MASTER_FLAVOR"),
		wait: time.Duration(secs) * time.Second,
	}
}

// ---------------------------------------------------------------------------------------------
// Steps and checks.

type failure struct{ msg string }

func fail(format string, a ...any) { panic(failure{fmt.Sprintf(format, a...)}) }

func must[T any](v T, err error) T {
	if err != nil {
		fail("%v", err)
	}
	return v
}

func ok(err error) {
	if err != nil {
		fail("%v", err)
	}
}

func eq[T comparable](what string, got, want T) {
	if got != want {
		fail("%s: got %#v, want %#v", what, got, want)
	}
}

func eqMap(what string, got, want map[string]string) {
	if !maps.Equal(got, want) {
		fail("%s: got %v, want %v", what, got, want)
	}
}

func truth(what string, cond bool) {
	if !cond {
		fail("%s", what)
	}
}

// httpErr is the status and body of gophercloud's ErrUnexpectedResponseCode; it fails when err
// is anything else.
func httpErr(what string, err error) (int, string) {
	var e gophercloud.ErrUnexpectedResponseCode
	if !errors.As(err, &e) {
		fail("%s: want an HTTP error, got %v", what, err)
	}
	return e.Actual, string(e.Body)
}

// refused checks that err is the HTTP status code with a body containing text.
func refused(what string, err error, code int, text string) {
	got, body := httpErr(what, err)
	if got != code || !strings.Contains(body, text) {
		fail("%s: got %d %s, want %d containing %q", what, got, body, code, text)
	}
}

var steps int

func step(name string, f func()) {
	start := time.Now()
	func() {
		defer func() {
			if r := recover(); r != nil {
				if f, isFailure := r.(failure); isFailure {
					fmt.Printf("FAIL %s: %s\n", name, f.msg)
					os.Exit(1)
				}
				panic(r)
			}
		}()
		f()
	}()
	steps++
	fmt.Printf("ok %s (%.1fs)\n", name, time.Since(start).Seconds())
}

// at is a copy of c sending `OpenStack-API-Version: container-infra <v>`.
func at(c *gophercloud.ServiceClient, v string) *gophercloud.ServiceClient {
	cc := *c
	cc.Microversion = v
	return &cc
}

var errorStatuses = []string{"CREATE_FAILED", "UPDATE_FAILED", "DELETE_FAILED", "RESUME_FAILED", "ROLLBACK_FAILED"}

// waitFor polls get until it answers target (a 404 is "DELETE_COMPLETE", as the Terraform
// provider reads it), failing on a *_FAILED status or, when pending is given, on a status
// outside it. It returns the statuses seen, in order.
func waitFor(cfg config, what string, get func() (string, string, error), pending []string, target string) []string {
	var seen []string
	end := time.Now().Add(cfg.wait)
	for {
		status, reason, err := get()
		if gophercloud.ResponseCodeIs(err, http.StatusNotFound) {
			status, err = "DELETE_COMPLETE", nil
		}
		ok(err)
		if len(seen) == 0 || seen[len(seen)-1] != status {
			seen = append(seen, status)
		}
		if status == target {
			return seen
		}
		if slices.Contains(errorStatuses, status) {
			fail("%s is %s: %s (seen %v)", what, status, reason, seen)
		}
		if len(pending) > 0 && !slices.Contains(pending, status) {
			fail("%s: unexpected status %s waiting for %s (seen %v)", what, status, target, seen)
		}
		if time.Now().After(end) {
			fail("%s: still %s after %s waiting for %s (seen %v)", what, status, cfg.wait, target, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func clusterStatus(ctx context.Context, c *gophercloud.ServiceClient, id string) func() (string, string, error) {
	return func() (string, string, error) {
		cl, err := clusters.Get(ctx, c, id).Extract()
		if err != nil {
			return "", "", err
		}
		return cl.Status, cl.StatusReason, nil
	}
}

func nodegroupStatus(ctx context.Context, c *gophercloud.ServiceClient, cluster, ng string) func() (string, string, error) {
	return func() (string, string, error) {
		n, err := nodegroups.Get(ctx, c, cluster, ng).Extract()
		if err != nil {
			return "", "", err
		}
		return n.Status, n.StatusReason, nil
	}
}

func ptr[T any](v T) *T { return &v }

// ---------------------------------------------------------------------------------------------
// Authentication through the catalog.

type session struct {
	client  *gophercloud.ServiceClient
	project string // the token's project id
}

func login(ctx context.Context, cfg config, user, password, project string) session {
	opts := gophercloud.AuthOptions{
		IdentityEndpoint: cfg.authURL,
		Username:         user,
		Password:         password,
		DomainID:         cfg.domain,
		Scope:            &gophercloud.AuthScope{ProjectName: project, DomainID: cfg.domain},
	}
	provider := must(openstack.AuthenticatedClient(ctx, opts))
	auth, isV3 := provider.GetAuthResult().(tokens.CreateResult)
	truth("a Keystone v3 token", isV3)
	p := must(auth.ExtractProject())
	client := must(openstack.NewContainerInfraV1(provider, gophercloud.EndpointOpts{Region: cfg.region}))
	return session{client: client, project: p.ID}
}

// ---------------------------------------------------------------------------------------------
// The run.

func main() {
	cfg := configFromEnv()
	ctx := context.Background()
	start := time.Now()

	var alice, admin session
	step("authenticate and find container-infra in the catalog", func() {
		alice = login(ctx, cfg, cfg.user, cfg.password, cfg.project)
		admin = login(ctx, cfg, cfg.adminUser, cfg.adminPass, cfg.adminProj)
		truth("endpoint "+alice.client.Endpoint, strings.HasSuffix(alice.client.Endpoint, "/v1/"))
	})
	c := alice.client

	step("apiversions", func() { apiVersions(ctx, c) })

	var t1, t2 string
	step("clustertemplates create/get/update/list/delete", func() { t1, t2 = templates(ctx, cfg, c) })

	var c1, c2 string
	step("clusters create (a full CreateOpts and a zero-node one at 1.10)", func() {
		c1, c2 = createClusters(ctx, cfg, c, t1)
	})
	step("clusters list and list detail, paged", func() { listClusters(ctx, c, c1, c2) })
	step("nodegroups (1.9+) create/get/list/update/resize/delete", func() { nodeGroups(ctx, cfg, c, c1) })
	step("clusters update (node_count) and resize (1.7)", func() { resize(ctx, cfg, c, c1, c2) })
	step("certificates get/create/rotate", func() { certs(ctx, cfg, c, c1) })
	step("clusters upgrade (1.8)", func() { upgrade(ctx, cfg, c, c1, t2) })
	step("quotas create", func() { quota(ctx, c, admin.client, alice.project, t1) })
	step("clusters delete", func() {
		for _, id := range []string{c1, c2} {
			ok(clusters.Delete(ctx, c, id).ExtractErr())
		}
		for _, id := range []string{c1, c2} {
			waitFor(cfg, "cluster "+id, clusterStatus(ctx, c, id), []string{"DELETE_IN_PROGRESS"}, "DELETE_COMPLETE")
		}
		for _, id := range []string{t1, t2} {
			ok(clustertemplates.Delete(ctx, c, id).ExtractErr())
		}
	})
	fmt.Printf("PASS %d steps in %.1fs\n", steps, time.Since(start).Seconds())
}

func apiVersions(ctx context.Context, c *gophercloud.ServiceClient) {
	pages := must(apiversions.List(c).AllPages(ctx))
	vs := must(apiversions.ExtractAPIVersions(pages))
	eq("versions", len(vs), 1)
	v := vs[0]
	eq("id", v.ID, "v1")
	eq("status", v.Status, "CURRENT")
	eq("min_version", v.MinVersion, "1.1")
	minor := must(strconv.Atoi(strings.TrimPrefix(v.Version, "1.")))
	truth("max_version "+v.Version+" below 1.10, which Terraform needs", minor >= 10)
	// apiversions.Get reads `versions` from GET /v1/, which Magnum answers with the v1 document
	// (id, media_types, links, one link list per resource) and no `versions`: gophercloud finds
	// no version there, against Magnum as here.
	_, err := apiversions.Get(ctx, c, "v1").Extract()
	truth(fmt.Sprintf("apiversions.Get(v1): want ErrVersionNotFound, got %v", err),
		errors.As(err, &apiversions.ErrVersionNotFound{}))
}

func templates(ctx context.Context, cfg config, c *gophercloud.ServiceClient) (string, string) {
	// Unset booleans are omitted (*bool, omitempty): Magnum's defaults apply.
	t := must(clustertemplates.Create(ctx, c, clustertemplates.CreateOpts{
		COE: "kubernetes", Name: "gc-k8s", ImageID: cfg.image, KeyPairID: cfg.keypair,
		ExternalNetworkID: cfg.network, FlavorID: cfg.flavor, MasterFlavorID: cfg.masterFlavor,
		DNSNameServer: "8.8.8.8", DockerVolumeSize: ptr(10), NetworkDriver: "calico",
		Labels: map[string]string{"kube_tag": cfg.kube, "boot_volume_size": "20"},
	}).Extract())
	truth("uuid", t.UUID != "")
	eq("name", t.Name, "gc-k8s")
	eq("coe", t.COE, "kubernetes")
	eq("image_id", t.ImageID, cfg.image)
	eq("keypair_id", t.KeyPairID, cfg.keypair)
	eq("external_network_id", t.ExternalNetworkID, cfg.network)
	eq("flavor_id", t.FlavorID, cfg.flavor)
	eq("master_flavor_id", t.MasterFlavorID, cfg.masterFlavor)
	eq("dns_nameserver", t.DNSNameServer, "8.8.8.8")
	eq("docker_volume_size", t.DockerVolumeSize, 10)
	eq("network_driver", t.NetworkDriver, "calico")
	eq("cluster_distro (from the image)", t.ClusterDistro, "ubuntu")
	eq("floating_ip_enabled (Magnum's default)", t.FloatingIPEnabled, true)
	eq("master_lb_enabled (Magnum's default)", t.MasterLBEnabled, false)
	eq("public", t.Public, false)
	eq("tls_disabled", t.TLSDisabled, false)
	eq("hidden", t.Hidden, false)
	eq("server_type", t.ServerType, "vm")
	eqMap("labels", t.Labels, map[string]string{"kube_tag": cfg.kube, "boot_volume_size": "20"})
	truth("created_at", !t.CreatedAt.IsZero())
	truth("updated_at unset", t.UpdatedAt.IsZero())
	truth("project_id", t.ProjectID != "")
	truth("links", len(t.Links) > 0 && strings.Contains(t.Links[0].Href, t.UUID))

	// Every boolean and every string gophercloud has.
	u := must(clustertemplates.Create(ctx, c, clustertemplates.CreateOpts{
		COE: "kubernetes", Name: "gc-k8s-next", ImageID: cfg.nextImage, KeyPairID: cfg.keypair,
		ExternalNetworkID: cfg.network, FlavorID: cfg.flavor, MasterFlavorID: cfg.masterFlavor,
		FloatingIPEnabled: ptr(false), MasterLBEnabled: ptr(true), Public: ptr(false),
		RegistryEnabled: ptr(false), TLSDisabled: ptr(false), Hidden: ptr(false),
		HTTPProxy: "http://proxy:3128", HTTPSProxy: "http://proxy:3129", NoProxy: "10.0.0.0/8",
		DockerStorageDriver: "overlay2", VolumeDriver: "cinder", ServerType: "vm",
		APIServerPort: ptr(6443), DockerVolumeSize: ptr(10),
		Labels: map[string]string{"kube_tag": cfg.nextKube},
	}).Extract())
	eq("floating_ip_enabled", u.FloatingIPEnabled, false)
	eq("master_lb_enabled", u.MasterLBEnabled, true)
	eq("http_proxy", u.HTTPProxy, "http://proxy:3128")
	eq("https_proxy", u.HTTPSProxy, "http://proxy:3129")
	eq("no_proxy", u.NoProxy, "10.0.0.0/8")
	eq("docker_storage_driver", u.DockerStorageDriver, "overlay2")
	eq("volume_driver", u.VolumeDriver, "cinder")
	eq("apiserver_port", u.APIServerPort, 6443)

	// Get by uuid and by name.
	g := must(clustertemplates.Get(ctx, c, u.UUID).Extract())
	eq("get name", g.Name, "gc-k8s-next")
	eq("get created_at", g.CreatedAt, u.CreatedAt)
	g = must(clustertemplates.Get(ctx, c, "gc-k8s").Extract())
	eq("get by name", g.UUID, t.UUID)

	// Update: replace, add and remove. A patch value is a string or an int for Magnum (its
	// JsonPatchType): labels travel as a string, here a JSON object.
	upd := must(clustertemplates.Update(ctx, c, u.UUID, []clustertemplates.UpdateOpts{
		{Op: clustertemplates.ReplaceOp, Path: "/name", Value: "gc-k8s-next-1"},
		{Op: clustertemplates.ReplaceOp, Path: "/docker_volume_size", Value: 20},
		{Op: clustertemplates.ReplaceOp, Path: "/floating_ip_enabled", Value: true},
		{Op: clustertemplates.RemoveOp, Path: "/http_proxy"},
		{Op: clustertemplates.AddOp, Path: "/dns_nameserver", Value: "1.1.1.1"},
		{Op: clustertemplates.ReplaceOp, Path: "/labels", Value: `{"kube_tag": "` + cfg.nextKube + `", "foo": "bar"}`},
	}).Extract())
	for _, x := range []*clustertemplates.ClusterTemplate{upd, must(clustertemplates.Get(ctx, c, u.UUID).Extract())} {
		eq("updated name", x.Name, "gc-k8s-next-1")
		eq("updated docker_volume_size", x.DockerVolumeSize, 20)
		eq("updated floating_ip_enabled", x.FloatingIPEnabled, true)
		eq("removed http_proxy", x.HTTPProxy, "")
		eq("added dns_nameserver", x.DNSNameServer, "1.1.1.1")
		eqMap("replaced labels", x.Labels, map[string]string{"kube_tag": cfg.nextKube, "foo": "bar"})
		truth("updated_at", !x.UpdatedAt.IsZero())
		eq("created_at kept", x.CreatedAt, u.CreatedAt)
	}
	// A label by its path, as a JSON patch may address it.
	upd = must(clustertemplates.Update(ctx, c, u.UUID, []clustertemplates.UpdateOpts{
		{Op: clustertemplates.RemoveOp, Path: "/labels/foo"},
	}).Extract())
	eqMap("labels after remove /labels/foo", upd.Labels, map[string]string{"kube_tag": cfg.nextKube})
	// A map is refused with Magnum's WSME text.
	_, err := clustertemplates.Update(ctx, c, u.UUID, []clustertemplates.UpdateOpts{
		{Op: clustertemplates.ReplaceOp, Path: "/labels", Value: map[string]string{"a": "b"}},
	}).Extract()
	refused("labels as a map", err, 400, "Wrong type. Expected '[<class 'str'>, <class 'int'>]', got '<class 'dict'>'")
	// Magnum's validation answers through gophercloud's error.
	_, err = clustertemplates.Update(ctx, c, u.UUID, []clustertemplates.UpdateOpts{
		{Op: clustertemplates.ReplaceOp, Path: "/coe", Value: "swarm"},
	}).Extract()
	code, _ := httpErr("coe swarm", err)
	eq("coe swarm refused", code, 400)

	// List, one per page, following `next`.
	var names []string
	pages := 0
	ok(clustertemplates.List(c, clustertemplates.ListOpts{Limit: 1, SortKey: "name", SortDir: "asc"}).EachPage(ctx,
		func(_ context.Context, p pagination.Page) (bool, error) {
			ts, err := clustertemplates.ExtractClusterTemplates(p)
			if err != nil {
				return false, err
			}
			pages++
			for _, x := range ts {
				names = append(names, x.Name)
			}
			return true, nil
		}))
	eq("templates listed", strings.Join(names, ","), "gc-k8s,gc-k8s-next-1")
	truth(fmt.Sprintf("one template per page: %d pages", pages), pages >= 2)
	all := must(clustertemplates.ExtractClusterTemplates(must(clustertemplates.List(c, nil).AllPages(ctx))))
	eq("templates in all pages", len(all), 2)

	// Delete: 204, then 404.
	tmp := must(clustertemplates.Create(ctx, c, clustertemplates.CreateOpts{
		COE: "kubernetes", Name: "gc-tmp", ImageID: cfg.image, ExternalNetworkID: cfg.network,
		Labels: map[string]string{"kube_tag": cfg.kube},
	}).Extract())
	ok(clustertemplates.Delete(ctx, c, tmp.UUID).ExtractErr())
	_, err = clustertemplates.Get(ctx, c, tmp.UUID).Extract()
	truth(fmt.Sprintf("deleted template: want 404, got %v", err), gophercloud.ResponseCodeIs(err, 404))
	return t.UUID, u.UUID
}

func createClusters(ctx context.Context, cfg config, c *gophercloud.ServiceClient, t1 string) (string, string) {
	// gophercloud always sends `name`: unset, it is "", which Magnum refuses.
	_, err := clusters.Create(ctx, c, clusters.CreateOpts{ClusterTemplateID: t1}).Extract()
	refused("cluster without a name", err, 400, "name")

	id := must(clusters.Create(ctx, c, clusters.CreateOpts{
		ClusterTemplateID: t1, Name: "gc-one", Keypair: cfg.keypair,
		FlavorID: cfg.flavor, MasterFlavorID: cfg.masterFlavor,
		NodeCount: ptr(1), MasterCount: ptr(1), CreateTimeout: ptr(45),
		DockerVolumeSize: ptr(12), FloatingIPEnabled: ptr(false), MasterLBEnabled: ptr(true),
		Labels: map[string]string{"foo": "bar", "boot_volume_size": "30"}, MergeLabels: ptr(true),
	}).Extract())
	truth("uuid "+id, len(id) == 36)
	// Created at 1.10 with no workers.
	zero := must(clusters.Create(ctx, at(c, "1.10"), clusters.CreateOpts{
		ClusterTemplateID: "gc-k8s", Name: "gc-zero", NodeCount: ptr(0),
	}).Extract())
	// Below 1.10, zero workers is refused.
	_, err = clusters.Create(ctx, c, clusters.CreateOpts{ClusterTemplateID: t1, Name: "gc-bad", NodeCount: ptr(0)}).Extract()
	code, _ := httpErr("node_count 0 at 1.1", err)
	eq("node_count 0 at 1.1", code, 400)

	// The first GET, at once, finds it.
	first := must(clusters.Get(ctx, c, id).Extract())
	eq("first status", first.Status, "CREATE_IN_PROGRESS")
	seen := waitFor(cfg, "cluster gc-one", clusterStatus(ctx, c, id), []string{"CREATE_IN_PROGRESS"}, "CREATE_COMPLETE")
	eq("statuses", strings.Join(seen, ","), "CREATE_IN_PROGRESS,CREATE_COMPLETE")
	waitFor(cfg, "cluster gc-zero", clusterStatus(ctx, c, zero), []string{"CREATE_IN_PROGRESS"}, "CREATE_COMPLETE")

	cl := must(clusters.Get(ctx, c, "gc-one").Extract())
	eq("uuid by name", cl.UUID, id)
	eq("name", cl.Name, "gc-one")
	eq("cluster_template_id", cl.ClusterTemplateID, t1)
	eq("keypair", cl.KeyPair, cfg.keypair)
	eq("flavor_id", cl.FlavorID, cfg.flavor)
	eq("master_flavor_id", cl.MasterFlavorID, cfg.masterFlavor)
	eq("node_count", cl.NodeCount, 1)
	eq("master_count", cl.MasterCount, 1)
	eq("create_timeout", cl.CreateTimeout, 45)
	eq("docker_volume_size", cl.DockerVolumeSize, 12)
	eq("floating_ip_enabled", cl.FloatingIPEnabled, false)
	eq("master_lb_enabled", cl.MasterLBEnabled, true)
	eqMap("labels (merged)", cl.Labels, map[string]string{"kube_tag": cfg.kube, "foo": "bar", "boot_volume_size": "30"})
	eqMap("labels_added", cl.LabelsAdded, map[string]string{"foo": "bar"})
	eqMap("labels_overridden", cl.LabelsOverridden, map[string]string{"boot_volume_size": "20"})
	eqMap("labels_skipped", cl.LabelsSkipped, map[string]string{})
	eq("status", cl.Status, "CREATE_COMPLETE")
	eq("coe_version", cl.COEVersion, cfg.kube)
	truth("api_address "+cl.APIAddress, strings.HasPrefix(cl.APIAddress, "https://"))
	eq("node_addresses", len(cl.NodeAddresses), 1)
	eq("master_addresses", len(cl.MasterAddresses), 1)
	truth("stack_id", cl.StackID != "")
	truth("project_id", cl.ProjectID != "")
	truth("user_id", cl.UserID != "")
	truth("created_at", !cl.CreatedAt.IsZero())
	truth("links", len(cl.Links) > 0)
	z := must(clusters.Get(ctx, c, zero).Extract())
	eq("zero node_count", z.NodeCount, 0)
	eq("zero node_addresses", len(z.NodeAddresses), 0)
	eq("zero floating_ip_enabled (the template's)", z.FloatingIPEnabled, true)
	eqMap("zero labels (the template's)", z.Labels, map[string]string{"kube_tag": cfg.kube, "boot_volume_size": "20"})
	return id, zero
}

func listClusters(ctx context.Context, c *gophercloud.ServiceClient, c1, c2 string) {
	for _, detail := range []bool{false, true} {
		opts := clusters.ListOpts{Limit: 1, SortKey: "name", SortDir: "asc"}
		pager := clusters.List(c, opts)
		if detail {
			pager = clusters.ListDetail(c, opts)
		}
		var ids []string
		pages := 0
		ok(pager.EachPage(ctx, func(_ context.Context, p pagination.Page) (bool, error) {
			cs, err := clusters.ExtractClusters(p)
			if err != nil {
				return false, err
			}
			pages++
			for _, x := range cs {
				ids = append(ids, x.UUID)
				truth("status in the list", x.Status != "")
				truth("stack_id in the list", x.StackID != "")
				if detail {
					truth("created_at in the detailed list", !x.CreatedAt.IsZero())
					truth("api_address in the detailed list", x.APIAddress != "" || x.NodeCount == 0)
				}
			}
			return true, nil
		}))
		eq(fmt.Sprintf("listed (detail %v)", detail), strings.Join(ids, ","), c1+","+c2)
		truth(fmt.Sprintf("one per page: %d pages", pages), pages >= 2)
	}
	// After the first, newest first.
	all := must(clusters.ExtractClusters(must(clusters.List(c, clusters.ListOpts{Marker: c2, SortKey: "name", SortDir: "desc"}).AllPages(ctx))))
	eq("after the marker", len(all), 1)
	eq("after the marker", all[0].UUID, c1)
}

func nodeGroups(ctx context.Context, cfg config, c *gophercloud.ServiceClient, cluster string) {
	c9 := at(c, "1.9")
	// Below 1.9 there are no nodegroups.
	_, err := nodegroups.List(at(c, "1.8"), cluster, nil).AllPages(ctx)
	code, _ := httpErr("nodegroups at 1.8", err)
	eq("nodegroups at 1.8", code, 406)

	ngs := must(nodegroups.ExtractNodeGroups(must(nodegroups.List(c9, cluster, nil).AllPages(ctx))))
	byName := map[string]nodegroups.NodeGroup{}
	for _, n := range ngs {
		byName[n.Name] = n
	}
	eq("default nodegroups", len(ngs), 2)
	w, m := byName["default-worker"], byName["default-master"]
	eq("default-worker role", w.Role, "worker")
	eq("default-worker is_default", w.IsDefault, true)
	eq("default-worker node_count", w.NodeCount, 1)
	eq("default-master role", m.Role, "master")
	eq("default-master is_default", m.IsDefault, true)
	masters := must(nodegroups.ExtractNodeGroups(must(nodegroups.List(c9, cluster, nodegroups.ListOpts{Role: "master"}).AllPages(ctx))))
	eq("role=master", len(masters), 1)
	eq("role=master", masters[0].Name, "default-master")

	created := must(nodegroups.Create(ctx, c9, cluster, nodegroups.CreateOpts{
		Name: "gc-ng", FlavorID: cfg.flavor, NodeCount: ptr(1), MinNodeCount: 1, MaxNodeCount: ptr(3),
		Labels: map[string]string{"ng": "yes"}, MergeLabels: ptr(true), Role: "big",
		DockerVolumeSize: ptr(15),
	}).Extract())
	truth("id", created.ID > 0)
	truth("uuid", len(created.UUID) == 36)
	eq("cluster_id", created.ClusterID, cluster)
	eq("name", created.Name, "gc-ng")
	eq("role", created.Role, "big")
	eq("is_default", created.IsDefault, false)
	eq("node_count", created.NodeCount, 1)
	eq("min_node_count", created.MinNodeCount, 1)
	truth("max_node_count 3", created.MaxNodeCount != nil && *created.MaxNodeCount == 3)
	truth("docker_volume_size 15", created.DockerVolumeSize != nil && *created.DockerVolumeSize == 15)
	eq("image_id (the cluster's)", created.ImageID, cfg.image)
	eq("flavor_id", created.FlavorID, cfg.flavor)
	eq("labels (merged)", created.Labels["ng"], "yes")
	eq("labels kube_tag (the cluster's)", created.Labels["kube_tag"], cfg.kube)
	eqMap("labels_added", created.LabelsAdded, map[string]string{"ng": "yes"})
	truth("created_at", !created.CreatedAt.IsZero())
	seen := waitFor(cfg, "nodegroup gc-ng", nodegroupStatus(ctx, c9, cluster, created.UUID), []string{"CREATE_IN_PROGRESS"}, "CREATE_COMPLETE")
	eq("nodegroup statuses", seen[0], "CREATE_IN_PROGRESS")
	got := must(nodegroups.Get(ctx, c9, cluster, "gc-ng").Extract())
	eq("get by name", got.UUID, created.UUID)
	eq("node_addresses", len(got.NodeAddresses), 1)

	// One per page, following `next`.
	var names []string
	ok(nodegroups.List(c9, cluster, nodegroups.ListOpts{Limit: 1, SortKey: "name", SortDir: "asc"}).EachPage(ctx,
		func(_ context.Context, p pagination.Page) (bool, error) {
			ns, err := nodegroups.ExtractNodeGroups(p)
			for _, n := range ns {
				names = append(names, n.Name)
			}
			return true, err
		}))
	eq("paged nodegroups", strings.Join(names, ","), "default-master,default-worker,gc-ng")

	// Update min/max (Terraform's shape: remove max to unset it), then resize the nodegroup.
	upd := must(nodegroups.Update(ctx, c9, cluster, created.UUID, []nodegroups.UpdateOpts{
		{Op: nodegroups.ReplaceOp, Path: "/min_node_count", Value: 0},
		{Op: nodegroups.ReplaceOp, Path: "/max_node_count", Value: 5},
	}).Extract())
	eq("updated min_node_count", upd.MinNodeCount, 0)
	truth("updated max_node_count 5", upd.MaxNodeCount != nil && *upd.MaxNodeCount == 5)
	upd = must(nodegroups.Update(ctx, c9, cluster, created.UUID, []nodegroups.UpdateOpts{
		{Op: nodegroups.RemoveOp, Path: "/max_node_count"},
	}).Extract())
	truth("max_node_count removed", upd.MaxNodeCount == nil)
	_, err = nodegroups.Update(ctx, c9, cluster, created.UUID, []nodegroups.UpdateOpts{
		{Op: nodegroups.ReplaceOp, Path: "/min_node_count", Value: 4},
	}).Extract()
	// Magnum's NodeGroupInvalidInput is a Conflict.
	refused("min_node_count above node_count", err, 409,
		"min_node_count for gc-ng is invalid (min_node_count (4) should be less or equal to node_count (1))")
	waitFor(cfg, "nodegroup gc-ng", nodegroupStatus(ctx, c9, cluster, created.UUID), nil, "UPDATE_COMPLETE")

	r := must(clusters.Resize(ctx, c9, cluster, clusters.ResizeOpts{NodeCount: ptr(2), NodeGroup: created.UUID}).Extract())
	eq("resize answers the cluster", r, cluster)
	seen = waitFor(cfg, "nodegroup gc-ng", nodegroupStatus(ctx, c9, cluster, created.UUID), []string{"UPDATE_IN_PROGRESS"}, "UPDATE_COMPLETE")
	eq("resize statuses", seen[0], "UPDATE_IN_PROGRESS")
	got = must(nodegroups.Get(ctx, c9, cluster, created.UUID).Extract())
	eq("resized node_count", got.NodeCount, 2)
	eq("resized node_addresses", len(got.NodeAddresses), 2)
	truth("updated_at", !got.UpdatedAt.IsZero())

	// The default nodegroups cannot be deleted.
	err = nodegroups.Delete(ctx, c9, cluster, "default-worker").ExtractErr()
	code, _ = httpErr("deleting default-worker", err)
	eq("deleting default-worker", code, 400)

	ok(nodegroups.Delete(ctx, c9, cluster, created.UUID).ExtractErr())
	waitFor(cfg, "nodegroup gc-ng", nodegroupStatus(ctx, c9, cluster, created.UUID), []string{"DELETE_IN_PROGRESS"}, "DELETE_COMPLETE")
	waitFor(cfg, "cluster", clusterStatus(ctx, c, cluster), nil, "UPDATE_COMPLETE")
}

func resize(ctx context.Context, cfg config, c *gophercloud.ServiceClient, c1, zero string) {
	// PATCH node_count, no microversion.
	r := must(clusters.Update(ctx, c, c1, []clusters.UpdateOpts{
		{Op: clusters.ReplaceOp, Path: "/node_count", Value: 2},
	}).Extract())
	eq("update answers the uuid", r, c1)
	seen := waitFor(cfg, "cluster gc-one", clusterStatus(ctx, c, c1), nil, "UPDATE_COMPLETE")
	eq("update statuses", seen[0], "UPDATE_IN_PROGRESS")
	cl := must(clusters.Get(ctx, c, c1).Extract())
	eq("updated node_count", cl.NodeCount, 2)
	eq("updated node_addresses", len(cl.NodeAddresses), 2)

	// Resize needs 1.7.
	_, err := clusters.Resize(ctx, c, c1, clusters.ResizeOpts{NodeCount: ptr(1)}).Extract()
	code, _ := httpErr("resize at 1.1", err)
	eq("resize at 1.1", code, 406)
	r = must(clusters.Resize(ctx, at(c, "1.7"), c1, clusters.ResizeOpts{NodeCount: ptr(1), NodeGroup: "default-worker"}).Extract())
	eq("resize answers the uuid", r, c1)
	seen = waitFor(cfg, "cluster gc-one", clusterStatus(ctx, c, c1), nil, "UPDATE_COMPLETE")
	eq("resize statuses", seen[0], "UPDATE_IN_PROGRESS")
	cl = must(clusters.Get(ctx, c, c1).Extract())
	eq("resized node_count", cl.NodeCount, 1)
	// The removed machine's address may still be listed at UPDATE_COMPLETE for a moment (seen
	// once on a loaded machine): it goes.
	waitFor(cfg, "node_addresses of gc-one", func() (string, string, error) {
		cl, err := clusters.Get(ctx, c, c1).Extract()
		if err != nil {
			return "", "", err
		}
		return fmt.Sprintf("%d addresses", len(cl.NodeAddresses)), "", nil
	}, nil, "1 addresses")

	// The zero-node cluster grows by resize without a nodegroup (the default worker).
	r = must(clusters.Resize(ctx, at(c, "1.7"), zero, clusters.ResizeOpts{NodeCount: ptr(1)}).Extract())
	eq("resize answers the uuid", r, zero)
	waitFor(cfg, "cluster gc-zero", clusterStatus(ctx, c, zero), nil, "UPDATE_COMPLETE")
	eq("zero resized", must(clusters.Get(ctx, c, zero).Extract()).NodeCount, 1)
}

// workload GETs /version on the cluster's API with a client certificate, trusting ca.
func workload(apiAddress string, ca []byte, cert tls.Certificate) int {
	pool := x509.NewCertPool()
	truth("CA PEM", pool.AppendCertsFromPEM(ca))
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{cert},
	}}}
	resp := must(client.Get(apiAddress + "/version"))
	defer resp.Body.Close()
	body := must(io.ReadAll(resp.Body))
	if resp.StatusCode == 200 {
		var v struct {
			GitVersion string `json:"gitVersion"`
		}
		ok(json.Unmarshal(body, &v))
		truth("gitVersion "+v.GitVersion, strings.HasPrefix(v.GitVersion, "v1."))
	}
	return resp.StatusCode
}

// signed asks the service to sign a fresh key's CSR (as Terraform's kubeconfig does) and checks
// the certificate against ca.
func signed(ctx context.Context, c *gophercloud.ServiceClient, cluster string, ca []byte) tls.Certificate {
	key := must(rsa.GenerateKey(rand.Reader, 2048))
	der := must(x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{
		SignatureAlgorithm: x509.SHA512WithRSA,
		Subject:            pkix.Name{CommonName: "admin", Organization: []string{"system:masters"}, OrganizationalUnit: []string{"gophercloud"}},
	}, key))
	csr := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}))
	got := must(certificates.Create(ctx, c, certificates.CreateOpts{ClusterUUID: cluster, CSR: csr}).Extract())
	eq("csr echoed", got.CSR, csr)
	eq("cluster_uuid", got.ClusterUUID, cluster)
	block, _ := pem.Decode([]byte(got.PEM))
	truth("certificate PEM", block != nil)
	leaf := must(x509.ParseCertificate(block.Bytes))
	eq("subject CN", leaf.Subject.CommonName, "admin")
	eq("subject O", strings.Join(leaf.Subject.Organization, ","), "system:masters")
	pool := x509.NewCertPool()
	truth("CA PEM", pool.AppendCertsFromPEM(ca))
	_ = must(leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}))
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})
	return must(tls.X509KeyPair([]byte(got.PEM), keyPEM))
}

func certs(ctx context.Context, cfg config, c *gophercloud.ServiceClient, cluster string) {
	ca := must(certificates.Get(ctx, c, cluster).Extract())
	eq("cluster_uuid", ca.ClusterUUID, cluster)
	truth("CA PEM", strings.HasPrefix(ca.PEM, "-----BEGIN CERTIFICATE-----"))
	truth("links", len(ca.Links) > 0)
	api := must(clusters.Get(ctx, c, cluster).Extract()).APIAddress
	old := signed(ctx, c, cluster, []byte(ca.PEM))
	eq("the workload API with the signed certificate", workload(api, []byte(ca.PEM), old), 200)
	// bay_uuid, gophercloud's other field, is gone from Magnum (since the bays went): refused
	// with WSME's text, as Magnum does.
	_, err := certificates.Create(ctx, c, certificates.CreateOpts{BayUUID: cluster, CSR: "x"}).Extract()
	refused("bay_uuid", err, 400, "Unknown attribute for argument certificate: bay_uuid")

	ok(certificates.Update(ctx, c, cluster).ExtractErr())
	seen := waitFor(cfg, "cluster (CA rotation)", clusterStatus(ctx, c, cluster), nil, "UPDATE_COMPLETE")
	eq("rotation statuses", seen[0], "UPDATE_IN_PROGRESS")
	rotated := must(certificates.Get(ctx, c, cluster).Extract())
	truth("the CA changed", rotated.PEM != ca.PEM)
	eq("a certificate of the old CA", workload(api, []byte(rotated.PEM), old), 401)
	fresh := signed(ctx, c, cluster, []byte(rotated.PEM))
	eq("a certificate of the new CA", workload(api, []byte(rotated.PEM), fresh), 200)
}

func upgrade(ctx context.Context, cfg config, c *gophercloud.ServiceClient, cluster, t2 string) {
	// Upgrade needs 1.8: Magnum answers 1.7 with ClusterUpgradeNotSupported, older ones 406.
	_, err := clusters.Upgrade(ctx, at(c, "1.7"), cluster, clusters.UpgradeOpts{ClusterTemplate: t2}).Extract()
	refused("upgrade at 1.7", err, 400, "Cluster upgrade is not supported in the provided microversion.")
	_, err = clusters.Upgrade(ctx, at(c, "1.6"), cluster, clusters.UpgradeOpts{ClusterTemplate: t2}).Extract()
	code, _ := httpErr("upgrade at 1.6", err)
	eq("upgrade at 1.6", code, 406)
	// A nodegroup of our own, whose labels took the cluster's kube_tag.
	c9 := at(c, "1.9")
	ng := must(nodegroups.Create(ctx, c9, cluster, nodegroups.CreateOpts{Name: "gc-up", NodeCount: ptr(1)}).Extract())
	eq("gc-up kube_tag", ng.Labels["kube_tag"], cfg.kube)
	waitFor(cfg, "nodegroup gc-up", nodegroupStatus(ctx, c9, cluster, ng.UUID), []string{"CREATE_IN_PROGRESS"}, "CREATE_COMPLETE")
	waitFor(cfg, "cluster", clusterStatus(ctx, c, cluster), nil, "UPDATE_COMPLETE")
	r := must(clusters.Upgrade(ctx, at(c, "1.8"), cluster, clusters.UpgradeOpts{ClusterTemplate: t2}).Extract())
	eq("upgrade answers the uuid", r, cluster)
	seen := waitFor(cfg, "cluster (upgrade)", clusterStatus(ctx, c, cluster), nil, "UPDATE_COMPLETE")
	eq("upgrade statuses", seen[0], "UPDATE_IN_PROGRESS")
	cl := must(clusters.Get(ctx, c, cluster).Extract())
	eq("cluster_template_id", cl.ClusterTemplateID, t2)
	eq("coe_version", cl.COEVersion, cfg.nextKube)
	eq("kube_tag label", cl.Labels["kube_tag"], cfg.nextKube)
	// Every nodegroup runs the cluster's version, and says so (as magnum-cluster-api labels
	// them): a label left behind would be "overridden", which the Terraform provider's
	// merge_labels reads as a change that replaces the nodegroup.
	for _, n := range must(nodegroups.ExtractNodeGroups(must(nodegroups.List(c9, cluster, nil).AllPages(ctx)))) {
		got := must(nodegroups.Get(ctx, c9, cluster, n.UUID).Extract())
		eq(n.Name+" kube_tag", got.Labels["kube_tag"], cfg.nextKube)
		_, overridden := got.LabelsOverridden["kube_tag"]
		truth(n.Name+" kube_tag not overridden", !overridden)
	}
	// The template in use cannot be deleted.
	err = clustertemplates.Delete(ctx, c, t2).ExtractErr()
	code, _ = httpErr("deleting a template in use", err)
	eq("deleting a template in use", code, 400)
}

func quota(ctx context.Context, member, admin *gophercloud.ServiceClient, project, template string) {
	// Members cannot set quotas.
	_, err := quotas.Create(ctx, member, quotas.CreateOpts{ProjectID: project, Resource: "Cluster", HardLimit: 5}).Extract()
	code, _ := httpErr("quota by a member", err)
	eq("quota by a member", code, 403)
	q := must(quotas.Create(ctx, admin, quotas.CreateOpts{ProjectID: project, Resource: "Cluster", HardLimit: 2}).Extract())
	eq("resource", q.Resource, "Cluster")
	eq("hard_limit", q.HardLimit, 2)
	eq("project_id", q.ProjectID, project)
	truth("id "+q.ID, q.ID != "")
	truth("created_at", !q.CreatedAt.IsZero())
	_, err = quotas.Create(ctx, admin, quotas.CreateOpts{ProjectID: project, Resource: "Cluster", HardLimit: 3}).Extract()
	code, _ = httpErr("the same quota again", err)
	eq("the same quota again", code, 409)
	// The project has two clusters: a third is over the quota.
	_, err = clusters.Create(ctx, member, clusters.CreateOpts{ClusterTemplateID: template, Name: "gc-three"}).Extract()
	code, _ = httpErr("a cluster over the quota", err)
	eq("a cluster over the quota", code, 403)
}
