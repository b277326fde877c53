//! Horizon's Container Infra panels in a real browser: the OpenStack dashboard (Horizon 27.0.0
//! with magnum-ui 19.0.0 from PyPI, `.ci/horizon-venv.sh`) under Django's `runserver`, logged in
//! through the real Keystone, against the service (CAPI driver on the simulated management
//! cluster) named in Keystone's catalog, with the fake Glance/Nova/Neutron beside it. Debian's
//! Chromium and chromedriver, headless, run one Selenium script (`tests/it/horizon/flow.py`):
//! the template wizard, the cluster dialog with its defaults to `CREATE_COMPLETE`, the detail
//! page, the resize dialog, the deletes. Horizon's settings are `tests/it/horizon/local`.
//! A failing step leaves a screenshot and the page's source in `horizon-artifacts/` beside the
//! build (`$CARGO_TARGET_DIR` or `target/`), with Horizon's log.

use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};

use serde_json::json;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

use crate::common::capi::{assert_private_api_load_balancer, capi_app_on};
use crate::common::keystone::password;
use crate::common::served::free_port;
use crate::common::stack::{env_exclusive, parts, serve_as_endpoint};
use crate::common::{artifact_dir, cached_venv, http, wait};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
/// The whole browser flow; its steps take seconds, the create and delete a few more.
const FLOW_TIMEOUT: Duration = Duration::from_secs(600);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn horizons_panels_create_resize_and_delete_a_cluster_in_a_browser() {
    let t0 = Instant::now();
    for exe in [CHROMIUM, CHROMEDRIVER] {
        assert!(
            Path::new(exe).exists(),
            "{exe} is missing: apt-get install chromium chromium-driver (.ci/run does)"
        );
    }
    let _env = env_exclusive().await;
    let artifacts = artifact_dir("horizon-artifacts");
    std::fs::create_dir_all(&artifacts).expect("artefact directory");
    // Horizon starts (imports, ~10 s) as soon as Keystone's address is known, while the
    // service's database and management cluster come up.
    let horizon = async {
        let venv = tokio::task::spawn_blocking(|| cached_venv(".ci/horizon-venv.sh"));
        let (ks, _) = parts().await;
        let venv = venv.await.expect("the Horizon virtualenv");
        eprintln!("[{:5.1}s] Keystone up", t0.elapsed().as_secs_f64());
        (Horizon::start(&venv, &ks.url, &artifacts), venv, ks)
    };
    let ((horizon, venv, ks), app) = tokio::join!(horizon, capi_app_on(None, None, true, |_| {}));
    let server = serve_as_endpoint(&app.t.state).await;
    // A project of its own, with one member: Horizon logs into that project.
    let member = ks.new_project("horizon").await;
    eprintln!("[{:5.1}s] service ready", t0.elapsed().as_secs_f64());
    horizon.ready().await;
    eprintln!("[{:5.1}s] Horizon ready", t0.elapsed().as_secs_f64());

    let mut flow = Command::new(venv.join("bin/python"));
    flow.arg(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/it/horizon/flow.py"
    ))
    .env("HORIZON_URL", &horizon.url)
    .env("HORIZON_USER", &member.user_name)
    .env("HORIZON_PASSWORD", password(&member.user_name))
    .env("CHROMIUM", CHROMIUM)
    .env("CHROMEDRIVER", CHROMEDRIVER)
    .env("ARTIFACTS", &artifacts)
    .env("PYTHONUNBUFFERED", "1")
    .env_remove("PYTHONPATH")
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(Stdio::inherit())
    .kill_on_drop(true);
    let mut child = flow.spawn().expect("running tests/it/horizon/flow.py");
    let mut stdin = child.stdin.take().expect("the flow's stdin");
    let mut lines = BufReader::new(child.stdout.take().expect("the flow's stdout")).lines();
    let mut output = String::new();
    let mut checked = false;
    let run = async {
        while let Some(line) = lines.next_line().await.expect("reading the flow's output") {
            eprintln!("flow: {line}");
            output.push_str(&line);
            output.push('\n');
            // The flow stops once the dialog's cluster is CREATE_COMPLETE, for what only the API
            // and the management cluster show, then goes on.
            if let Some(uuid) = line.strip_prefix("CREATED ") {
                the_dialogs_defaults_gave_a_private_api_load_balancer(&app, &member.token, uuid)
                    .await;
                checked = true;
                stdin.write_all(b"go\n").await.expect("resuming the flow");
            }
        }
        child.wait().await.expect("the flow's exit status")
    };
    let status = tokio::time::timeout(FLOW_TIMEOUT, run)
        .await
        .unwrap_or_else(|_| panic!("flow.py did not finish within {FLOW_TIMEOUT:?}"));
    server.abort();
    eprintln!(
        "[{:5.1}s] flow done; Horizon's log: {}",
        t0.elapsed().as_secs_f64(),
        horizon.log.display()
    );
    assert!(
        status.success(),
        "flow.py failed ({status}); artefacts in {}:\n{output}",
        artifacts.display()
    );
    assert!(
        checked,
        "flow.py never reported the cluster it created:\n{output}"
    );
}

