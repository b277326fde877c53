//! Terraform with the OpenStack provider, the real ones, drive the service: the machine's
//! Terraform (see [`crate::common::clients::terraform`]) and `terraform-provider-openstack` v3
//! built from its Go module by `tests/clients/build.sh`, installed through a filesystem mirror
//! named in a CLI configuration written here (`TF_CLI_CONFIG_FILE`: no registry, no checkpoint,
//! Terraform never leaves the machine). The provider authenticates against the real Keystone and
//! finds the service in its catalog; the service runs the Cluster API driver on a simulated
//! management cluster.
//!
//! One configuration holds two `openstack_containerinfra_clustertemplate_v1`, an
//! `openstack_containerinfra_cluster_v1` (labels with `merge_labels`, one overriding the
//! template's, node and master counts, floating IP and master LB settings, its kubeconfig), an
//! `openstack_containerinfra_nodegroup_v1` and the data source of each, and goes through:
//! - `apply`: `CREATE_COMPLETE` through the provider's own waits; the kubeconfig's client
//!   certificate is accepted by the cluster's workload API;
//! - `plan` shows no changes (every attribute answered round-trips through the provider's
//!   schema), after every apply;
//! - an update: the cluster moved to the other template (an upgrade at 1.8) and resized
//!   (`node_count`), that template's attributes patched as the provider patches them (booleans as
//!   `"true"`, labels as a Python literal, `remove` for an emptied string), the template in use
//!   renamed (the one change Magnum allows it);
//! - the nodegroup's counts changed: `min`/`max` by `PATCH`, `node_count` by a resize of the
//!   nodegroup;
//! - a change Magnum forbids (the labels of a template in use) fails, the provider showing
//!   Magnum's text;
//! - `terraform import` of a template, a cluster and a nodegroup made through the API (made while
//!   the first apply waits), then `plan` with no changes;
//! - `destroy` of both, waiting for the deletes; nothing is left.
//!
//! The flow runs twice: on the simulated management cluster (alice in alpha, the catalog's
//! RegionOne endpoint) and on the real stack (real kube-apiserver, CAPI, KCP, CAPO and CAAPH;
//! `magnum-capi serve` as production runs it, named in the catalog as region `RegionReal`, a
//! project of its own; the kubeconfig checked on the workload API the node agent serves).

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Instant;

use crate::common::capi::capi_app_on;
use crate::common::clients::{built, terraform};
use crate::common::fakecloud::{IMAGE_UBUNTU_KUBE, KEYPAIR_DEFAULT, NETWORK_PUBLIC};
use crate::common::keystone::{DOMAIN, REGION, keystone, password, private_dir};
use crate::common::stack::{cloud, env_exclusive, serve_as_endpoint};
use crate::common::wait::{deadline, status};
use magnum_capi::capi::pki;
use serde_json::{Value, json};

/// The machine's Terraform with our CLI configuration, in working directories under `home`.
struct Tf {
    bin: PathBuf,
    home: PathBuf,
    cli_config: PathBuf,
}

impl Tf {
    /// `terraform <args>` in `dir`, with nothing of the caller's environment but `PATH`.
    async fn run(&self, dir: &Path, args: &[&str]) -> Output {
        let t0 = Instant::now();
        let mut cmd = tokio::process::Command::new(&self.bin);
        cmd.args(args)
            .current_dir(dir)
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", &self.home)
            .env("TF_CLI_CONFIG_FILE", &self.cli_config)
            .env("CHECKPOINT_DISABLE", "1")
            .env("TF_IN_AUTOMATION", "1")
            .env("TF_INPUT", "0")
            .env("TF_LOG_PROVIDER", "DEBUG")
            .env("TF_LOG_PATH", dir.join("terraform.log"))
            .kill_on_drop(true);
        let out = tokio::time::timeout(deadline() * 3, cmd.output())
            .await
            .unwrap_or_else(|_| panic!("terraform {args:?} did not finish"))
            .expect("running terraform");
        eprintln!(
            "terraform {} ({}): {} in {:.1?}",
            args.join(" "),
            dir.file_name().unwrap_or_default().to_string_lossy(),
            out.status,
            t0.elapsed()
        );
        out
    }

