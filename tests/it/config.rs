//! Configuration: defaults, the documented example, environment overrides, unknown keys.

use magnum_capi::config::Config;

#[test]
fn the_documented_example_parses_to_the_defaults_it_claims() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/etc/magnum-capi.toml.example");
    let cfg = Config::load(Some(std::path::Path::new(path))).expect("example parses");
    assert_eq!(cfg.http.bind.to_string(), "127.0.0.1:9511");
    assert_eq!(cfg.api.max_limit, 1000);
    assert_eq!(cfg.quotas.max_clusters_per_project, 20);
    assert_eq!(cfg.service.service_down_time_secs, 180);
}

#[test]
fn unknown_keys_are_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[http]\nbind = \"127.0.0.1:1\"\nbogus = 1\n").unwrap();
    let err = Config::load(Some(&path)).unwrap_err().to_string();
    assert!(err.contains("bogus"), "{err}");
    std::fs::write(&path, "[nosuchsection]\nx = 1\n").unwrap();
    assert!(Config::load(Some(&path)).is_err());
}

/// Where `environment_overrides_the_file` tells its child process the file is.
const CHILD_FILE: &str = "MAGNUM_CAPI_TEST_CONFIG_FILE";

#[test]
fn environment_overrides_the_file() {
    // The variables are given to a child process running the check below: setting them in this
    // process would race with every other test reading the environment or spawning a process.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[http]\nbind = \"127.0.0.1:1111\"\n[api]\nmax_limit = 5\n",
    )
    .unwrap();
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "config::file_and_environment_as_given_by_the_parent",
            "--ignored",
        ])
        .env(CHILD_FILE, &path)
        .env("MAGNUM_CAPI__HTTP__BIND", "127.0.0.1:2222")
        .env("MAGNUM_CAPI__DATABASE__URL", "postgres://u@h/db")
        .env("MAGNUM_CAPI__QUOTAS__MAX_CLUSTERS_PER_PROJECT", "7")
        // As the Helm chart sets them.
        .env(
            "MAGNUM_CAPI__HTTP__TLS_CERT_FILE",
            "/etc/magnum-capi/tls/tls.crt",
        )
        .env(
            "MAGNUM_CAPI__HTTP__TLS_KEY_FILE",
            "/etc/magnum-capi/tls/tls.key",
        )
        .env("MAGNUM_CAPI__HTTP__TRUSTED_PROXIES", "10.0.0.0/8,192.0.2.7")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Child half of `environment_overrides_the_file`: loads the file it names with the environment
/// it gave this process.
#[test]
#[ignore = "run by environment_overrides_the_file in a process with its own environment"]
fn file_and_environment_as_given_by_the_parent() {
    let path = std::env::var_os(CHILD_FILE).expect("run by environment_overrides_the_file");
    let cfg = Config::load(Some(std::path::Path::new(&path))).expect("loads");
    assert_eq!(cfg.http.bind.to_string(), "127.0.0.1:2222");
    assert_eq!(cfg.database.url.as_deref(), Some("postgres://u@h/db"));
    assert_eq!(cfg.quotas.max_clusters_per_project, 7);
    assert_eq!(cfg.api.max_limit, 5);
    let (cert, key) = cfg.http.tls().expect("TLS files");
    assert_eq!(cert, std::path::Path::new("/etc/magnum-capi/tls/tls.crt"));
    assert_eq!(key, std::path::Path::new("/etc/magnum-capi/tls/tls.key"));
    for (peer, trusted) in [
        ("10.1.2.3", true),
        ("192.0.2.7", true),
        ("192.0.2.8", false),
    ] {
        assert_eq!(cfg.http.trusts(peer.parse().unwrap()), trusted, "{peer}");
    }
}

#[test]
fn tls_files_go_together_and_trusted_proxies_are_addresses_or_cidrs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[http]\ntls_cert_file = \"/etc/tls.crt\"\n").unwrap();
    let e = Config::load(Some(&path)).unwrap_err().to_string();
    assert!(
        e.contains("tls_cert_file and tls_key_file go together"),
        "{e}"
    );
    std::fs::write(
        &path,
        "[http]\ntrusted_proxies = [\"10.0.0.0/8\", \"proxy.example.com\"]\n",
    )
    .unwrap();
    let e = Config::load(Some(&path)).unwrap_err().to_string();
    assert!(
        e.contains("\"proxy.example.com\" is neither an IP address nor a CIDR"),
        "{e}"
    );
    std::fs::write(&path, "[http]\ntrusted_proxies = [\"::1\", \"fd00::/8\"]\n").unwrap();
    let cfg = Config::load(Some(&path)).unwrap();
    assert!(cfg.http.trusts("::1".parse().unwrap()));
    assert!(cfg.http.trusts("fd00::5".parse().unwrap()));
    assert!(!cfg.http.trusts("127.0.0.1".parse().unwrap()));
}