/// The cluster magnum-ui's dialog made with its defaults (API load balancer unticked, so no
/// floating IP for the API): `master_lb_enabled` false as sent, and the API load balancer
/// rendered, private (issue 44).
async fn the_dialogs_defaults_gave_a_private_api_load_balancer(
    app: &crate::common::capi::CapiApp,
    token: &str,
    uuid: &str,
) {
    let r = app
        .t
        .call_token(
            Some(token),
            "GET",
            &format!("/v1/clusters/{uuid}"),
            None,
            None,
        )
        .await;
    r.assert_status(200);
    assert_eq!(r.body["status"], "CREATE_COMPLETE", "{}", r.body);
    assert_eq!(r.body["master_lb_enabled"], json!(false), "{}", r.body);
    // magnum-ui sends its booleans as Python prints them.
    assert_eq!(
        r.body["labels"]["master_lb_floating_ip_enabled"],
        json!("False"),
        "{}",
        r.body
    );
    assert_private_api_load_balancer(app, uuid);
}

/// Horizon under `django-admin runserver` on a loopback port, killed when dropped.
struct Horizon {
    url: String,
    log: std::path::PathBuf,
    _child: Child,
    _sessions: tempfile::TempDir,
}

impl Horizon {
    fn start(venv: &Path, keystone_url: &str, artifacts: &Path) -> Horizon {
        let port = free_port();
        let sessions = tempfile::tempdir().expect("session directory");
        let log = artifacts.join("horizon.log");
        let out = std::fs::File::create(&log).expect("Horizon's log");
        let err = out.try_clone().expect("Horizon's log");
        let child = Command::new(venv.join("bin/django-admin"))
            // --insecure: runserver serves the static files (the compressed bundles) itself.
            .args(["runserver", "--noreload", "--insecure", "--skip-checks"])
            .arg(format!("127.0.0.1:{port}"))
            .env(
                "PYTHONPATH",
                concat!(env!("CARGO_MANIFEST_DIR"), "/tests/it/horizon"),
            )
            .env("PYTHONDONTWRITEBYTECODE", "1")
            .env("PYTHONWARNINGS", "ignore")
            .env("DJANGO_SETTINGS_MODULE", "openstack_dashboard.settings")
            .env("HORIZON_KEYSTONE_URL", keystone_url)
            .env("HORIZON_SESSION_DIR", sessions.path())
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .expect("starting Horizon");
        Horizon {
            url: format!("http://127.0.0.1:{port}"),
            log,
            _child: child,
            _sessions: sessions,
        }
    }

    async fn ready(&self) {
        let login = format!("{}/auth/login/", self.url);
        wait::until(&format!("Horizon at {login}"), || async {
            let r = http().get(&login).send().await.ok()?;
            r.status().is_success().then_some(())
        })
        .await;
    }
}