    /// `run`, which must succeed; its stdout.
    async fn ok(&self, dir: &Path, args: &[&str]) -> String {
        let out = self.run(dir, args).await;
        assert!(out.status.success(), "{}", report(dir, args, &out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `plan -detailed-exitcode`: 0, no changes (2 would be a diff).
    async fn no_changes(&self, dir: &Path) {
        let args = ["plan", "-no-color", "-detailed-exitcode"];
        let out = self.run(dir, &args).await;
        assert_eq!(out.status.code(), Some(0), "{}", report(dir, &args, &out));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains("No changes."), "{stdout}");
    }

    /// The state's resources and data sources, by address (`terraform show -json`).
    async fn state(&self, dir: &Path) -> serde_json::Map<String, Value> {
        let out = self.ok(dir, &["show", "-json", "-no-color"]).await;
        let v: Value = serde_json::from_str(&out).expect("terraform show -json");
        v["values"]["root_module"]["resources"]
            .as_array()
            .expect("resources in the state")
            .iter()
            .map(|r| {
                (
                    r["address"].as_str().unwrap().to_string(),
                    r["values"].clone(),
                )
            })
            .collect()
    }
}

/// What a failed terraform run said, with the end of the provider's log.
fn report(dir: &Path, args: &[&str], out: &Output) -> String {
    let log = std::fs::read_to_string(dir.join("terraform.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    format!(
        "terraform {args:?}: {}\n--- stdout\n{}\n--- stderr\n{}\n--- end of terraform.log\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        lines[lines.len().saturating_sub(60)..].join("\n")
    )
}

/// Who the provider logs in as, and where the catalog's service is: a user of a project (password
/// auth) and the region of the `container-infra` endpoint under test.
struct Login {
    user: String,
    project: String,
    region: String,
}

/// The provider block and its requirement: `login`, through the catalog.
fn provider_tf(version: &str, login: &Login) -> String {
    let ks = keystone();
    format!(
        r#"terraform {{
  required_providers {{
    openstack = {{
      source  = "terraform-provider-openstack/openstack"
      version = "= {version}"
    }}
  }}
}}

provider "openstack" {{
  auth_url          = "{auth}"
  region            = "{region}"
  user_name         = "{user}"
  password          = "{password}"
  tenant_name       = "{project}"
  user_domain_id    = "{DOMAIN}"
  project_domain_id = "{DOMAIN}"
}}
"#,
        auth = ks.url,
        region = login.region,
        user = login.user,
        project = login.project,
        password = password(&login.user),
    )
}

/// The main configuration at each stage of the test.
#[derive(Clone, Copy)]
struct Stage {
    /// The cluster is on the `next` template (upgraded), with this many workers.
    upgraded: bool,
    node_count: u32,
    /// The nodegroup's (node_count, min_node_count, max_node_count).
    ng: (u32, u32, u32),
    /// The `next` template's attributes as the update patches them.
    next_updated: bool,
    /// The forbidden change: new labels on the template in use.
    forbidden: bool,
}

fn main_tf(next_image: &str, s: Stage) -> String {
    let template = if s.upgraded { "next" } else { "t" };
    let t_name = if s.upgraded {
        "tf-k8s-renamed"
    } else {
        "tf-k8s"
    };
    let next = if s.next_updated {
        // dns_nameserver emptied (a `remove`), floating_ip_enabled "true", a label added. (A
        // label of the template the cluster lacks would be a diff of the cluster's merged labels
        // after the upgrade, as with Magnum: the provider adds the "skipped" ones.)
        r#"  floating_ip_enabled = true
  master_lb_enabled   = false
  labels = {
    kube_tag         = "v1.31.2"
    boot_volume_size = "25"
  }"#
    } else {
        r#"  dns_nameserver      = "8.8.4.4"
  floating_ip_enabled = false
  master_lb_enabled   = true
  labels = {
    kube_tag = "v1.31.2"
  }"#
    };
    let next = if s.forbidden {
        next.replace(r#"boot_volume_size = "25""#, r#"boot_volume_size = "26""#)
    } else {
        next.to_string()
    };
    let (ng_count, ng_min, ng_max) = s.ng;
    let node_count = s.node_count;
    format!(
        r#"resource "openstack_containerinfra_clustertemplate_v1" "t" {{
  name                = "{t_name}"
  coe                 = "kubernetes"
  image               = "{IMAGE_UBUNTU_KUBE}"
  external_network_id = "{NETWORK_PUBLIC}"
  flavor              = "m1.small"
  master_flavor       = "m1.medium"
  keypair_id          = "{KEYPAIR_DEFAULT}"
  network_driver      = "calico"
  dns_nameserver      = "8.8.8.8"
  docker_volume_size  = 10
  floating_ip_enabled = true
  labels = {{
    kube_tag         = "v1.30.4"
    boot_volume_size = "20"
  }}
}}

resource "openstack_containerinfra_clustertemplate_v1" "next" {{
  name                = "tf-k8s-next"
  coe                 = "kubernetes"
  image               = "{next_image}"
  external_network_id = "{NETWORK_PUBLIC}"
  flavor              = "m1.small"
  master_flavor       = "m1.medium"
  keypair_id          = "{KEYPAIR_DEFAULT}"
  network_driver      = "calico"
  docker_volume_size  = 10
  http_proxy          = "http://proxy:3128"
  no_proxy            = "10.0.0.0/8"
{next}
}}

resource "openstack_containerinfra_cluster_v1" "c" {{
  name                = "tf-cluster"
  cluster_template_id = openstack_containerinfra_clustertemplate_v1.{template}.id
  keypair             = "{KEYPAIR_DEFAULT}"
  flavor              = "m1.small"
  master_flavor       = "m1.medium"
  master_count        = 1
  node_count          = {node_count}
  create_timeout      = 45
  docker_volume_size  = 12
  floating_ip_enabled = false
  master_lb_enabled   = true
  merge_labels        = true
  labels = {{
    foo              = "bar"
    boot_volume_size = "30"
  }}
}}

resource "openstack_containerinfra_nodegroup_v1" "ng" {{
  cluster_id     = openstack_containerinfra_cluster_v1.c.id
  name           = "tf-ng"
  flavor_id      = "m1.small"
  node_count     = {ng_count}
  min_node_count = {ng_min}
  max_node_count = {ng_max}
  merge_labels   = true
  labels = {{
    ng = "yes"
  }}
}}

data "openstack_containerinfra_clustertemplate_v1" "t" {{
  name = openstack_containerinfra_clustertemplate_v1.t.name
}}

data "openstack_containerinfra_cluster_v1" "c" {{
  name = openstack_containerinfra_cluster_v1.c.name
}}

data "openstack_containerinfra_nodegroup_v1" "ng" {{
  cluster_id = openstack_containerinfra_cluster_v1.c.id
  name       = openstack_containerinfra_nodegroup_v1.ng.name
}}
"#
    )
}