#[test]
fn invalid_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, "[api]\nmax_limit = 0\n").unwrap();
    assert!(Config::load(Some(&path)).is_err());
    std::fs::write(&path, "[driver]\nkind = \"heat\"\n").unwrap();
    assert!(Config::load(Some(&path)).is_err());
}

#[test]
fn keystone_is_required_outside_dev_mode() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    // Nothing configured: only `serve --dev` may run without Keystone.
    std::fs::write(&path, "").unwrap();
    let cfg = Config::load(Some(&path)).unwrap();
    assert!(!cfg.keystone.active());
    assert!(cfg.validate_for_serve(true).is_ok());
    let err = cfg.validate_for_serve(false).unwrap_err().to_string();
    assert!(err.contains("auth_url"), "{err}");
    // Explicitly disabled: refused without --dev.
    std::fs::write(&path, "[keystone]\nenabled = false\n").unwrap();
    let cfg = Config::load(Some(&path)).unwrap();
    assert!(cfg.validate_for_serve(true).is_ok());
    let err = cfg.validate_for_serve(false).unwrap_err().to_string();
    assert!(err.contains("only accepted with `serve --dev`"), "{err}");
    // Configured: credentials are required, and secrets never show in Debug output.
    std::fs::write(
        &path,
        "[keystone]\nauth_url = \"http://k/v3\"\nusername = \"magnum\"\n",
    )
    .unwrap();
    let cfg = Config::load(Some(&path)).unwrap();
    assert!(cfg.keystone.active());
    assert!(cfg.validate_for_serve(true).is_err());
    std::fs::write(
        &path,
        "[keystone]\nauth_url = \"http://k/v3\"\nusername = \"magnum\"\npassword = \"S3cret-pw\"\nproject_name = \"service\"\n\
         [operations]\nseal_key = \"AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\"\n",
    )
    .unwrap();
    let cfg = Config::load(Some(&path)).unwrap();
    assert!(cfg.validate_for_serve(false).is_ok());
    assert!(!format!("{cfg:?}").contains("S3cret-pw"));
    std::fs::write(
        &path,
        "[keystone]\nauth_url = \"http://k/v3\"\napplication_credential_id = \"id\"\n",
    )
    .unwrap();
    let err = Config::load(Some(&path))
        .unwrap()
        .validate_for_serve(false)
        .unwrap_err()
        .to_string();
    assert!(err.contains("application_credential_secret"), "{err}");
}

#[test]
fn management_clusters_need_distinct_valid_names_and_a_weight() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let entry = |name: &str, extra: &str| {
        format!("[[capi.management_clusters]]\nname = {name:?}\n{extra}\n")
    };
    std::fs::write(
        &path,
        entry("east", "weight = 3\navailability_zones = [\"az-1\"]")
            + &entry("west", "enabled = false"),
    )
    .unwrap();
    let cfg = Config::load(Some(&path)).expect("valid");
    let m = &cfg.capi.management_clusters;
    assert_eq!(
        (m[0].weight, m[0].enabled, m[1].weight, m[1].enabled),
        (3, true, 1, false)
    );
    assert_eq!(m[0].availability_zones, ["az-1"]);
    for (bad, why) in [
        (entry("east", "") + &entry("east", ""), "twice"),
        (entry("East", ""), "lowercase"),
        (entry("east", "weight = 0"), "weight"),
        (entry("east", "bogus = 1"), "bogus"),
    ] {
        std::fs::write(&path, bad).unwrap();
        let err = Config::load(Some(&path)).unwrap_err().to_string();
        assert!(err.contains(why), "{why}: {err}");
    }
}

