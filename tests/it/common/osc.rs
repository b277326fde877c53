//! `openstack …` (python-openstackclient with the python-magnumclient plugin) from the Keystone
//! virtualenv, run as a seeded user against whatever `container-infra` endpoint the catalog has.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;
use tokio::process::Command;

use super::keystone::{Keystone, REGION, password};

/// How long one `openstack` invocation may take before the test gives up on it.
const CLI_TIMEOUT: Duration = Duration::from_secs(180);

/// Runs `openstack` from the Keystone virtualenv as a user of a project.
pub struct Osc {
    bin: PathBuf,
    auth_url: String,
}

/// What one invocation did.
pub struct Out {
    pub what: String,
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

impl Osc {
    pub fn new(ks: &Keystone) -> Osc {
        Osc {
            bin: ks.venv.join("bin/openstack"),
            auth_url: ks.url.clone(),
        }
    }

    pub async fn run(&self, user: &str, project: &str, args: &[&str]) -> Out {
        let what = format!("openstack {} (as {user} on {project})", args.join(" "));
        let mut cmd = Command::new(&self.bin);
        cmd.args(args);
        scrub(&mut cmd);
        cmd.env("OS_AUTH_URL", &self.auth_url)
            .env("OS_USERNAME", user)
            .env("OS_PASSWORD", password(user))
            .env("OS_PROJECT_NAME", project)
            .env("OS_USER_DOMAIN_NAME", "Default")
            .env("OS_PROJECT_DOMAIN_NAME", "Default")
            .env("OS_REGION_NAME", REGION)
            .env("OS_IDENTITY_API_VERSION", "3")
            .env("OS_INTERFACE", "public")
            // Tables as wide as they need to be, whatever the terminal.
            .env("CLIFF_MAX_TERM_WIDTH", "0")
            // `coe cluster config` reads `os.environ["SHELL"]` to print its export line; CI
            // runs without a login shell, so it is set explicitly.
            .env("SHELL", "/bin/bash")
            .stdin(std::process::Stdio::null())
            .kill_on_drop(true);
        let t0 = Instant::now();
        let out = tokio::time::timeout(CLI_TIMEOUT, cmd.output())
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer within {CLI_TIMEOUT:?}"))
            .unwrap_or_else(|e| panic!("{what}: cannot run {}: {e}", self.bin.display()));
        eprintln!(
            "[{:5.1}s] {what} -> {:?}",
            t0.elapsed().as_secs_f64(),
            out.status.code()
        );
        Out {
            what,
            code: out.status.code(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }

    /// Runs a command that must succeed.
    pub async fn ok(&self, user: &str, project: &str, args: &[&str]) -> Out {
        let out = self.run(user, project, args).await;
        if out.code != Some(0) {
            panic!("{} failed: {}", out.what, out.dump());
        }
        out
    }

    /// Runs a command that must fail (non-zero exit).
    pub async fn fails(&self, user: &str, project: &str, args: &[&str]) -> Out {
        let out = self.run(user, project, args).await;
        if out.code == Some(0) || out.code.is_none() {
            panic!("{} should have failed: {}", out.what, out.dump());
        }
        out
    }
}

/// Removes the caller's cloud (`OS_*`) and Python setup from a Python client's environment.
fn scrub(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let b = k.as_encoded_bytes();
        if b.starts_with(b"OS_") || b.starts_with(b"PYTHON") || b == b"VIRTUAL_ENV" {
            cmd.env_remove(k);
        }
    }
}

/// Runs `script` with the Keystone virtualenv's python and `env` (nothing of the caller's cloud);
/// it must succeed within five minutes and print one JSON document, which is returned.
pub async fn python_json(ks: &Keystone, script: &str, env: &[(&str, &str)]) -> Value {
    let mut cmd = Command::new(ks.venv.join("bin/python"));
    cmd.arg(script);
    scrub(&mut cmd);
    cmd.envs(env.iter().copied())
        .stdin(std::process::Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(300), cmd.output())
        .await
        .unwrap_or_else(|_| panic!("{script} did not finish within 300 s"))
        .unwrap_or_else(|e| panic!("cannot run the virtualenv's python: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} failed: {:?}\n--- stdout ---\n{stdout}\n--- stderr ---\n{stderr}",
        out.status.code()
    );
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("{script} printed no JSON ({e}): {stdout}\n{stderr}"))
}

impl Out {
    pub fn dump(&self) -> String {
        format!(
            "exit {:?}\n--- stdout ---\n{}\n--- stderr ---\n{}",
            self.code, self.stdout, self.stderr
        )
    }

    /// The JSON document of `-f json` output (some commands print a message line first).
    #[track_caller]
    pub fn json(&self) -> Value {
        let start = self
            .stdout
            .find(['{', '['])
            .unwrap_or_else(|| panic!("{}: no JSON in the output: {}", self.what, self.dump()));
        serde_json::from_str(&self.stdout[start..])
            .unwrap_or_else(|e| panic!("{}: bad JSON ({e}): {}", self.what, self.dump()))
    }

    /// The rows of a printed table (`| a | b |` lines), header row included.
    pub fn table(&self) -> Vec<Vec<String>> {
        self.stdout
            .lines()
            .map(str::trim)
            .filter(|l| l.starts_with('|'))
            .map(|l| {
                l.trim_matches('|')
                    .split('|')
                    .map(|c| c.trim().to_string())
                    .collect()
            })
            .collect()
    }

    /// A `Property | Value` table as a JSON object of strings.
    #[track_caller]
    pub fn properties(&self) -> Value {
        let rows = self.table();
        assert_eq!(
            rows.first().map(|r| r.join("|")).as_deref(),
            Some("Property|Value"),
            "{}: not a property table: {}",
            self.what,
            self.dump()
        );
        Value::Object(
            rows[1..]
                .iter()
                .map(|r| (r[0].clone(), Value::String(r[1].clone())))
                .collect(),
        )
    }

    /// The uuid in the `Request to create <what> <uuid> accepted` line a create prints.
    #[track_caller]
    pub fn accepted_uuid(&self, what: &str) -> String {
        let id = self
            .stdout
            .trim()
            .strip_prefix(&format!("Request to create {what} "))
            .and_then(|s| s.strip_suffix(" accepted"))
            .unwrap_or_else(|| panic!("unexpected output: {}", self.dump()));
        uuid::Uuid::parse_str(id)
            .unwrap_or_else(|e| panic!("{}: not a uuid ({e}): {}", self.what, self.dump()));
        id.to_string()
    }

    #[track_caller]
    pub fn stderr_has(&self, needle: &str) -> &Self {
        assert!(
            self.stderr.contains(needle),
            "{}: stderr lacks {needle:?}: {}",
            self.what,
            self.dump()
        );
        self
    }
}