/// What the imports take in: exactly what was made through the API (with Magnum's defaults).
fn import_tf() -> String {
    format!(
        r#"resource "openstack_containerinfra_clustertemplate_v1" "imp" {{
  name                = "imp-k8s"
  coe                 = "kubernetes"
  image               = "{IMAGE_UBUNTU_KUBE}"
  external_network_id = "{NETWORK_PUBLIC}"
  flavor              = "m1.small"
  master_flavor       = "m1.medium"
  keypair_id          = "{KEYPAIR_DEFAULT}"
  network_driver      = "calico"
  floating_ip_enabled = true
  labels = {{
    kube_tag = "v1.30.4"
  }}
}}

resource "openstack_containerinfra_cluster_v1" "imp" {{
  name                = "imp-cluster"
  cluster_template_id = openstack_containerinfra_clustertemplate_v1.imp.id
  node_count          = 1
}}

resource "openstack_containerinfra_nodegroup_v1" "imp" {{
  cluster_id = openstack_containerinfra_cluster_v1.imp.id
  name       = "imp-ng"
  node_count = 1
}}
"#
    )
}

/// Requests to the service under test, with the Terraform user's Keystone token.
struct Api {
    http: reqwest::Client,
    base: String,
    token: String,
}

impl Api {
    async fn call(&self, method: &str, path: &str, mv: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(
                reqwest::Method::from_bytes(method.as_bytes()).unwrap(),
                format!("{}{path}", self.base),
            )
            .header("x-auth-token", &self.token)
            .header("openstack-api-version", format!("container-infra {mv}"));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let code = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (code, serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn get(&self, path: &str) -> (u16, Value) {
        self.call("GET", path, "latest", None).await
    }

    async fn wait(&self, path: &str, want: &[&str]) -> Value {
        status(path, want, || self.get(path)).await.1
    }
}

/// The template, cluster and nodegroup the imports take in, made through the API; their ids.
async fn made_through_the_api(api: &Api) -> (String, String, String) {
    let (code, t) = api
        .call(
            "POST",
            "/clustertemplates",
            "latest",
            Some(
                json!({"name": "imp-k8s", "coe": "kubernetes", "image_id": IMAGE_UBUNTU_KUBE,
                "external_network_id": NETWORK_PUBLIC, "flavor_id": "m1.small",
                "master_flavor_id": "m1.medium", "keypair_id": KEYPAIR_DEFAULT,
                "network_driver": "calico", "labels": {"kube_tag": "v1.30.4"}}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{t}");
    let t = t["uuid"].as_str().unwrap().to_string();
    let (code, c) = api
        .call(
            "POST",
            "/clusters",
            "latest",
            Some(json!({"name": "imp-cluster", "cluster_template_id": t, "node_count": 1})),
        )
        .await;
    assert_eq!(code, 202, "{c}");
    let c = c["uuid"].as_str().unwrap().to_string();
    api.wait(&format!("/clusters/{c}"), &["CREATE_COMPLETE"])
        .await;
    let (code, ng) = api
        .call(
            "POST",
            &format!("/clusters/{c}/nodegroups"),
            "latest",
            Some(json!({"name": "imp-ng", "node_count": 1})),
        )
        .await;
    assert_eq!(code, 202, "{ng}");
    let ng = ng["uuid"].as_str().unwrap().to_string();
    api.wait(
        &format!("/clusters/{c}/nodegroups/{ng}"),
        &["CREATE_COMPLETE"],
    )
    .await;
    (t, c, ng)
}

fn s<'a>(v: &'a Value, k: &str) -> &'a str {
    v[k].as_str().unwrap_or_else(|| panic!("{k} in {v}"))
}

/// Where the flow runs: the service the catalog names in `login.region`, and the workload API
/// behind a cluster's kubeconfig.
struct Target<'a> {
    login: Login,
    api: Api,
    /// The Glance image of the upgrade's template (Kubernetes v1.31.2).
    next_image: String,
    workload: Workload<'a>,
}

/// The management cluster behind the service.
enum Workload<'a> {
    /// The simulated one: it answers whether a workload API accepts a client certificate.
    Simulated(&'a crate::common::capi::CapiApp),
    /// The real stack: the workload API at the cluster's address (the node agent's) is asked.
    Real,
}

impl Workload<'_> {
    /// Whether cluster `id`'s workload API (at `kubeconfig.host`) accepts `kubeconfig`'s client
    /// certificate, trusting its CA.
    async fn accepts(&self, project_id: &str, id: &str, kubeconfig: &Value) -> bool {
        match self {
            Workload::Simulated(app) => {
                let ns = magnum_capi::capi::namespace("magnum", project_id);
                let capi_name = magnum_capi::capi::capi_name(uuid::Uuid::parse_str(id).unwrap());
                app.sim.simulator().unwrap().workload_accepts(
                    &ns,
                    &capi_name,
                    s(kubeconfig, "client_certificate"),
                )
            }
            Workload::Real => {
                let client = crate::common::realstack::workload_https_client(
                    s(kubeconfig, "cluster_ca_certificate"),
                    s(kubeconfig, "client_certificate"),
                    s(kubeconfig, "client_key"),
                );
                client
                    .get(format!("{}/api/v1/nodes", s(kubeconfig, "host")))
                    .send()
                    .await
                    .is_ok_and(|r| r.status().is_success())
            }
        }
    }
}

/// The flow on the simulated management cluster: alice in alpha, the catalog's RegionOne
/// endpoint.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terraform_applies_imports_and_destroys_containerinfra_resources() {
    let _env = env_exclusive().await;
    let app = capi_app_on(None, None, true, |_| {}).await;
    let server = serve_as_endpoint(&app.t.state).await;
    let ks = keystone();
    let target = Target {
        login: Login {
            user: "alice".into(),
            project: "alpha".into(),
            region: REGION.into(),
        },
        api: Api {
            http: crate::common::http(),
            base: ks.endpoint_url().expect("the service in the catalog"),
            token: ks.token("alice", "alpha").await,
        },
        next_image: next_image(),
        workload: Workload::Simulated(&app),
    };
    flow(&target).await;
    server.abort();
}