/// Outside `serve --dev` every replica must share a sealing key: none configured is refused; a
/// key file holds the current key first and previous ones after it; both ways at once, a key
/// that is not 32 bytes of base64, or a missing file are refused naming the setting.
#[test]
fn seal_keys_are_required_outside_dev_mode_and_read_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    let keystone = "[keystone]\nauth_url = \"http://k/v3\"\nusername = \"magnum\"\n\
                    password = \"pw\"\nproject_name = \"service\"\n";
    let load = |operations: &str| {
        std::fs::write(&path, format!("{keystone}[operations]\n{operations}")).unwrap();
        Config::load(Some(&path))
    };
    let cfg = load("").unwrap();
    assert!(
        cfg.validate_for_serve(true).is_ok(),
        "development generates one"
    );
    let err = cfg.validate_for_serve(false).unwrap_err().to_string();
    assert!(
        err.contains("seal_key or seal_key_file is required"),
        "{err}"
    );

    let file = dir.path().join("seal.key");
    std::fs::write(
        &file,
        "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\n\nAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n",
    )
    .unwrap();
    let cfg = load(&format!("seal_key_file = {file:?}\n")).unwrap();
    cfg.validate_for_serve(false).unwrap();
    let ring = cfg.operations.sealer().unwrap();
    assert_eq!(ring.key_ids().len(), 2);
    // The file is read once, when the configuration loads: the key ring does not read it again.
    std::fs::remove_file(&file).unwrap();
    assert_eq!(cfg.operations.sealer().unwrap().key_ids(), ring.key_ids());
    cfg.validate_for_serve(false).unwrap();
    std::fs::write(
        &file,
        "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\n\nAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=\n",
    )
    .unwrap();
    assert!(
        !format!("{cfg:?} {ring:?}").contains("AgICAgIC"),
        "no key in Debug output"
    );
    // What the second key sealed, the ring from the file opens.
    let mut previous = Config::default();
    previous.operations.seal_key = Some(secrecy::SecretString::from(
        "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=".to_string(),
    ));
    let sealed = previous
        .operations
        .sealer()
        .unwrap()
        .seal(&secrecy::SecretString::from("token".to_string()))
        .unwrap();
    assert!(ring.unseal(&sealed).is_ok());

    let both = format!(
        "seal_key = \"AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\"\nseal_key_file = {file:?}\n"
    );
    let err = load(&both).unwrap_err().to_string();
    assert!(err.contains("not both"), "{err}");
    let err = load("seal_key = \"c2hvcnQ=\"\n").unwrap_err().to_string();
    assert!(err.contains("32 bytes"), "{err}");
    let err = load("previous_seal_keys = [\"c2hvcnQ=\"]\nseal_key = \"AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("32 bytes"), "{err}");
    let missing = dir.path().join("nowhere.key");
    let err = load(&format!("seal_key_file = {missing:?}\n"))
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("seal_key_file") && err.contains("nowhere.key"),
        "{err}"
    );
}

/// The real binary loads a command's configuration once (the log format is taken from the same
/// load as the command's settings): the configuration file and the seal key file it names are
/// each opened once, as the kernel counts their opens (inotify).
#[test]
fn the_binary_loads_the_commands_configuration_once() {
    use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
    let dir = tempfile::tempdir().unwrap();
    let seal = dir.path().join("seal.key");
    std::fs::write(&seal, "AgICAgICAgICAgICAgICAgICAgICAgICAgICAgICAgI=\n").unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!("[log]\nformat = \"json\"\n[operations]\nseal_key_file = {seal:?}\n"),
    )
    .unwrap();
    let opens = Inotify::init(InitFlags::IN_NONBLOCK).unwrap();
    opens.add_watch(dir.path(), AddWatchFlags::IN_OPEN).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_magnum-capi"))
        .args(["migrate", "--config"])
        .arg(&config)
        .env_remove("MAGNUM_CAPI_CONFIG")
        .env_remove("MAGNUM_CAPI__DATABASE__URL")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("[database] url is required"),
        "the command did not get its configuration: {err}"
    );
    // The binary has exited: every open it made is queued (an empty queue ends the read).
    let mut opened: Vec<String> = Vec::new();
    while let Ok(events) = opens.read_events() {
        opened.extend(
            events
                .into_iter()
                .filter_map(|e| Some(e.name?.to_string_lossy().into_owned())),
        );
    }
    opened.sort();
    assert_eq!(opened, ["c.toml", "seal.key"], "each opened once");
}