/// The flow on the real stack (real kube-apiserver, CAPI, KCP, CAPO, CAAPH): `magnum-capi serve`
/// as production runs it under the chart's identity, named in the catalog as region
/// `RegionReal` (beside RegionOne's, so no other test's client is sent there), a project of
/// its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terraform_on_the_realstack_applies_imports_and_destroys_containerinfra_resources() {
    let s = crate::common::realstack::stack().await;
    let (ks, _) = crate::common::stack::parts().await;
    // Clients that name no region must not meet the second endpoint: held shared, they wait.
    let _env = crate::common::stack::env_shared().await;
    let kubeconfig = crate::common::realstack::chart_identity(s).await;
    let served = crate::common::realstack::Production::start(
        0,
        &kubeconfig,
        crate::realstack::LOOPBACK_CHARTS,
        "",
    )
    .await;
    let _endpoint = ks
        .endpoint_in_region("RegionReal", &served.url("/v1"))
        .await;
    let member = ks.new_project("terraform").await;
    let target = Target {
        login: Login {
            user: member.user_name.clone(),
            project: member.project_name.clone(),
            region: "RegionReal".into(),
        },
        api: Api {
            http: crate::common::http(),
            base: served.url("/v1"),
            token: member.token.clone(),
        },
        next_image: next_image(),
        workload: Workload::Real,
    };
    flow(&target).await;
}