/// `api-proxy` logs as its configuration's `[log] format` says (JSON on stderr here), as
/// `serve` does.
#[tokio::test]
async fn the_api_proxy_logs_in_the_configured_format() {
    const PROXY_KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let sim =
        magnum_capi::simkube::SimCluster::start(magnum_capi::simkube::SimOptions::for_tests())
            .await
            .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    // JSON is YAML: the kubeconfig as the simulated cluster gives it.
    std::fs::write(&kubeconfig, serde_json::to_vec(&sim.kubeconfig()).unwrap()).unwrap();
    let config = dir.path().join("c.toml");
    std::fs::write(
        &config,
        format!(
            "[log]\nformat = \"json\"\n[api_proxy]\nbind = \"127.0.0.1:0\"\nkubeconfig = {kubeconfig:?}\n"
        ),
    )
    .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_magnum-capi"))
        .args(["api-proxy", "--config"])
        .arg(&config)
        .env_remove("MAGNUM_CAPI_CONFIG")
        .env("RUST_LOG", "info")
        // The proxy key, which it refuses to start without, from the environment (a Secret).
        .env("MAGNUM_CAPI__API_PROXY__KEY", PROXY_KEY)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let serving = loop {
        match rx.recv_timeout(std::time::Duration::from_secs(60)) {
            Ok(line) if line.contains(PROXY_KEY) => panic!("the key is logged: {line}"),
            Ok(line) if line.contains("api-proxy serving") => break line,
            Ok(_) => continue,
            Err(e) => panic!("no `api-proxy serving` line on stderr: {e}"),
        }
    };
    let _ = child.kill();
    let _ = child.wait();
    let entry: serde_json::Value = serde_json::from_str(&serving)
        .unwrap_or_else(|e| panic!("not a JSON log line ({e}): {serving}"));
    assert_eq!(entry["fields"]["message"], "api-proxy serving", "{entry}");
}

/// The reference is generated from the typed configuration (`magnum-capi config sample`); the
/// committed copy must be what the code generates.
#[test]
fn the_committed_configuration_reference_matches_the_code() {
    let committed = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/etc/magnum-capi.toml.example"
    ))
    .expect("etc/magnum-capi.toml.example exists");
    assert!(
        committed == magnum_capi::config_sample::sample(),
        "etc/magnum-capi.toml.example is stale: run `{}`",
        magnum_capi::config_sample::REGENERATE
    );
}

/// The reference loads as it is and holds exactly the defaults; every key it shows commented
/// out, uncommented, is a key of the configuration with a value of its type.
#[test]
fn the_configuration_reference_parses_back_into_the_configuration() {
    let text = magnum_capi::config_sample::sample();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reference.toml");
    std::fs::write(&path, &text).unwrap();
    let loaded = Config::load(Some(&path)).expect("the reference loads");
    assert_eq!(format!("{loaded:?}"), format!("{:?}", Config::default()));

    // `# key = value` lines uncommented: the examples (tables of lists kept commented, since
    // their keys are the table's).
    let mut uncommented = String::new();
    let mut in_table_list = false;
    for line in text.lines() {
        if line.starts_with("# [[") {
            in_table_list = true;
        } else if line.starts_with('[') {
            in_table_list = false;
        }
        let example = line.strip_prefix("# ").filter(|l| {
            !in_table_list && l.split_once(" = ").is_some_and(|(k, _)| !k.contains(' '))
        });
        uncommented.push_str(example.unwrap_or(line));
        uncommented.push('\n');
    }
    let examples = uncommented
        .lines()
        .zip(text.lines())
        .filter(|(a, b)| a != b)
        .count();
    let parsed: Result<Config, _> = config::Config::builder()
        .add_source(config::File::from_str(
            &uncommented,
            config::FileFormat::Toml,
        ))
        .build()
        .and_then(|c| c.try_deserialize());
    let parsed = parsed.unwrap_or_else(|e| panic!("the examples do not parse: {e}\n{uncommented}"));
    assert!(examples > 20, "only {examples} examples uncommented");
    assert_eq!(
        parsed.database.url.as_deref(),
        Some("postgres://magnum:secret@127.0.0.1:5432/magnum")
    );
    assert_eq!(
        parsed.http.metrics_bind.map(|a| a.to_string()).as_deref(),
        Some("0.0.0.0:9512")
    );
}