/// The upgrade's image: Kubernetes v1.31.2 in the fake Glance.
fn next_image() -> String {
    cloud().add_image(json!({"name": "ubuntu-2204-kube-v1.31.2-tf",
        "os_distro": "ubuntu", "os_version": "22.04", "kube_version": "v1.31.2"}))
}

/// Apply → plan → update, imports → plan → nodegroup resize → a forbidden change → destroy, on
/// `target`.
async fn flow(target: &Target<'_>) {
    let build = built().await;
    let tf_bin = terraform();
    let t0 = Instant::now();
    let api = &target.api;
    let next_image = &target.next_image;

    // The provider from the mirror, and nothing else: no `direct` installation method.
    let (home, _owner) = private_dir("magnum-capi-terraform-").unwrap();
    let mirror = build.join("terraform-mirror");
    let versions = mirror.join("registry.terraform.io/terraform-provider-openstack/openstack");
    let version = std::fs::read_dir(&versions)
        .unwrap()
        .next()
        .expect("the provider in the mirror")
        .unwrap()
        .file_name()
        .into_string()
        .unwrap();
    let cli_config = home.join("terraformrc");
    std::fs::write(
        &cli_config,
        format!(
            "disable_checkpoint = true\n\nprovider_installation {{\n  filesystem_mirror {{\n    \
             path    = \"{}\"\n    include = [\"registry.terraform.io/terraform-provider-openstack/openstack\"]\n  }}\n}}\n",
            mirror.display()
        ),
    )
    .unwrap();
    let tf = Tf {
        bin: tf_bin,
        home: home.clone(),
        cli_config,
    };
    let version_out = tf.ok(&home, &["version"]).await;
    eprintln!(
        "{} with terraform-provider-openstack {version}",
        version_out.lines().next().unwrap_or_default()
    );
    let main = home.join("main");
    let imported = home.join("imported");
    for (dir, body) in [
        (&main, main_tf(next_image, STAGE_CREATE)),
        (&imported, import_tf()),
    ] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(
            dir.join("provider.tf"),
            provider_tf(&version, &target.login),
        )
        .unwrap();
        std::fs::write(dir.join("main.tf"), body).unwrap();
    }
    eprintln!("setup done in {:.1?}", t0.elapsed());

    // Apply, while the objects to import are made through the API.
    let ((), (imp_t, imp_c, imp_ng)) = tokio::join!(
        async {
            let init = tf.ok(&main, &["init", "-no-color"]).await;
            assert!(
                init.contains(&format!(
                    "Installing terraform-provider-openstack/openstack v{version}"
                )),
                "{init}"
            );
            tf.ok(&main, &["apply", "-auto-approve", "-no-color"]).await;
        },
        made_through_the_api(api)
    );
    eprintln!("first apply done in {:.1?}", t0.elapsed());
    let st = tf.state(&main).await;
    let cluster = &st["openstack_containerinfra_cluster_v1.c"];
    let id = s(cluster, "id").to_string();
    let (code, c) = api.get(&format!("/clusters/{id}")).await;
    assert_eq!(code, 200);
    // Created (the provider waited for CREATE_COMPLETE), then updated by the nodegroup's create,
    // as in Magnum.
    assert_eq!(c["status"], "UPDATE_COMPLETE");
    assert_eq!(cluster["node_count"], 1);
    assert_eq!(cluster["master_count"], 1);
    assert_eq!(cluster["create_timeout"], 45);
    assert_eq!(cluster["docker_volume_size"], 12);
    assert_eq!(cluster["floating_ip_enabled"], false);
    assert_eq!(cluster["master_lb_enabled"], true);
    assert_eq!(cluster["coe_version"], "v1.30.4");
    assert_eq!(
        cluster["labels"],
        json!({"foo": "bar", "boot_volume_size": "30"})
    );
    assert_eq!(
        c["labels"],
        json!({"foo": "bar", "boot_volume_size": "30", "kube_tag": "v1.30.4"})
    );
    assert_eq!(cluster["node_addresses"].as_array().unwrap().len(), 1);
    assert_eq!(cluster["master_addresses"].as_array().unwrap().len(), 1);
    assert!(s(cluster, "created_at").ends_with('Z'), "{cluster}");
    // The kubeconfig: host = api_address, a client certificate of the cluster's CA that the
    // workload API accepts.
    let kc = &cluster["kubeconfig"];
    let api_address = s(cluster, "api_address");
    // On loopback: the simulator's 127.0.0.1, the real stack's floating IPs in 127.100.0.0/16.
    assert!(api_address.starts_with("https://127."), "{api_address}");
    assert_eq!(s(kc, "host"), api_address);
    assert!(pki::verifies(
        s(kc, "client_certificate"),
        s(kc, "cluster_ca_certificate")
    ));
    assert!(s(kc, "raw_config").contains(&format!("server: {api_address}")));
    assert!(
        target.workload.accepts(s(&c, "project_id"), &id, kc).await,
        "the workload API refuses the kubeconfig's certificate"
    );
    let ng = &st["openstack_containerinfra_nodegroup_v1.ng"];
    let ng_uuid = s(ng, "id").split_once('/').unwrap().1.to_string();
    assert_eq!(s(ng, "id"), format!("{id}/{ng_uuid}"));
    assert_eq!(
        (
            &ng["node_count"],
            &ng["min_node_count"],
            &ng["max_node_count"]
        ),
        (&json!(1), &json!(1), &json!(3))
    );
    assert_eq!(ng["role"], "worker");
    assert_eq!(ng["labels"], json!({"ng": "yes"}));
    // The data sources read what was made.
    let d = &st["data.openstack_containerinfra_cluster_v1.c"];
    assert_eq!(s(d, "id"), id);
    assert_eq!(d["labels"], c["labels"]);
    assert_eq!(d["api_address"], api_address);
    let d = &st["data.openstack_containerinfra_clustertemplate_v1.t"];
    assert_eq!(
        d["id"],
        st["openstack_containerinfra_clustertemplate_v1.t"]["id"]
    );
    assert_eq!(d["cluster_distro"], "ubuntu");
    let d = &st["data.openstack_containerinfra_nodegroup_v1.ng"];
    assert_eq!(d["node_count"], 1);
    assert_eq!(d["max_node_count"], 3);
    tf.no_changes(&main).await;

    // The update (the cluster upgraded and resized, templates patched) while the API-made
    // objects are imported beside it.
    let stage = Stage {
        upgraded: true,
        node_count: 2,
        next_updated: true,
        ..STAGE_CREATE
    };
    std::fs::write(main.join("main.tf"), main_tf(next_image, stage)).unwrap();
    tokio::join!(
        tf.ok(&main, &["apply", "-auto-approve", "-no-color"]),
        async {
            tf.ok(&imported, &["init", "-no-color"]).await;
            for (addr, id) in [
                (
                    "openstack_containerinfra_clustertemplate_v1.imp",
                    imp_t.clone(),
                ),
                ("openstack_containerinfra_cluster_v1.imp", imp_c.clone()),
                (
                    "openstack_containerinfra_nodegroup_v1.imp",
                    format!("{imp_c}/{imp_ng}"),
                ),
            ] {
                tf.ok(&imported, &["import", "-no-color", addr, &id]).await;
            }
            tf.no_changes(&imported).await;
        }
    );
    eprintln!("update and imports done in {:.1?}", t0.elapsed());
    let st = tf.state(&main).await;
    let next = &st["openstack_containerinfra_clustertemplate_v1.next"];
    let (_, c) = api.get(&format!("/clusters/{id}")).await;
    assert_eq!(c["status"], "UPDATE_COMPLETE");
    assert_eq!(c["cluster_template_id"], next["id"]);
    assert_eq!(c["coe_version"], "v1.31.2");
    // The cluster's count is its workers' (default-worker's 2 and tf-ng's 1), as in Magnum;
    // Terraform's is default-worker's.
    assert_eq!(c["node_count"], 3);
    assert_eq!(c["node_addresses"].as_array().unwrap().len(), 3);
    let (_, w) = api
        .get(&format!("/clusters/{id}/nodegroups/default-worker"))
        .await;
    assert_eq!(w["node_count"], 2);
    assert_eq!(st["openstack_containerinfra_cluster_v1.c"]["node_count"], 2);
    let (_, t) = api
        .get(&format!("/clustertemplates/{}", s(next, "id")))
        .await;
    assert_eq!(t["floating_ip_enabled"], true);
    assert_eq!(t["master_lb_enabled"], false);
    assert_eq!(t["dns_nameserver"], Value::Null);
    assert_eq!(
        t["labels"],
        json!({"kube_tag": "v1.31.2", "boot_volume_size": "25"})
    );
    assert_eq!(
        c["labels"],
        json!({"foo": "bar", "boot_volume_size": "30", "kube_tag": "v1.31.2"})
    );
    assert_eq!(
        st["openstack_containerinfra_clustertemplate_v1.t"]["name"],
        "tf-k8s-renamed"
    );
    tf.no_changes(&main).await;

    // The nodegroup's counts: min/max by PATCH, node_count by a resize of the nodegroup.
    let stage = Stage {
        ng: (2, 0, 5),
        ..stage
    };
    std::fs::write(main.join("main.tf"), main_tf(next_image, stage)).unwrap();
    tf.ok(&main, &["apply", "-auto-approve", "-no-color"]).await;
    let (_, n) = api
        .get(&format!("/clusters/{id}/nodegroups/{ng_uuid}"))
        .await;
    assert_eq!(n["status"], "UPDATE_COMPLETE");
    assert_eq!(
        (&n["node_count"], &n["min_node_count"], &n["max_node_count"]),
        (&json!(2), &json!(0), &json!(5))
    );
    assert_eq!(n["node_addresses"].as_array().unwrap().len(), 2);
    tf.no_changes(&main).await;

    // What Magnum forbids fails with its text: new labels on the template in use.
    std::fs::write(
        main.join("main.tf"),
        main_tf(
            next_image,
            Stage {
                forbidden: true,
                ..stage
            },
        ),
    )
    .unwrap();
    let args = ["apply", "-auto-approve", "-no-color"];
    let out = tf.run(&main, &args).await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{}", report(&main, &args, &out));
    assert!(
        stderr.contains("Error updating openstack_containerinfra_clustertemplate_v1")
            && stderr.contains("is referenced by one or multiple clusters"),
        "{stderr}"
    );
    std::fs::write(main.join("main.tf"), main_tf(next_image, stage)).unwrap();
    tf.no_changes(&main).await;
    eprintln!("updates done in {:.1?}", t0.elapsed());

    // Destroy both, waiting for the deletes.
    tokio::join!(
        tf.ok(&main, &["destroy", "-auto-approve", "-no-color"]),
        tf.ok(&imported, &["destroy", "-auto-approve", "-no-color"]),
    );
    for path in ["/clusters", "/clustertemplates"] {
        let (code, v) = api.get(path).await;
        assert_eq!(code, 200);
        let key = path.trim_start_matches('/');
        assert_eq!(v[key], json!([]), "{path} after destroy");
    }
    eprintln!("all done in {:.1?}", t0.elapsed());
}

const STAGE_CREATE: Stage = Stage {
    upgraded: false,
    node_count: 1,
    ng: (1, 1, 3),
    next_updated: false,
    forbidden: false,
};
